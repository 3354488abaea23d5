//! [`open_store`]: one siltdb database per node, holding both the Raft log and the state
//! machine (see [`keys`](crate::keys) for the layout and `docs/raft.md` for why one database).

use std::path::Path;
use std::sync::Arc;

use siltdb::{Db, Options};

use crate::{Error, LogStore, StateMachine};

/// Opens (creating if missing) the node storage in directory `dir`: the siltdb database in
/// `dir/db` and the current snapshot in `dir/snapshot`. Returns the log store and the state
/// machine to hand to [`openraft::Raft::new`].
///
/// The database is opened with siltdb's default options except `sync_writes(false)`: the log
/// store chooses durability per write (appends and the vote are synced, applies are not; see
/// [`LogStore`]).
///
/// If the snapshot file covers more of the log than the state machine has applied (a crash
/// during an install), the snapshot's data is loaded first.
///
/// Errors: [`Error::Io`] if the directory cannot be created; what [`Db::open_with`] returns
/// ([`Error::Db`]), for example a database locked by another process;
/// [`Error::Corruption`] if the snapshot file or the applied state does not decode.
pub fn open_store(dir: impl AsRef<Path>) -> Result<(LogStore, StateMachine), Error> {
    let dir = dir.as_ref();
    std::fs::create_dir_all(dir)?;
    let db = Arc::new(Db::open_with(
        dir.join("db"),
        Options::default().sync_writes(false),
    )?);
    let sm = StateMachine::open(db.clone(), dir.to_path_buf())?;
    let log = LogStore::new(db, sm.cover());
    Ok((log, sm))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;
    use crate::snapshot_file::Meta;
    use openraft::storage::{RaftLogStorage, RaftStateMachine};
    use openraft::{CommittedLeaderId, LogId};
    use std::io::Cursor;
    use std::time::Duration;

    /// openraft purges what a follower's new snapshot covers without waiting for the state
    /// machine to install it: the purge must wait for the snapshot file, or a crash in
    /// between would leave entries that neither the data nor a snapshot holds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_purge_during_an_install_is_written_only_after_the_snapshot_file() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, mut sm) = open_store(dir.path()).unwrap();
        let db = sm.db();
        let upto = LogId::new(CommittedLeaderId::new(1, 1), 5);
        let _receiver = sm.begin_receiving_snapshot().await.unwrap();
        let purge = tokio::spawn(async move { log.purge(upto).await.map(|()| log) });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!purge.is_finished(), "the purge went before the snapshot");
        assert!(db.get(keys::PURGED).unwrap().is_none());
        let meta = Meta {
            last_log_id: Some(upto),
            last_membership: Default::default(),
            snapshot_id: "s5".into(),
        };
        sm.install_snapshot(&meta, Box::new(Cursor::new(Vec::new())))
            .await
            .unwrap();
        let mut log = purge.await.unwrap().unwrap();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(upto));
        // A purge the saved file covers goes at once.
        log.purge(upto).await.unwrap();
    }
}
