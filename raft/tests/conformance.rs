//! openraft's own storage conformance suite (`openraft::testing::Suite::test_all`) run
//! against siltdb-raft's log store and state machine, each test case on a fresh database.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use siltdb_raft::{open_store, LogStore, NodeId, StateMachine, TypeConfig};
use tempfile::TempDir;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (log, sm) = open_store(dir.path()).expect("open the node store");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).expect("openraft conformance suite");
}
