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
