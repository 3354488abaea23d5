//! siltdb under openraft: a replicated key-value store whose Raft log and state machine both
//! live in one siltdb database per node.
//!
//! The storage half ([`open_store`], [`LogStore`], [`StateMachine`]) is what a user who embeds
//! openraft needs: give the two values to [`openraft::Raft::new`] with any network. The
//! cluster half ([`node`], [`client`], [`local_cluster`]) is a small replicated store over
//! TCP on loopback, run by the `siltdb-raft-node` binary, which the tests and the figures in
//! `docs/raft.md` use.
//!
//! Key layout inside the node's database (one byte of prefix each, see [`keys`]): `l` + the
//! big-endian log index for entries, `m/…` for the vote, the last purged log id and the
//! committed log id, `s/applied` for the state machine's last applied log id and membership,
//! and `d` + the user key for the replicated data.

#![deny(missing_docs)]

pub mod client;
mod error;
pub mod keys;
pub mod local_cluster;
mod log_store;
mod network;
pub mod node;
mod snapshot_file;
mod state_machine;
mod store;
mod types;
pub mod wire;

pub use error::Error;
pub use log_store::{LogReader, LogStore};
pub use network::{PeerClient, TcpNetwork};
pub use state_machine::{SnapshotBuilder, StateMachine};
pub use store::open_store;
pub use types::{Request, Response, TypeConfig};

/// The longest user key siltdb-raft stores: siltdb's `MAX_KEY_SIZE` less the one-byte data
/// prefix.
pub const MAX_USER_KEY: usize = siltdb::MAX_KEY_SIZE - 1;

/// True if siltdb can store this key and value under the data prefix (a delete: an empty
/// value). The client API and the state machine both ask it, so a write is refused the same
/// way before the log and, if it got there anyway, on every node.
pub(crate) fn storable(key: &str, value: &str) -> bool {
    key.len() <= MAX_USER_KEY && value.len() <= siltdb::MAX_VALUE_SIZE
}

/// The node id type: openraft's default, `u64`.
pub type NodeId = u64;
/// The Raft handle for siltdb-raft's type configuration.
pub type Raft = openraft::Raft<TypeConfig>;
