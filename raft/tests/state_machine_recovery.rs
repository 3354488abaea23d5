//! The state machine is never behind its own snapshot file, and a committed entry siltdb
//! cannot store is refused the same way on every node instead of stopping the state machine.

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::{CommittedLeaderId, EntryPayload, LogId};
use siltdb_raft::{open_store, Request, TypeConfig};

type Entry = openraft::Entry<TypeConfig>;

fn log_id(i: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), i)
}

fn put(i: u64, key: String, value: &str) -> Entry {
    Entry {
        log_id: log_id(i),
        payload: EntryPayload::Normal(Request::Put {
            key,
            value: value.into(),
        }),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_snapshot_file_ahead_of_the_data_is_loaded_at_open() {
    // A crash between saving an installed snapshot's file and writing its data leaves the
    // file ahead of the database: here, a node directory holding another node's snapshot
    // file and an empty database.
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let rt = rt();
    rt.block_on(async {
        let (_log, mut sm) = open_store(a.path()).unwrap();
        sm.apply((1..=100).map(|i| put(i, format!("k{i}"), "v")))
            .await
            .unwrap();
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snap.meta.last_log_id, Some(log_id(100)));
    });
    std::fs::copy(a.path().join("snapshot"), b.path().join("snapshot")).unwrap();
    rt.block_on(async {
        let (_log, mut sm) = open_store(b.path()).unwrap();
        let (applied, _) = sm.applied_state().await.unwrap();
        assert_eq!(
            applied,
            Some(log_id(100)),
            "the file's state was loaded at open"
        );
        assert_eq!(sm.get("k42").unwrap().as_deref(), Some("v"));
        let cur = sm.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(cur.meta.last_log_id, Some(log_id(100)));
    });
}

#[test]
fn an_entry_siltdb_cannot_store_is_refused_and_the_rest_apply() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    rt.block_on(async {
        let (_log, mut sm) = open_store(dir.path()).unwrap();
        let huge_key = "k".repeat(siltdb_raft::MAX_USER_KEY + 1);
        let ok_key = "k".repeat(siltdb_raft::MAX_USER_KEY);
        let replies = sm
            .apply(vec![
                put(1, "a".into(), "1"),
                put(2, huge_key.clone(), "2"),
                put(3, ok_key.clone(), "3"),
            ])
            .await
            .expect("apply must not fail on an oversized key");
        assert_eq!(
            replies.iter().map(|r| r.refused).collect::<Vec<_>>(),
            [false, true, false]
        );
        let (applied, _) = sm.applied_state().await.unwrap();
        assert_eq!(applied, Some(log_id(3)));
        assert_eq!(sm.get("a").unwrap().as_deref(), Some("1"));
        assert_eq!(sm.get(&ok_key).unwrap().as_deref(), Some("3"));
        // The refused entry wrote nothing: the data holds the other two keys only.
        assert_eq!(sm.db().prefix([siltdb_raft::keys::DATA_PREFIX]).count(), 2);
    });
}
