//! [`Error`]: what siltdb-raft's own code can fail with, and its conversion into the
//! `StorageError` openraft expects from storage.

use std::io;

/// An error of the Raft storage, the node or the client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The siltdb database failed (I/O, corruption, a refused write).
    #[error(transparent)]
    Db(#[from] siltdb::Error),
    /// A file or socket failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// Bytes read from the database, a snapshot file or the network do not decode: names what
    /// and where.
    #[error("corrupt {what}: {detail}")]
    Corruption {
        /// What was being read (a log entry, the vote, a snapshot file, a frame).
        what: String,
        /// Where and what was wrong.
        detail: String,
    },
    /// A bad argument (a snapshot too large for one batch, an unknown node, a bad flag).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The cluster did not answer in time or no leader could be found.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The node answered with an error.
    #[error("node error: {0}")]
    Remote(String),
}

impl Error {
    pub(crate) fn corruption(what: impl Into<String>, detail: impl Into<String>) -> Error {
        Error::Corruption {
            what: what.into(),
            detail: detail.into(),
        }
    }
}
