//! A node process that exits before it answers (here: a flag `serve` refuses) fails
//! `LocalCluster::start` at once with `Error::Unavailable`, instead of the cluster waiting out
//! its 20-second deadline for a node that will never answer.

use std::path::Path;
use std::time::{Duration, Instant};

use siltdb_raft::local_cluster::LocalCluster;
use siltdb_raft::Error;

#[test]
fn a_node_that_exits_fails_the_start_before_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_siltdb-raft-node"));
    let started = Instant::now();
    // `serve` refuses a snapshot chunk of 0 bytes and exits.
    let res = LocalCluster::start(exe, dir.path(), 2, &["--snapshot-chunk", "0"]);
    let took = started.elapsed();
    assert!(
        matches!(res, Err(Error::Unavailable(_))),
        "start should fail with Unavailable, got {:?}",
        res.err()
    );
    // The deadline is 20 s: the exit must have been seen well before it. (Not a speed
    // target: a start that waited for the deadline took 20 s or more.)
    assert!(took < Duration::from_secs(15), "took {took:?}");
    // The node's log holds why it exited.
    let log = std::fs::read_to_string(dir.path().join("node-1.log")).unwrap();
    assert!(!log.is_empty());
}

/// A node that `add_node` could not start is not kept: the same id can be added again once
/// the cause is gone (review, session 24: the retry failed with "node exists").
#[test]
fn a_node_that_failed_to_start_can_be_added_again() {
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_siltdb-raft-node"));
    let mut cluster = LocalCluster::start(exe, dir.path(), 1, &[]).unwrap();
    // A file where node 2's directory goes: its process cannot open its database and exits.
    let blocker = dir.path().join("node-2");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let first = cluster.add_node(2);
    assert!(matches!(first, Err(Error::Unavailable(_))), "{first:?}");
    assert_eq!(cluster.ids(), vec![1]);
    std::fs::remove_file(&blocker).unwrap();
    let addr = cluster.add_node(2).unwrap();
    assert_eq!(cluster.addr(2), addr);
    assert_eq!(cluster.ids(), vec![1, 2]);
}
