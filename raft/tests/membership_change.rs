//! Cluster membership through the client API: a fresh fourth node joins as a learner, catches
//! up, replaces a voter, and the cluster keeps committing with the old voter gone.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use siltdb_raft::client::{self, Client};
use siltdb_raft::local_cluster::LocalCluster;
use siltdb_raft::wire::{ClientReply, ClientRequest};

#[test]
fn a_learner_joins_catches_up_and_replaces_a_voter() {
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_siltdb-raft-node"));
    let mut cluster = LocalCluster::start(exe, dir.path(), 3, &[]).unwrap();
    let leader = cluster.wait_leader(Duration::from_secs(30), &[]).unwrap();
    let mut c = Client::new(cluster.addrs());
    for i in 0..200 {
        c.put(&format!("k{i}"), &format!("v{i}")).unwrap();
    }

    // A learner whose address would make every membership entry huge is refused before
    // it reaches the log (an entry too large for a frame would stall every later write).
    let r = c.request(ClientRequest::AddLearner {
        id: 9,
        addr: "h".repeat(siltdb_raft::MAX_NODE_ADDR + 1),
    });
    assert!(
        matches!(&r, Err(siltdb_raft::Error::Remote(e)) if e.starts_with("invalid argument")),
        "{r:?}"
    );
    // So is one whose address no peer could dial (openraft would keep it for that id).
    let r = c.request(ClientRequest::AddLearner {
        id: 9,
        addr: "typo".into(),
    });
    assert!(
        matches!(&r, Err(siltdb_raft::Error::Remote(e)) if e.starts_with("invalid argument")),
        "{r:?}"
    );
    // Nothing stalled: the next write commits.
    c.put("after-a-refused-learner", "x").unwrap();

    let addr4 = cluster.add_node(4).unwrap();
    let r = c
        .request(ClientRequest::AddLearner {
            id: 4,
            addr: addr4.clone(),
        })
        .unwrap();
    assert_eq!(r, ClientReply::Done);
    // Blocking add: the learner has the writes once the call returns (give it a moment to
    // apply what it has received).
    cluster
        .wait_status(4, Duration::from_secs(30), "apply the log", |s| {
            s.last_applied.unwrap_or(0) >= 200
        })
        .unwrap();
    assert_eq!(
        client::get_local(&addr4, "k199").unwrap().as_deref(),
        Some("v199")
    );

    // Replace a follower with the new node.
    let gone = cluster
        .ids()
        .into_iter()
        .find(|&id| id != leader && id != 4)
        .unwrap();
    let voters: BTreeSet<u64> = [1, 2, 3, 4].into_iter().filter(|&id| id != gone).collect();
    let r = c
        .request(ClientRequest::ChangeMembership {
            voters: voters.clone(),
        })
        .unwrap();
    assert_eq!(r, ClientReply::Done);
    let s = client::status(cluster.addr(leader)).unwrap();
    assert_eq!(s.voters, voters.iter().copied().collect::<Vec<_>>());

    // With the old voter killed, a majority of the new voters still commits.
    cluster.kill(gone).unwrap();
    let idx = c.put("after-change", "yes").unwrap();
    cluster
        .wait_status(4, Duration::from_secs(30), "apply the new write", |s| {
            s.last_applied.unwrap_or(0) >= idx
        })
        .unwrap();
    assert_eq!(
        client::get_local(&addr4, "after-change")
            .unwrap()
            .as_deref(),
        Some("yes")
    );
    assert_eq!(c.read("k0").unwrap().as_deref(), Some("v0"));

    // A key siltdb cannot store is refused before it reaches the log.
    let huge = "x".repeat(siltdb_raft::MAX_USER_KEY + 1);
    assert!(matches!(
        c.put(&huge, "v"),
        Err(siltdb_raft::Error::Remote(_))
    ));

    // An unknown voter is refused with an error, not a hang.
    let bad: BTreeSet<u64> = [1, 2, 3, 4, 99].into_iter().collect();
    assert!(c
        .request(ClientRequest::ChangeMembership { voters: bad })
        .is_err());
}
