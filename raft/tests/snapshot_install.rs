//! A node far behind catches up by snapshot: a follower is killed, the others take writes,
//! build a snapshot and purge their logs (one range delete each), and the follower, restarted,
//! can only catch up by installing the leader's snapshot (a range delete plus a batch load).
//! It must then hold every key, and keep them across another restart.

use std::path::Path;
use std::time::Duration;

use siltdb_raft::client::{self, Client};
use siltdb_raft::local_cluster::LocalCluster;
use siltdb_raft::wire::{ClientReply, ClientRequest};

const KEYS: usize = 2_000;

/// The value of key `i`: 2 KiB, so that the snapshot (about 4 MiB) takes several messages of
/// the default 1 MiB, and each took longer than openraft's own default timeout for a
/// snapshot message (200 ms) allowed, in this unoptimised build on a busy machine: the
/// follower never caught up.
fn value(i: usize) -> String {
    format!("v{i}-{}", "x".repeat(2048))
}

#[test]
fn follower_behind_a_purged_log_catches_up_by_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_siltdb-raft-node"));
    // No automatic snapshots: the only snapshot is the one the test asks for.
    let mut cluster =
        LocalCluster::start(exe, dir.path(), 3, &["--snapshot-every", "1000000000"]).unwrap();
    let leader = cluster.wait_leader(Duration::from_secs(30), &[]).unwrap();
    let behind = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let mut c = Client::new(cluster.addrs());
    c.put("old-key", "written before the follower went down")
        .unwrap();
    c.put("doomed", "deleted while the follower is down")
        .unwrap();
    cluster
        .wait_status(
            behind,
            Duration::from_secs(30),
            "apply the first writes",
            |s| s.last_applied.unwrap_or(0) >= 3,
        )
        .unwrap();
    cluster.kill(behind).unwrap();

    for i in 0..KEYS {
        c.put(&format!("k{i:06}"), &value(i)).unwrap();
    }
    c.delete("doomed").unwrap();
    // Snapshot and purge on every running node, so no log holds what the follower misses.
    for id in cluster.ids().into_iter().filter(|&id| id != behind) {
        let r = client::call(
            cluster.addr(id),
            ClientRequest::SnapshotAndPurge,
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(r, ClientReply::Done, "snapshot and purge on node {id}");
    }
    let l = client::status(cluster.addr(leader)).unwrap();
    let purged = l.purged.expect("the leader purged its log");
    assert!(purged >= KEYS as u64, "purged only up to {purged}");

    cluster.restart(behind).unwrap();
    let target = l.last_applied.unwrap();
    let s = cluster
        .wait_status(behind, Duration::from_secs(60), "catch up", |s| {
            s.last_applied.unwrap_or(0) >= target
        })
        .unwrap();
    // It got there by a snapshot: it holds one at or past the leader's purge point, and its
    // own log starts after it.
    assert!(s.snapshot.unwrap_or(0) >= purged, "{s:?}");
    assert!(s.purged.unwrap_or(0) >= purged, "{s:?}");

    let check = |cluster: &LocalCluster| {
        let addr = cluster.addr(behind).to_string();
        let mut r = Client::new([addr.clone()]);
        for i in 0..KEYS {
            assert_eq!(
                r.get_local(&addr, &format!("k{i:06}")).unwrap(),
                Some(value(i)),
                "key {i}"
            );
        }
        assert!(r.get_local(&addr, "old-key").unwrap().is_some());
        assert_eq!(
            r.get_local(&addr, "doomed").unwrap(),
            None,
            "the snapshot's range delete removed it"
        );
    };
    check(&cluster);

    // The installed snapshot and state survive a SIGKILL and restart of that node.
    cluster.restart(behind).unwrap();
    cluster
        .wait_status(behind, Duration::from_secs(60), "come back", |s| {
            s.last_applied.unwrap_or(0) >= target
        })
        .unwrap();
    check(&cluster);
    // And writes go on replicating to it.
    let idx = c.put("after", "snapshot").unwrap();
    cluster
        .wait_status(behind, Duration::from_secs(30), "apply a new write", |s| {
            s.last_applied.unwrap_or(0) >= idx
        })
        .unwrap();
    assert_eq!(
        client::get_local(cluster.addr(behind), "after")
            .unwrap()
            .as_deref(),
        Some("snapshot")
    );
}

#[test]
fn a_snapshot_chunk_that_skips_ahead_is_refused_and_the_node_lives_on() {
    // Frames no peer sends, under a vote high enough for openraft to take them: the first
    // chunk of a snapshot, then a chunk of it at an offset of 2^40 bytes. Handed on, the
    // second would make openraft's receiver grow its buffer to the offset (1 TiB of zeros)
    // and abort the process. The node closes the connection instead and goes on serving.
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_siltdb-raft-node"));
    let cluster = LocalCluster::start(exe, dir.path(), 1, &[]).unwrap();
    let leader = cluster.wait_leader(Duration::from_secs(30), &[]).unwrap();
    let addr = cluster.addr(leader).to_string();
    let chunk_of = |id: &str, term: u64, offset: u64| {
        siltdb_raft::wire::Message::Snapshot(openraft::raft::InstallSnapshotRequest {
            vote: openraft::Vote::new_committed(term, 7),
            meta: openraft::SnapshotMeta {
                last_log_id: None,
                last_membership: Default::default(),
                snapshot_id: id.into(),
            },
            offset,
            data: vec![0],
            done: false,
        })
    };
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let chunk = |offset: u64| chunk_of("forged", u64::MAX / 2, offset);
    let first: std::io::Result<serde_json::Value> =
        siltdb_raft::wire::call_blocking(&mut s, &chunk(0));
    assert!(first.is_ok(), "{first:?}");
    // A chunk of another stream under a lower vote (a deposed leader's): openraft answers it
    // with its own vote and keeps nothing, so the stream in flight stays the one it holds,
    // and its next chunk is taken (review finding, session 23: it was refused, the guard
    // having switched to the stale stream).
    let stale: std::io::Result<serde_json::Value> =
        siltdb_raft::wire::call_blocking(&mut s, &chunk_of("stale", 0, 0));
    assert!(stale.is_ok(), "{stale:?}");
    let next: std::io::Result<serde_json::Value> =
        siltdb_raft::wire::call_blocking(&mut s, &chunk(1));
    assert!(
        next.is_ok(),
        "the stream's next chunk was refused: {next:?}"
    );
    let second: std::io::Result<serde_json::Value> =
        siltdb_raft::wire::call_blocking(&mut s, &chunk(1 << 40));
    assert!(
        second.is_err(),
        "the chunk past the stream got an answer: {second:?}"
    );
    let status = siltdb_raft::client::status(&addr).expect("the node still answers");
    assert_eq!(status.id, leader);
    let mut c = Client::new(cluster.addrs());
    c.put("after", "the forged chunks").unwrap();
    assert_eq!(
        c.get_local(&addr, "after").unwrap().as_deref(),
        Some("the forged chunks")
    );
}
