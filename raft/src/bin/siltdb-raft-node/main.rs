//! `siltdb-raft-node`: run one node of a siltdb-raft cluster (`serve`), talk to a cluster
//! (`put`, `get`, `read`, `delete`, `status`, membership, `snapshot`), and measure one
//! (`bench`, `bench-purge`; the figures in `docs/raft.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use siltdb_raft::client::{self, Client};
use siltdb_raft::node::{Node, NodeConfig};
use siltdb_raft::wire::{ClientReply, ClientRequest};
use siltdb_raft::{Error, NodeId};

mod bench;

#[derive(Parser)]
#[command(
    name = "siltdb-raft-node",
    about = "A node of a siltdb-raft cluster, and its client"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a node until killed.
    Serve {
        /// This node's id.
        #[arg(long)]
        id: NodeId,
        /// Address to listen on (and that peers and clients use), e.g. 127.0.0.1:21001.
        #[arg(long)]
        addr: String,
        /// The node's directory (created if missing): its siltdb database and snapshot.
        #[arg(long)]
        dir: PathBuf,
        /// Initialise a new cluster with these voters, `id=addr,id=addr,...` (give it to one
        /// node; ignored if the node already has state).
        #[arg(long)]
        init: Option<String>,
        /// Heartbeat interval in milliseconds.
        #[arg(long, default_value_t = 100)]
        heartbeat_ms: u64,
        /// Election timeout: the lower end in milliseconds (the upper end is twice it).
        #[arg(long, default_value_t = 500)]
        election_ms: u64,
        /// Build a snapshot after this many applied entries.
        #[arg(long, default_value_t = 50_000)]
        snapshot_every: u64,
        /// Entries kept in the log behind a snapshot.
        #[arg(long, default_value_t = 1_000)]
        keep_after_snapshot: u64,
        /// Bytes of snapshot data per message to a follower (1 byte to 8 MiB).
        #[arg(long, default_value_t = 1 << 20)]
        snapshot_chunk: usize,
        /// Milliseconds a leader waits for a follower to take a snapshot message (the last:
        /// to install the whole snapshot).
        #[arg(long, default_value_t = 60_000)]
        snapshot_timeout_ms: u64,
    },
    /// Replicate key = value (through the leader).
    Put {
        /// Node addresses, comma-separated.
        #[arg(long)]
        cluster: String,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Replicate the removal of a key.
    Delete {
        /// Node addresses, comma-separated.
        #[arg(long)]
        cluster: String,
        /// The key.
        key: String,
    },
    /// A linearizable read through the leader.
    Read {
        /// Node addresses, comma-separated.
        #[arg(long)]
        cluster: String,
        /// The key.
        key: String,
    },
    /// A local read of one node's state machine (as fresh as what it has applied).
    Get {
        /// The node's address.
        #[arg(long)]
        addr: String,
        /// The key.
        key: String,
    },
    /// One node's state, as JSON.
    Status {
        /// The node's address.
        #[arg(long)]
        addr: String,
    },
    /// Add a learner (a non-voting member) and wait until it has caught up.
    AddLearner {
        /// Node addresses, comma-separated.
        #[arg(long)]
        cluster: String,
        /// The new node's id.
        #[arg(long)]
        id: NodeId,
        /// The new node's address.
        #[arg(long)]
        addr: String,
    },
    /// Make exactly these nodes the voters.
    ChangeMembership {
        /// Node addresses, comma-separated.
        #[arg(long)]
        cluster: String,
        /// The voters' ids, comma-separated.
        #[arg(long)]
        voters: String,
    },
    /// Build a snapshot on one node now and purge its log up to it.
    Snapshot {
        /// The node's address.
        #[arg(long)]
        addr: String,
    },
    /// Start a 3-node cluster of this binary on loopback and measure commits, latency,
    /// fsyncs and failover (docs/raft.md).
    Bench(bench::BenchArgs),
    /// Measure purging a log of N applied entries with one range delete, against deleting
    /// them one key at a time (docs/raft.md).
    BenchPurge(bench::PurgeArgs),
}

fn addrs(list: &str) -> Vec<String> {
    list.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn parse_members(s: &str) -> Result<BTreeMap<NodeId, String>, Error> {
    let mut out = BTreeMap::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| Error::InvalidArgument(format!("{part:?} is not id=addr")))?;
        let id: NodeId = id
            .trim()
            .parse()
            .map_err(|_| Error::InvalidArgument(format!("{id:?} is not a node id")))?;
        out.insert(id, addr.trim().to_string());
    }
    Ok(out)
}

fn print_reply(reply: ClientReply) -> Result<(), Error> {
    match reply {
        ClientReply::Error(e) => Err(Error::Remote(e)),
        ClientReply::Value(Some(v)) => {
            println!("{v}");
            Ok(())
        }
        ClientReply::Value(None) => {
            eprintln!("(not found)");
            Ok(())
        }
        ClientReply::Written { index } => {
            println!("committed at log index {index}");
            Ok(())
        }
        ClientReply::Done => {
            println!("done");
            Ok(())
        }
        other => {
            println!("{other:?}");
            Ok(())
        }
    }
}

fn serve(config: NodeConfig, init: BTreeMap<NodeId, String>) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let _node = Node::start(config, init).await?;
        std::future::pending::<()>().await;
        Ok(())
    })
}

fn run(cli: Cli) -> Result<(), Error> {
    match cli.cmd {
        Cmd::Serve {
            id,
            addr,
            dir,
            init,
            heartbeat_ms,
            election_ms,
            snapshot_every,
            keep_after_snapshot,
            snapshot_chunk,
            snapshot_timeout_ms,
        } => {
            let mut config = NodeConfig::new(id, addr, dir);
            config.heartbeat = Duration::from_millis(heartbeat_ms);
            config.election_timeout = (
                Duration::from_millis(election_ms),
                // Saturates: `Node::start` refuses a timeout over a day anyway.
                Duration::from_millis(election_ms.saturating_mul(2)),
            );
            config.snapshot_every = snapshot_every;
            config.keep_after_snapshot = keep_after_snapshot;
            config.snapshot_chunk = snapshot_chunk;
            config.snapshot_timeout = Duration::from_millis(snapshot_timeout_ms);
            let init = match init {
                Some(s) => parse_members(&s)?,
                None => BTreeMap::new(),
            };
            serve(config, init)
        }
        Cmd::Put {
            cluster,
            key,
            value,
        } => print_reply(Client::new(addrs(&cluster)).request(ClientRequest::Put { key, value })?),
        Cmd::Delete { cluster, key } => {
            print_reply(Client::new(addrs(&cluster)).request(ClientRequest::Delete { key })?)
        }
        Cmd::Read { cluster, key } => {
            print_reply(Client::new(addrs(&cluster)).request(ClientRequest::Get {
                key,
                linearizable: true,
            })?)
        }
        Cmd::Get { addr, key } => print_reply(ClientReply::Value(client::get_local(&addr, &key)?)),
        Cmd::Status { addr } => {
            let s = client::status(&addr)?;
            println!(
                "{}",
                serde_json::to_string_pretty(&s).expect("status serialises")
            );
            Ok(())
        }
        Cmd::AddLearner { cluster, id, addr } => print_reply(
            Client::new(addrs(&cluster)).request(ClientRequest::AddLearner { id, addr })?,
        ),
        Cmd::ChangeMembership { cluster, voters } => {
            let mut set = BTreeSet::new();
            for v in voters.split(',').filter(|v| !v.is_empty()) {
                set.insert(
                    v.trim()
                        .parse()
                        .map_err(|_| Error::InvalidArgument(format!("{v:?} is not a node id")))?,
                );
            }
            print_reply(
                Client::new(addrs(&cluster))
                    .request(ClientRequest::ChangeMembership { voters: set })?,
            )
        }
        Cmd::Snapshot { addr } => print_reply(client::call(
            &addr,
            ClientRequest::SnapshotAndPurge,
            Duration::from_secs(60),
        )?),
        Cmd::Bench(args) => bench::run(args),
        Cmd::BenchPurge(args) => bench::purge(args),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
