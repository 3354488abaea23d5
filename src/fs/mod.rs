//! The file-system seam: every byte siltdb reads or writes goes through [`FileSystem`].
//!
//! Two implementations ship: [`OsFs`] (the real file system, the default) and [`MemFs`], an
//! in-memory file system that remembers, per file, which bytes were synced and, per directory,
//! which entries were made durable by a directory sync. [`MemFs`] can produce a *crash image*
//! (what a machine would find after a power loss or a process crash at that moment) and can
//! fail a chosen operation, which is how the durability tests pull the plug.

#[cfg(target_os = "linux")]
mod mapped;
mod mem;
mod os;
#[cfg(target_os = "linux")]
mod placement;
#[cfg(target_os = "linux")]
mod writeback;

/// (Tests of the write path: whether a directory's WAL would be memory-mapped.)
#[cfg(all(test, target_os = "linux"))]
pub(crate) use mapped::maps_safely;
pub use mem::{CrashHook, CrashImageOptions, CrashPoint, FaultPlan, MemFs, OpKind, UnsyncedData};
pub use os::OsFs;

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Bytes of a page of the page cache: the unit the kernel writes back, and so the unit a
/// crash keeps or loses of what was not synced (4 KiB on the file systems siltdb maps).
pub(crate) const PAGE: u64 = 4096;

/// Bytes of a disk sector: the unit a device writes atomically. A page written back when the
/// power fails can reach the disk as a prefix of its sectors (512-byte devices without
/// power-loss protection), the rest reading as what was there before (zeros, for the space a
/// log is appended into).
pub(crate) const SECTOR: u64 = 512;

/// The operations siltdb needs from a file system. Implementations must be usable from many
/// threads at once.
///
/// Errors are plain [`io::Error`]s; a lock that is held elsewhere is reported with
/// [`io::ErrorKind::WouldBlock`].
pub trait FileSystem: Send + Sync + fmt::Debug + 'static {
    /// Creates `path` (truncating an existing file) for appending. The new directory entry is
    /// durable only after [`sync_dir`](Self::sync_dir) of the parent directory.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    /// Creates `path` (truncating an existing file) for a log: many small appends, each of
    /// which must survive a process crash once it returns (the WAL). An implementation may
    /// allocate the file ahead of the writer, so that a crash leaves it ending in zeros after
    /// the last append; [`WritableFile::finish`] cuts it back. Default: [`create`](Self::create).
    /// [`OsFs`] writes logs through a shared memory map on Linux.
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.create(path)
    }
    /// Opens an existing file for positioned reads.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>>;
    /// Atomically renames `from` to `to`, replacing `to`. Durable after `sync_dir`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// The names (not paths) of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes the entries of `dir` (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Makes every byte of the existing file `path` durable (an fsync through a new handle).
    fn sync_file(&self, path: &Path) -> io::Result<()>;
    /// Takes an exclusive advisory lock on `path` (created if missing). Fails with
    /// [`io::ErrorKind::WouldBlock`] if it is held by anyone else; released on drop.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>>;
    /// True if `path` exists.
    fn exists(&self, path: &Path) -> bool;
}

/// A file being written: appends only, then `sync`.
pub trait WritableFile: Send + fmt::Debug {
    /// Appends `data`. When this returns, the bytes are in the operating system (no user-space
    /// buffer holds them), so they survive a process crash.
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Appends a framed record whose first `head` bytes are its header: the same bytes as
    /// [`append`](Self::append), but an implementation that can be interrupted in the middle of
    /// a copy stores the header last, so that a crash never leaves a whole header over a partly
    /// written payload. Default: `append(data)` (a `write(2)` is not cut short by a crash).
    fn append_framed(&mut self, data: &[u8], head: usize) -> io::Result<()> {
        let _ = head;
        self.append(data)
    }
    /// [`append_framed`](Self::append_framed) of a record given in pieces: its header `head`
    /// (stored last, as there) and its payload, the concatenation of `payload`. The same bytes
    /// as `append_framed` of `head` followed by the pieces; an implementation that writes
    /// through memory copies each piece into place, with no buffer in between. Default: the
    /// pieces concatenated, then `append_framed`. Errors: the write's; part of the record may
    /// then be in the file, as after a failed `append`.
    fn append_framed_parts(&mut self, head: &[u8], payload: &[&[u8]]) -> io::Result<()> {
        let mut data =
            Vec::with_capacity(head.len() + payload.iter().map(|p| p.len()).sum::<usize>());
        data.extend_from_slice(head);
        for p in payload {
            data.extend_from_slice(p);
        }
        self.append_framed(&data, head.len())
    }
    /// True if [`append_framed_parts`](Self::append_framed_parts) copies the pieces into
    /// place itself, with no buffer in between, so that a caller need not gather them first;
    /// false if it would only concatenate them (a caller with a buffer of its own to reuse
    /// then gathers them there and calls `append_framed`). Default: false.
    fn takes_pieces(&self) -> bool {
        false
    }
    /// True if appending `n` more bytes now would only copy them into memory that is already
    /// in place: no system call, no file space to allocate, no lock another thread holds (a
    /// memory-mapped log whose current window has room; its stores may still take page
    /// faults, as any store may). The write path then commits a lone writer's record without
    /// giving up its state lock in between (see `docs/architecture.md`, the write path). A
    /// wrong `true` never loses a write, but may hold the database's other threads while the
    /// append waits. Default: false.
    fn appends_in_memory(&self, n: usize) -> bool {
        let _ = n;
        false
    }
    /// A hint that appends are coming soon (the write path gives it a WAL started by a
    /// memtable rotation, between creating the file and syncing the previous WAL): an
    /// implementation that allocates space ahead of the writer may start on the first of it
    /// now, in the background. It may grow the file before any append (until
    /// [`finish`](Self::finish) gives the space back). Never fails: an allocation that fails
    /// is reported by the append that needs it. Default: nothing.
    fn expect_appends(&mut self) {}
    /// A hint that the bytes appended so far will be synced soon and are not rewritten: an
    /// implementation may start writing them to the disk now, without waiting, so that the
    /// sync has less left to do (the table builder gives it after each megabyte of a table;
    /// [`OsFs`] calls `sync_file_range(SYNC_FILE_RANGE_WRITE)` on Linux over the whole pages
    /// not started yet). It makes nothing durable. Never fails: the sync reports any error.
    /// Default: nothing.
    fn start_writeback(&mut self) {}
    /// Makes every appended byte durable (fdatasync).
    fn sync(&mut self) -> io::Result<()>;
    /// Ends the file: gives back space allocated ahead of the writer, if any, and makes every
    /// appended byte and the file's length durable. Default: [`sync`](Self::sync).
    fn finish(&mut self) -> io::Result<()> {
        self.sync()
    }
    /// Bytes appended so far.
    fn len(&self) -> u64;
    /// True if nothing was appended.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file open for positioned reads.
pub trait RandomAccessFile: Send + Sync + fmt::Debug {
    /// Fills `buf` from `offset`; a read past the end is an
    /// [`io::ErrorKind::UnexpectedEof`] error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// The file's length when it was opened (for a file still being written: its current
    /// length).
    fn len(&self) -> u64;
    /// True if the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// What tells this file from another one stored under its name later (a database
    /// destroyed and made again, a backup restored): a read-only handle's table whose
    /// descriptor the table cache closed is reopened by name (so is a closed writer's, for a
    /// read that raced the close), and a reopened file of another identity (or length) fails
    /// the read instead of answering from the wrong file. Default:
    /// `None` (only the length is compared). [`OsFs`] gives the device, inode number and
    /// modification time.
    fn identity(&self) -> Option<FileIdentity> {
        None
    }
}

/// The identity of an open file ([`RandomAccessFile::identity`]): equal for two opens of the
/// same file, and different for a file that replaced it under the same name. An inode number
/// alone can be reused once a file is deleted; with the modification time, a new file that
/// takes both the number and the name of an old one differs unless it was written within the
/// same tick of the file system's clock (a few milliseconds on Linux) as the old one. Setting
/// a table's modification time again (`touch`) makes it another file to a read-only handle
/// that had it open: its reads fail with an I/O error until the handle is reopened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileIdentity {
    /// The device the file is on.
    pub device: u64,
    /// The file's inode number (or any number unique among the device's live files).
    pub inode: u64,
    /// The file's last modification, in nanoseconds since the Unix epoch (0 if unknown).
    pub modified_nanos: i128,
}

/// An exclusive lock on a file, released when dropped.
pub trait FileLock: Send + Sync + fmt::Debug {}

/// Writes `data` to `path` through a temporary file, syncs it, renames it over `path` and syncs
/// the directory: after a crash, `path` holds either its old contents or `data`.
pub(crate) fn write_atomic(
    fs: &dyn FileSystem,
    dir: &Path,
    tmp_name: &str,
    name: &str,
    data: &[u8],
) -> io::Result<()> {
    let tmp = dir.join(tmp_name);
    let mut file = fs.create(&tmp)?;
    file.append(data)?;
    file.sync()?;
    drop(file);
    fs.rename(&tmp, &dir.join(name))?;
    fs.sync_dir(dir)
}
