//! [`Snapshot`]: reads at one point in time.

use crate::error::Result;
use crate::key::SeqNo;
use crate::read::ReadPath;
use crate::scan::{self, Iter};
use crate::stats::ReadTrace;
use crate::value::Value;
use std::ops::RangeBounds;
use std::sync::Arc;

/// A frozen view of the database: gets and scans through it see exactly the writes that had
/// completed when it was taken. While it lives, compaction keeps the versions it can see.
/// Dropping it releases them.
pub struct Snapshot {
    read: Arc<ReadPath>,
    seq: SeqNo,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").field("seq", &self.seq).finish()
    }
}

impl Snapshot {
    pub(crate) fn new(read: Arc<ReadPath>, seq: SeqNo) -> Self {
        Snapshot { read, seq }
    }

    /// The sequence number of the last write the snapshot sees.
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// The value of `key` as of the snapshot. Errors as [`Db::get`](crate::Db::get), and
    /// [`Error::Closed`](crate::Error::Closed) after the database is closed.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.read.check_open()?;
        Ok(self
            .read
            .get(key.as_ref(), Some(self.seq), None)?
            .map(Value::from_bytes))
    }

    /// The same read as [`get`](Snapshot::get), with a [`ReadTrace`] of what it did per
    /// table: a table whose versions of the key were all written after the snapshot shows as
    /// [`TableOutcome::NewerOnly`](crate::TableOutcome::NewerOnly), and one whose every entry
    /// was (nothing in it is visible) as
    /// [`TableOutcome::OutOfRange`](crate::TableOutcome::OutOfRange), skipped unread. Errors as
    /// [`get`](Snapshot::get).
    pub fn get_traced(&self, key: impl AsRef<[u8]>) -> Result<(Option<Value>, ReadTrace)> {
        let (v, trace) = self.read.get_traced(key.as_ref(), Some(self.seq))?;
        Ok((v.map(Value::from_bytes), trace))
    }

    /// True if `key` had a value as of the snapshot.
    ///
    /// Errors: as [`get`](Snapshot::get).
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Entries in `range` as of the snapshot.
    ///
    /// Errors (as items): as [`Db::range`](crate::Db::range).
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        scan::new_iter(
            self.read.clone(),
            self.read.load(),
            self.seq,
            scan::bounds(&range),
        )
    }

    /// Entries whose keys start with `prefix`, as of the snapshot. Errors as
    /// [`range`](Snapshot::range).
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        scan::new_iter(
            self.read.clone(),
            self.read.load(),
            self.seq,
            scan::prefix_bounds(prefix.as_ref()),
        )
    }

    /// Every entry as of the snapshot. Errors as [`range`](Snapshot::range).
    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.read.release_snapshot(self.seq);
    }
}
