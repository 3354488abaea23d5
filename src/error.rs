//! The one error type of the crate.
//!
//! Every fallible public function returns [`Result<T>`]. Corruption always names the file and
//! the byte offset where it was found, so that an operator can look at the bytes.
//!
//! [`Error`] is `Clone` and cheap to share (an I/O error sits behind an `Arc`), so a failure
//! found by one thread (a background flush or compaction, a write group's leader) reaches every
//! caller it concerns with its variant and its source chain intact, never as a copied message.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What went wrong. `#[non_exhaustive]`: new kinds may be added in minor releases.
///
/// `Clone`: every copy is the same failure (the [`io::Error`] of [`Error::Io`] is shared).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error. The message names the file and the operation; the
    /// original [`io::Error`] is the [`source`](std::error::Error::source) (shared, so that
    /// the error can be cloned; `e.kind()` works through the `Arc`).
    #[error("I/O error: {0}")]
    Io(#[source] Arc<io::Error>),

    /// Bytes on disk that fail a checksum or cannot be decoded: `file` and `offset` say where.
    #[error("corruption in {} at offset {offset}: {detail}", file.display())]
    Corruption {
        /// The file that holds the bad bytes.
        file: PathBuf,
        /// Byte offset inside `file` of the record, block or field that is bad.
        offset: u64,
        /// What is wrong, in words.
        detail: String,
    },

    /// A caller passed an argument that cannot be accepted (a key over 64 KiB, a value over
    /// 256 MiB, an option out of range). Nothing was written.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The database directory is open in another `Db` (in this or another process).
    #[error("database directory is locked: it is open in another process or handle")]
    Locked,

    /// An earlier write to the WAL or the manifest failed, background work failed for good,
    /// or a thread panicked in the engine (a bug). The database refuses further writes until
    /// it is reopened, because a retried fsync can report success for data that is gone.
    /// Reads still work. The failure that stopped writes is the field (and the
    /// [`source`](std::error::Error::source)). Corruption found by a background job stops
    /// writes too, but is reported as the [`Error::Corruption`] itself.
    #[error("database refuses writes after an earlier failure: {0}")]
    Poisoned(#[source] Arc<Error>),

    /// The database was closed with [`Db::close`](crate::Db::close).
    #[error("database is closed")]
    Closed,
}

/// `std::result::Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds [`Error::Corruption`].
    pub(crate) fn corruption(file: &Path, offset: u64, detail: impl Into<String>) -> Error {
        Error::Corruption {
            file: file.to_path_buf(),
            offset,
            detail: detail.into(),
        }
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }

    /// An [`Error::Io`] of kind [`io::ErrorKind::Other`] with `message`, for failures that have
    /// no operating-system error behind them (a background thread that panicked).
    pub(crate) fn other(message: impl Into<String>) -> Error {
        Error::from(io::Error::other(message.into()))
    }

    /// The error that writers see once `self` has stopped writes: corruption stays itself (it
    /// names the damaged file), [`Error::Closed`] and an existing [`Error::Poisoned`] stay as
    /// they are, anything else becomes [`Error::Poisoned`] with `self` as its source.
    pub(crate) fn into_poison(self) -> Error {
        match self {
            e @ (Error::Corruption { .. } | Error::Poisoned(_) | Error::Closed) => e,
            e => Error::Poisoned(Arc::new(e)),
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(Arc::new(e))
    }
}

/// An I/O error with the path and operation that caused it; the original error is its source.
#[derive(Debug)]
pub(crate) struct IoContext {
    op: &'static str,
    path: PathBuf,
    source: io::Error,
}

impl fmt::Display for IoContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.op, self.path.display(), self.source)
    }
}

impl std::error::Error for IoContext {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Wraps an `io::Error` so that its message names the operation and the path, keeping its
/// `kind()`.
pub(crate) fn io_context(op: &'static str, path: &Path, source: io::Error) -> Error {
    let kind = source.kind();
    Error::from(io::Error::new(
        kind,
        IoContext {
            op,
            path: path.to_path_buf(),
            source,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn io_errors_name_the_path_and_keep_the_source() {
        let e = io_context(
            "open",
            Path::new("/x/000001.sst"),
            io::Error::from(io::ErrorKind::NotFound),
        );
        let msg = e.to_string();
        assert!(msg.contains("open /x/000001.sst"), "{msg}");
        assert!(e.source().is_some());
        match e {
            Error::Io(inner) => assert_eq!(inner.kind(), io::ErrorKind::NotFound),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn clones_share_the_io_source_and_poison_keeps_the_cause() {
        let e = io_context(
            "sync",
            Path::new("/x/000002.wal"),
            io::Error::from(io::ErrorKind::StorageFull),
        );
        let copy = e.clone();
        match (&e, &copy) {
            (Error::Io(a), Error::Io(b)) => assert!(Arc::ptr_eq(a, b)),
            other => panic!("unexpected {other:?}"),
        }
        let poisoned = copy.into_poison();
        let Error::Poisoned(cause) = &poisoned else {
            panic!("unexpected {poisoned:?}");
        };
        assert!(matches!(&**cause, Error::Io(io) if io.kind() == io::ErrorKind::StorageFull));
        // The chain runs poison -> the I/O error -> the context -> the OS error.
        assert!(poisoned.source().and_then(|s| s.source()).is_some());
        let c = Error::corruption(Path::new("t.sst"), 7, "bad").into_poison();
        assert!(c.is_corruption());
        assert!(matches!(Error::Closed.into_poison(), Error::Closed));
        assert!(matches!(poisoned.clone().into_poison(), Error::Poisoned(_)));
    }

    #[test]
    fn corruption_names_file_and_offset() {
        let e = Error::corruption(Path::new("a.wal"), 42, "bad crc");
        assert!(e.is_corruption());
        assert_eq!(e.to_string(), "corruption in a.wal at offset 42: bad crc");
    }
}
