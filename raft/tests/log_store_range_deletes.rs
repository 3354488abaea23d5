//! The log store keeps its promises on disk: a purge and a truncation are each one small
//! write (one range delete), whatever the number of entries they remove; the vote, the purge
//! point and the entries survive a reopen; an entry that does not decode is an error, never a
//! panic or a wrong entry.

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftLogReader, Vote};
use siltdb_raft::{keys, open_store, Request, TypeConfig};

type Entry = openraft::Entry<TypeConfig>;

fn log_id(i: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(2, 1), i)
}

fn entry(i: u64) -> Entry {
    Entry {
        log_id: log_id(i),
        payload: EntryPayload::Normal(Request::Put {
            key: format!("key{i}"),
            value: "x".repeat(100),
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
fn purge_and_truncate_are_one_small_write_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    {
        let (mut log, _sm) = open_store(dir.path()).unwrap();
        let db = log.db();
        rt.block_on(async {
            log.save_vote(&Vote::new(2, 1)).await.unwrap();
            for start in (1..=10_000u64).step_by(1_000) {
                // openraft's flush callback (which blocking_append waits for) fires only after
                // the WAL was fsynced.
                let syncs = db.stats().wal_syncs;
                log.blocking_append((start..start + 1_000).map(entry))
                    .await
                    .unwrap();
                assert!(
                    db.stats().wal_syncs > syncs,
                    "append acknowledged without an fsync"
                );
            }
            let before = db.stats();
            log.purge(log_id(5_000)).await.unwrap();
            let after = db.stats();
            assert_eq!(
                after.write_groups - before.write_groups,
                1,
                "one write for 5,000 entries"
            );
            assert!(after.user_bytes_written - before.user_bytes_written < 200);

            let before = db.stats();
            log.truncate(log_id(9_001)).await.unwrap();
            let after = db.stats();
            assert_eq!(after.write_groups - before.write_groups, 1);
            assert!(after.user_bytes_written - before.user_bytes_written < 200);

            let state = log.get_log_state().await.unwrap();
            assert_eq!(state.last_purged_log_id, Some(log_id(5_000)));
            assert_eq!(state.last_log_id, Some(log_id(9_000)));
            let got = log.try_get_log_entries(0..20_000).await.unwrap();
            assert_eq!(got.first().map(|e| e.log_id.index), Some(5_001));
            assert_eq!(got.len(), 4_000);
        });
    }
    // Reopen: the vote, the purge point and exactly the remaining entries are there.
    let (mut log, _sm) = open_store(dir.path()).unwrap();
    rt.block_on(async {
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(5_000)));
        assert_eq!(state.last_log_id, Some(log_id(9_000)));
        assert!(log.try_get_log_entries(1..=5_000).await.unwrap().is_empty());
        let e = log.try_get_log_entries(7_000..=7_000).await.unwrap();
        assert_eq!(e, vec![entry(7_000)]);
        // Purging everything leaves the purge point as the last log id.
        log.purge(log_id(9_000)).await.unwrap();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(log_id(9_000)));
    });
}

#[test]
fn an_entry_that_does_not_decode_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let (mut log, _sm) = open_store(dir.path()).unwrap();
    let db = log.db();
    rt.block_on(async {
        log.blocking_append((1..=3).map(entry)).await.unwrap();
        // Garbage under index 2, and index 3's key holding entry 1.
        db.insert(keys::log_key(2), b"{not json").unwrap();
        assert!(log.try_get_log_entries(1..=3).await.is_err());
        let one = serde_json::to_vec(&entry(1)).unwrap();
        db.insert(keys::log_key(2), &one).unwrap();
        assert!(
            log.try_get_log_entries(2..=2).await.is_err(),
            "an entry under another index's key"
        );
        db.insert(keys::VOTE, b"[").unwrap();
        assert!(log.read_vote().await.is_err());
    });
}
