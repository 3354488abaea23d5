//! [`Snapshot`]: reads at one point in time.

use crate::db::Core;
use crate::error::{Error, Result};
use crate::key::SeqNo;
use crate::scan::{self, Iter};
use std::ops::RangeBounds;
use std::sync::Arc;

/// A frozen view of the database: gets and scans through it see exactly the writes that had
/// completed when it was taken. While it lives, compaction keeps the versions it can see.
/// Dropping it releases them.
pub struct Snapshot {
    core: Arc<Core>,
    seq: SeqNo,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").field("seq", &self.seq).finish()
    }
}

impl Snapshot {
    pub(crate) fn new(core: Arc<Core>, seq: SeqNo) -> Self {
        Snapshot { core, seq }
    }

    /// The sequence number of the last write the snapshot sees.
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    fn check(&self) -> Result<()> {
        if self.core.is_closed() {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// The value of `key` as of the snapshot. Errors as [`Db::get`](crate::Db::get), and
    /// [`Error::Closed`] after the database is closed.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.check()?;
        Ok(self
            .core
            .get_at(key.as_ref(), Some(self.seq), None)?
            .map(|b| b.to_vec()))
    }

    /// True if `key` had a value as of the snapshot.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Entries in `range` as of the snapshot.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        scan::new_iter(
            self.core.clone(),
            self.core.load_read_state(),
            self.seq,
            scan::bounds(&range),
            None,
        )
    }

    /// Entries whose keys start with `prefix`, as of the snapshot.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        scan::new_iter(
            self.core.clone(),
            self.core.load_read_state(),
            self.seq,
            scan::prefix_bounds(prefix.as_ref()),
            None,
        )
    }

    /// Every entry as of the snapshot.
    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.core.release_snapshot(self.seq);
    }
}
