//! Starting writeback early: `sync_file_range(SYNC_FILE_RANGE_WRITE)` over bytes already
//! written, so that the fsync which makes a file durable finds most of it on the disk already
//! (RocksDB's `bytes_per_sync`): for a table, after each megabyte the builder writes; for a
//! mapped WAL, a window at a time on its helper thread. A hint only: it makes nothing durable
//! and changes no rule of `docs/durability.md`.

use std::fs::File;
use std::os::unix::io::AsRawFd;

/// Starts writing `[from, to)` of `file` to the disk without waiting for it
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`), best effort: a failure only leaves the pages
/// for the next fsync, which reports any error itself.
pub(super) fn start_writeback(file: &File, from: u64, to: u64) {
    let (Ok(offset), Ok(len)) = (
        libc::off64_t::try_from(from),
        libc::off64_t::try_from(to.saturating_sub(from)),
    ) else {
        return;
    };
    if len == 0 {
        return;
    }
    // SAFETY: a plain system call on a descriptor the caller owns; no memory is passed.
    #[allow(unsafe_code)]
    let _ = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
}
