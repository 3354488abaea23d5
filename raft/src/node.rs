//! A running node: openraft over siltdb storage, serving the [`wire`] protocol on one TCP
//! listener for both its peers and its clients.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, Config, ServerState, SnapshotPolicy};
use tokio::net::{TcpListener, TcpStream};

use crate::wire::{self, ClientReply, ClientRequest, Message, NodeStatus};
use crate::{open_store, state_machine, Error, NodeId, Raft, Request, TcpNetwork};

/// How to run one node. `NodeConfig::new(id, addr, dir)` gives the defaults below.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The node's id (any `u64`, unique in the cluster).
    pub id: NodeId,
    /// The address to listen on and that peers use, e.g. `127.0.0.1:21001`.
    pub addr: String,
    /// The node's directory: its siltdb database and snapshot file.
    pub dir: PathBuf,
    /// Heartbeat interval, in whole milliseconds (openraft's unit; a fraction is dropped).
    /// Default 100 ms; at least 1 ms, at most a day.
    pub heartbeat: Duration,
    /// Election timeout range (a follower that hears no leader for a random time in it
    /// stands for election), in whole milliseconds. Default 500..1000 ms: three nodes share
    /// a 2-core machine in the tests, so heartbeats can be late. The low end must be above
    /// the heartbeat and below the high end, and the high end at most a day (openraft
    /// multiplies these times, and a larger one would overflow).
    pub election_timeout: (Duration, Duration),
    /// Build a snapshot after this many applied entries since the last one. Default 50,000;
    /// from 1 to 2^62 (`u64::MAX` or any value above 2^62 is refused, not taken as "never").
    pub snapshot_every: u64,
    /// Entries kept in the log behind a snapshot for followers that lag a little. Default
    /// 1,000.
    pub keep_after_snapshot: u64,
    /// Bytes of snapshot data a leader sends a follower per message. Default 1 MiB; from 1
    /// byte to 8 MiB (a message encodes each byte in up to four: the frame limit is 64 MiB);
    /// [`Node::start`] fails with [`Error::InvalidArgument`] outside.
    pub snapshot_chunk: usize,
    /// How long a leader waits for a follower to take one message of a snapshot, and for the
    /// last one, to install the whole snapshot (save it, fsync it, load it into its
    /// database). A send that times out is abandoned and later started again from the
    /// beginning, so this must be above the time to install the largest snapshot. Default
    /// 60 s (openraft's default, 200 ms, let no snapshot of a few MiB reach a follower on a
    /// busy machine); in whole milliseconds, at least 1 ms and at most a day
    /// ([`Node::start`] fails with [`Error::InvalidArgument`] outside).
    pub snapshot_timeout: Duration,
}

impl NodeConfig {
    /// A node with the default timings (see the fields).
    pub fn new(id: NodeId, addr: impl Into<String>, dir: impl Into<PathBuf>) -> NodeConfig {
        NodeConfig {
            id,
            addr: addr.into(),
            dir: dir.into(),
            heartbeat: Duration::from_millis(100),
            election_timeout: (Duration::from_millis(500), Duration::from_millis(1000)),
            snapshot_every: 50_000,
            keep_after_snapshot: 1_000,
            snapshot_chunk: 1 << 20,
            snapshot_timeout: Duration::from_secs(60),
        }
    }

    fn raft_config(&self) -> Result<Config, Error> {
        // openraft multiplies these (`election_timeout_max * 2`, `heartbeat * 3 / 2`): keep
        // them far from overflowing.
        const DAY_MS: u128 = 24 * 3600 * 1000;
        let millis = |d: Duration, what: &str| match d.as_millis() {
            ms @ ..=DAY_MS => Ok(ms as u64),
            _ => Err(Error::InvalidArgument(format!(
                "{what} {d:?} is over a day"
            ))),
        };
        let heartbeat_interval = millis(self.heartbeat, "heartbeat")?;
        // openraft takes 0 ms as given: its timers would fire at once, forever.
        if heartbeat_interval == 0 {
            return Err(Error::InvalidArgument(format!(
                "heartbeat {:?} is under 1 ms",
                self.heartbeat
            )));
        }
        // openraft adds the threshold to a log index: keep the sum far from overflowing.
        if !(1..=1 << 62).contains(&self.snapshot_every) {
            return Err(Error::InvalidArgument(format!(
                "snapshot_every {} is not in 1..=2^62",
                self.snapshot_every
            )));
        }
        if !(1..=MAX_SNAPSHOT_CHUNK).contains(&self.snapshot_chunk) {
            return Err(Error::InvalidArgument(format!(
                "snapshot_chunk {} is not in 1..={MAX_SNAPSHOT_CHUNK}",
                self.snapshot_chunk
            )));
        }
        let install_snapshot_timeout = millis(self.snapshot_timeout, "snapshot timeout")?;
        if install_snapshot_timeout == 0 {
            return Err(Error::InvalidArgument(format!(
                "snapshot timeout {:?} is under 1 ms",
                self.snapshot_timeout
            )));
        }
        let c = Config {
            cluster_name: "siltdb-raft".into(),
            heartbeat_interval,
            election_timeout_min: millis(self.election_timeout.0, "election timeout")?,
            election_timeout_max: millis(self.election_timeout.1, "election timeout")?,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every),
            max_in_snapshot_log_to_keep: self.keep_after_snapshot,
            snapshot_max_chunk_size: self.snapshot_chunk as u64,
            install_snapshot_timeout,
            ..Default::default()
        };
        c.validate()
            .map_err(|e| Error::InvalidArgument(e.to_string()))
    }
}

/// The largest [`NodeConfig::snapshot_chunk`].
const MAX_SNAPSHOT_CHUNK: usize = 8 << 20;

/// A running node. Dropping it does not stop the server task; call [`Node::shutdown`].
#[derive(Clone)]
pub struct Node {
    id: NodeId,
    raft: Raft,
    db: Arc<siltdb::Db>,
    /// Local reads of the state machine.
    data: state_machine::DataReader,
    /// Bytes received so far of each snapshot being streamed to this node, by snapshot id
    /// (see [`Node::snapshot_chunk_fits`]).
    snapshot_progress: Arc<std::sync::Mutex<std::collections::HashMap<String, u64>>>,
}

impl Node {
    /// Opens the node's storage, starts Raft and listens on `config.addr` (in the current
    /// tokio runtime). If `init` is non-empty and the node is fresh, initialises a cluster with
    /// those voters; on a node that already has state, `init` is ignored.
    ///
    /// Errors: [`Error::InvalidArgument`] for bad timings, or an `init` whose addresses are
    /// not `host:port` or too many or too long (see [`membership_fits`](crate::membership_fits)),
    /// checked before anything is opened; what [`open_store`] returns; [`Error::Remote`] if
    /// openraft fails to start or to initialise the cluster; [`Error::Io`] if the address
    /// cannot be bound.
    pub async fn start(config: NodeConfig, init: BTreeMap<NodeId, String>) -> Result<Node, Error> {
        let raft_config = Arc::new(config.raft_config()?);
        let members: Vec<&str> = init.values().map(String::as_str).collect();
        Self::check_members(&members, &members)?;
        let (log, sm) = open_store(&config.dir)?;
        let db = sm.db();
        let data = sm.reader();
        let raft = Raft::new(config.id, raft_config, TcpNetwork, log, sm)
            .await
            .map_err(|e| Error::Remote(e.to_string()))?;
        let listener = TcpListener::bind(&config.addr).await?;
        let node = Node {
            id: config.id,
            raft,
            db,
            data,
            snapshot_progress: Arc::default(),
        };
        if !init.is_empty() {
            node.initialize(init).await?;
        }
        let server = node.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of descriptors, most likely: do not spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                tokio::spawn(server.clone().serve(stream));
            }
        });
        Ok(node)
    }

    /// The Raft handle.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Stops Raft (the listener then answers every request with an error).
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }

    async fn initialize(&self, members: BTreeMap<NodeId, String>) -> Result<(), Error> {
        if self
            .raft
            .is_initialized()
            .await
            .map_err(|e| Error::Remote(e.to_string()))?
        {
            return Ok(());
        }
        let nodes: BTreeMap<NodeId, BasicNode> = members
            .into_iter()
            .map(|(id, addr)| (id, BasicNode { addr }))
            .collect();
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            // Another node initialised first, or this one already has a log: fine.
            Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(Error::Remote(e.to_string())),
        }
    }

    /// The end of `rpc`'s chunk if it continues what this node holds of its snapshot: a
    /// peer streams a snapshot in order, each chunk at the offset where the last one ended
    /// (or again at an earlier one, a retry). A chunk that skips ahead would make openraft's
    /// receiver grow its buffer to the offset, zero-filled: one forged frame with an offset of
    /// 2^40 would abort the process. `None` for such a chunk.
    fn snapshot_chunk_fits(
        &self,
        rpc: &openraft::raft::InstallSnapshotRequest<crate::TypeConfig>,
    ) -> Option<u64> {
        let end = rpc
            .offset
            .checked_add(u64::try_from(rpc.data.len()).ok()?)?;
        let held = if rpc.offset == 0 {
            0
        } else {
            let p = self
                .snapshot_progress
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            p.get(&rpc.meta.snapshot_id).copied().unwrap_or(0)
        };
        (rpc.offset <= held).then_some(end)
    }

    async fn serve(self, mut stream: TcpStream) {
        loop {
            let msg: Message = match wire::read_frame(&mut stream).await {
                Ok(Some(m)) => m,
                _ => return,
            };
            let sent = match msg {
                Message::Append(rpc) => {
                    wire::write_frame(&mut stream, &self.raft.append_entries(rpc).await).await
                }
                Message::Vote(rpc) => {
                    wire::write_frame(&mut stream, &self.raft.vote(rpc).await).await
                }
                Message::Snapshot(rpc) => {
                    let Some(end) = self.snapshot_chunk_fits(&rpc) else {
                        // Not a chunk a peer sends: the connection ends (a peer would retry).
                        return;
                    };
                    let (id, done, vote) = (rpc.meta.snapshot_id.clone(), rpc.done, rpc.vote);
                    let reply = self.raft.install_snapshot(rpc).await;
                    // openraft takes a chunk whose vote is at least its own, and answers one
                    // with a lower vote with its own without keeping it: neither does the
                    // guard then.
                    let taken = match &reply {
                        Ok(resp) => resp.vote <= vote,
                        Err(_) => false,
                    };
                    if taken {
                        let mut p = self
                            .snapshot_progress
                            .lock()
                            .unwrap_or_else(|e| e.into_inner());
                        if done {
                            p.remove(&id);
                        } else {
                            // Only the newest stream is kept, as openraft keeps only one.
                            p.retain(|k, _| *k == id);
                            let got = p.entry(id).or_insert(0);
                            *got = (*got).max(end);
                        }
                    }
                    wire::write_frame(&mut stream, &reply).await
                }
                Message::Client(req) => {
                    let reply = self.client(req).await;
                    wire::write_frame(&mut stream, &reply).await
                }
            };
            if sent.is_err() {
                return;
            }
        }
    }

    fn not_leader(leader: Option<NodeId>, node: Option<BasicNode>) -> ClientReply {
        ClientReply::NotLeader {
            leader,
            addr: node.map(|n| n.addr),
        }
    }

    fn write_reply<T>(
        r: Result<T, RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>>,
        ok: impl FnOnce(T) -> ClientReply,
    ) -> ClientReply {
        match r {
            Ok(t) => ok(t),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Self::not_leader(f.leader_id, f.leader_node)
            }
            Err(e) => ClientReply::Error(e.to_string()),
        }
    }

    /// Checks a membership of the addresses `all` whose `new` ones join it:
    /// [`membership_fits`](crate::membership_fits) must hold, and each new address must be
    /// `host:port`. Errors: [`Error::InvalidArgument`].
    fn check_members(all: &[&str], new: &[&str]) -> Result<(), Error> {
        if !crate::membership_fits(all.iter().copied()) {
            return Err(Error::InvalidArgument(format!(
                "a membership holds at most {} nodes, each address at most {} bytes",
                crate::MAX_MEMBERS,
                crate::MAX_NODE_ADDR
            )));
        }
        match new.iter().find(|a| !crate::valid_node_addr(a)) {
            Some(bad) => Err(Error::InvalidArgument(format!("{bad:?} is not host:port"))),
            None => Ok(()),
        }
    }

    /// Answers one client request. A put or delete that
    /// [`request_fits`](crate::request_fits) refuses (a key over
    /// [`MAX_USER_KEY`](crate::MAX_USER_KEY) bytes, a value over siltdb's `MAX_VALUE_SIZE`,
    /// or a log entry that would not fit one network frame), and an `Init` or `AddLearner`
    /// whose membership [`membership_fits`](crate::membership_fits) refuses, are answered
    /// with an error and never reach the log.
    pub async fn client(&self, req: ClientRequest) -> ClientReply {
        let write = match req {
            ClientRequest::Put { key, value } => Request::Put { key, value },
            ClientRequest::Delete { key } => Request::Delete { key },
            ClientRequest::Get { key, linearizable } => {
                return self.get(&key, linearizable).await;
            }
            ClientRequest::Status => return ClientReply::Status(self.status()),
            ClientRequest::Init { members } => {
                let addrs: Vec<&str> = members.values().map(String::as_str).collect();
                if let Err(e) = Self::check_members(&addrs, &addrs) {
                    return ClientReply::Error(e.to_string());
                }
                return match self.initialize(members).await {
                    Ok(()) => ClientReply::Done,
                    Err(e) => ClientReply::Error(e.to_string()),
                };
            }
            ClientRequest::AddLearner { id, addr } => {
                let m = self.raft.metrics().borrow().membership_config.clone();
                let others = m.membership().nodes().filter(|(n, _)| **n != id);
                let mut addrs: Vec<&str> = others.map(|(_, node)| node.addr.as_str()).collect();
                addrs.push(&addr);
                if let Err(e) = Self::check_members(&addrs, &[&addr]) {
                    return ClientReply::Error(e.to_string());
                }
                return Self::write_reply(
                    self.raft.add_learner(id, BasicNode { addr }, true).await,
                    |_| ClientReply::Done,
                );
            }
            ClientRequest::ChangeMembership { voters } => {
                return Self::write_reply(
                    self.raft
                        .change_membership(ChangeMembers::ReplaceAllVoters(voters), false)
                        .await,
                    |_| ClientReply::Done,
                );
            }
            ClientRequest::SnapshotAndPurge => {
                return match self.snapshot_and_purge().await {
                    Ok(()) => ClientReply::Done,
                    Err(e) => ClientReply::Error(e.to_string()),
                };
            }
        };
        if !crate::request_fits(&write) {
            return ClientReply::Error(format!(
                "invalid argument: keys are at most {} bytes, values at most {} bytes, and a \
                 write's log entry at most {} bytes of JSON",
                crate::MAX_USER_KEY,
                siltdb::MAX_VALUE_SIZE,
                wire::MAX_FRAME
            ));
        }
        Self::write_reply(self.raft.client_write(write).await, |r| {
            ClientReply::Written {
                index: r.log_id.index,
            }
        })
    }

    /// A read of `key` from this node's state machine, after checking that this node is
    /// still the leader if `linearizable`.
    async fn get(&self, key: &str, linearizable: bool) -> ClientReply {
        if linearizable {
            match self.raft.ensure_linearizable().await {
                Ok(_) => {}
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                    return Self::not_leader(f.leader_id, f.leader_node)
                }
                Err(e) => return ClientReply::Error(e.to_string()),
            }
        }
        match self.data.get(key) {
            Ok(v) => ClientReply::Value(v),
            Err(e) => ClientReply::Error(e.to_string()),
        }
    }

    async fn snapshot_and_purge(&self) -> Result<(), Error> {
        let applied = self.raft.metrics().borrow().last_applied.map(|l| l.index);
        let Some(applied) = applied else {
            return Ok(());
        };
        let unavailable = |e: &dyn std::fmt::Display| Error::Unavailable(e.to_string());
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|e| unavailable(&e))?;
        self.raft
            .wait(Some(Duration::from_secs(30)))
            .metrics(
                |m| m.snapshot.is_some_and(|s| s.index >= applied),
                "snapshot for purge",
            )
            .await
            .map_err(|e| unavailable(&e))?;
        self.raft
            .trigger()
            .purge_log(applied)
            .await
            .map_err(|e| unavailable(&e))?;
        self.raft
            .wait(Some(Duration::from_secs(30)))
            .metrics(|m| m.purged.is_some_and(|p| p.index >= applied), "purge")
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    /// This node's state.
    pub fn status(&self) -> NodeStatus {
        let m = self.raft.metrics().borrow().clone();
        let stats = self.db.stats();
        let leader_addr = m.current_leader.and_then(|l| {
            m.membership_config
                .membership()
                .get_node(&l)
                .map(|n| n.addr.clone())
        });
        NodeStatus {
            id: self.id,
            state: match m.state {
                ServerState::Leader => "Leader",
                ServerState::Follower => "Follower",
                ServerState::Candidate => "Candidate",
                ServerState::Learner => "Learner",
                ServerState::Shutdown => "Shutdown",
            }
            .to_string(),
            term: m.current_term,
            leader: m.current_leader,
            leader_addr,
            last_log_index: m.last_log_index,
            last_applied: m.last_applied.map(|l| l.index),
            snapshot: m.snapshot.map(|l| l.index),
            purged: m.purged.map(|l| l.index),
            voters: m
                .membership_config
                .membership()
                .voter_ids()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            wal_syncs: stats.wal_syncs,
            write_groups: stats.write_groups,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> NodeConfig {
        NodeConfig::new(1, "127.0.0.1:0", "/nonexistent")
    }

    /// Review finding (session 23): `serve --init 1=typo` (the path `LocalCluster` uses too)
    /// made a membership whose address no peer could dial; it is refused before anything is
    /// opened.
    #[tokio::test]
    async fn an_init_address_that_is_not_host_port_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = NodeConfig::new(1, "127.0.0.1:0", dir.path());
        let init = BTreeMap::from([(1, "typo".to_string())]);
        match Node::start(config, init).await {
            Err(Error::InvalidArgument(_)) => {}
            Err(e) => panic!("expected InvalidArgument, got {e}"),
            Ok(_) => panic!("a node started with init address \"typo\""),
        }
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }

    #[test]
    fn the_defaults_are_valid() {
        let c = config().raft_config().unwrap();
        assert_eq!(c.heartbeat_interval, 100);
        assert_eq!(c.snapshot_policy, SnapshotPolicy::LogsSinceLast(50_000));
        // Not openraft's 200 ms for a snapshot message (the last one installs it all).
        assert_eq!(c.install_snapshot_timeout, 60_000);
        assert_eq!(c.snapshot_max_chunk_size, 1 << 20);
    }

    /// Review finding (session 22): a heartbeat under 1 ms became 0 ms, which openraft's
    /// own check accepts (it only compares it with the election timeout), and a snapshot
    /// threshold of 0 or `u64::MAX` reached openraft (a snapshot per commit; an overflow).
    #[test]
    fn bad_timings_and_thresholds_are_invalid_arguments() {
        let bad = [
            NodeConfig {
                heartbeat: Duration::from_micros(500),
                ..config()
            },
            NodeConfig {
                heartbeat: Duration::ZERO,
                ..config()
            },
            NodeConfig {
                election_timeout: (Duration::from_millis(50), Duration::from_millis(1000)),
                ..config()
            },
            NodeConfig {
                election_timeout: (Duration::from_millis(900), Duration::from_millis(900)),
                ..config()
            },
            NodeConfig {
                election_timeout: (Duration::from_millis(500), Duration::MAX),
                ..config()
            },
            NodeConfig {
                election_timeout: (
                    Duration::from_millis(500),
                    Duration::from_millis(u64::MAX / 2 + 1),
                ),
                ..config()
            },
            NodeConfig {
                heartbeat: Duration::from_secs(2 * 86_400),
                election_timeout: (
                    Duration::from_secs(3 * 86_400),
                    Duration::from_secs(4 * 86_400),
                ),
                ..config()
            },
            NodeConfig {
                snapshot_every: 0,
                ..config()
            },
            NodeConfig {
                snapshot_every: u64::MAX,
                ..config()
            },
            NodeConfig {
                snapshot_chunk: 0,
                ..config()
            },
            NodeConfig {
                snapshot_chunk: MAX_SNAPSHOT_CHUNK + 1,
                ..config()
            },
            NodeConfig {
                snapshot_timeout: Duration::from_micros(999),
                ..config()
            },
            NodeConfig {
                snapshot_timeout: Duration::from_secs(2 * 86_400),
                ..config()
            },
        ];
        for c in bad {
            assert!(
                matches!(c.raft_config(), Err(Error::InvalidArgument(_))),
                "{c:?}"
            );
        }
        let edge = NodeConfig {
            heartbeat: Duration::from_millis(1),
            election_timeout: (Duration::from_millis(2), Duration::from_millis(3)),
            snapshot_every: 1 << 62,
            snapshot_chunk: MAX_SNAPSHOT_CHUNK,
            snapshot_timeout: Duration::from_millis(1),
            ..config()
        };
        assert!(edge.raft_config().is_ok());
        let small = NodeConfig {
            snapshot_chunk: 1,
            snapshot_timeout: Duration::from_secs(86_400),
            ..config()
        };
        assert!(small.raft_config().is_ok());
    }
}
