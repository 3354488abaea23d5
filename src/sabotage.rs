//! Planted bugs for the harness self-check (`tests/harness_self_check.rs`): built with
//! `RUSTFLAGS="--cfg siltdb_sabotage"`, [`plant`] turns a known bug on at run time so that
//! the test can prove the crash and corruption tests catch it. In every other build (a user's
//! included: it is a compiler flag, not a Cargo feature that a dependency could turn on) the
//! switches do not exist and every check is `false` at compile time.

/// A bug that can be planted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Bug {
    /// `WalWriter::sync` returns without syncing.
    SkipWalFsync = 1,
    /// A flush deletes the sealed memtable's WAL before the manifest edit is synced.
    DeleteWalBeforeManifestSync = 2,
    /// Block reads skip the checksum comparison.
    IgnoreBlockChecksum = 4,
    /// Every binary fuse filter build fails, as if no seed peeled the key set (tables fall
    /// back to Bloom filters; not a bug, the path a test must be able to reach).
    FuseBuildFails = 8,
    /// Every Ribbon filter build fails, as if no seed solved the key set (tables fall back to
    /// Bloom filters; the path a test must be able to reach).
    RibbonBuildFails = 16,
    /// A write group's leader panics after appending its group to the WAL (not a bug to
    /// catch: the path on which the other writers must get an error instead of hanging).
    LeaderPanics = 32,
}

#[cfg(siltdb_sabotage)]
static PLANTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Plants `bug` (process-wide) until [`clear`].
#[cfg(siltdb_sabotage)]
pub fn plant(bug: Bug) {
    PLANTED.fetch_or(bug as u32, std::sync::atomic::Ordering::SeqCst);
}

/// Removes every planted bug.
#[cfg(siltdb_sabotage)]
pub fn clear() {
    PLANTED.store(0, std::sync::atomic::Ordering::SeqCst);
}

/// True if `bug` is planted.
#[inline]
pub(crate) fn planted(bug: Bug) -> bool {
    #[cfg(siltdb_sabotage)]
    {
        PLANTED.load(std::sync::atomic::Ordering::Relaxed) & bug as u32 != 0
    }
    #[cfg(not(siltdb_sabotage))]
    {
        let _ = bug;
        false
    }
}
