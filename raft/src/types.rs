//! The application's Raft types: what a log entry carries ([`Request`]), what applying it
//! answers ([`Response`]), and openraft's type configuration ([`TypeConfig`]).

use std::io::Cursor;

use serde::{Deserialize, Serialize};

/// A replicated write: the payload of a normal log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Set `key` to `value`.
    Put {
        /// The key (any UTF-8 string up to siltdb's 64 KiB key limit, less one prefix byte).
        key: String,
        /// The value.
        value: String,
    },
    /// Remove `key` (nothing happens if it is absent).
    Delete {
        /// The key.
        key: String,
    },
}

/// What applying one log entry answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The index of the log entry that was applied.
    pub index: u64,
    /// `true` if the entry's write was refused as invalid (a key over
    /// [`MAX_USER_KEY`](crate::MAX_USER_KEY) bytes or a value over siltdb's `MAX_VALUE_SIZE`):
    /// every node refuses it the same way and nothing changes. The node's client API refuses
    /// such writes before they reach the log.
    #[serde(default)]
    pub refused: bool,
}

openraft::declare_raft_types!(
    /// siltdb-raft's openraft type configuration: `u64` node ids, [`openraft::BasicNode`]
    /// (an address) per node, [`Request`] entries, [`Response`] replies, snapshots as bytes in
    /// memory (`Cursor<Vec<u8>>`), tokio.
    pub TypeConfig:
        D = Request,
        R = Response,
);
