//! The one error type of the crate.
//!
//! Every fallible public function returns [`Result<T>`]. Corruption always names the file and
//! the byte offset where it was found, so that an operator can look at the bytes.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong. `#[non_exhaustive]`: new kinds may be added in minor releases.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error. The message names the file and the operation; the
    /// original [`io::Error`] is the [`source`](std::error::Error::source).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),

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

    /// An earlier write to the WAL or the manifest failed (or corruption was found by a
    /// background job). The database refuses further writes until it is reopened, because a
    /// retried fsync can report success for data that is gone. Reads still work.
    #[error("database refuses writes after an earlier failure: {0}")]
    Poisoned(String),

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
    Error::Io(io::Error::new(
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
    fn corruption_names_file_and_offset() {
        let e = Error::corruption(Path::new("a.wal"), 42, "bad crc");
        assert!(e.is_corruption());
        assert_eq!(e.to_string(), "corruption in a.wal at offset 42: bad crc");
    }
}
