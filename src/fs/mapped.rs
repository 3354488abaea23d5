//! [`MappedLog`]: a log file appended to through a shared memory map, so that an append is a
//! memory copy instead of a `write(2)` system call.
//!
//! The file is extended ahead of the writer in windows of [`WINDOW`] bytes with
//! `posix_fallocate` (so the blocks exist and a full disk is an error from the append that
//! asks for the window, never a `SIGBUS` from a store) and zeros written over them (so their
//! pages are in the page cache before the writer touches them); a helper thread does this for
//! the next window while the writer fills the current one (for a WAL started by a memtable
//! rotation, from its creation on: its first window is allocated while the rotation puts the
//! new WAL and memtable in place); for a log that is not being synced, the same helper starts
//! the writeback of the pages finished so far (`sync_file_range`, without waiting), so that
//! the fsync that seals the log finds about one window left to write; and at each window
//! switch it first faults in the writer's new window for writing (`MADV_POPULATE_WRITE`), so
//! that the writer's stores take no page fault (see `MappedLog::populate_ahead`). Before the
//! writer wakes it, it keeps the helper off the writer's CPU when there is another
//! ([`super::placement`]), so that the helper's job does not run in the writer's place. The
//! writer maps only bytes whose allocation has finished. Each window is mapped `MAP_SHARED`:
//! a copied byte is in the page cache at once, so it survives a process crash exactly as a
//! returned `write(2)` does. `fdatasync` writes the pages dirtied through the map like any
//! other dirty page of the file. [`finish`](WritableFile::finish) unmaps, cuts the file back to
//! the bytes appended and syncs it; a file left by a crash instead ends in zeros up to the
//! window's end, which the log reader takes as the end of the log (`docs/format.md` section 2).
//!
//! A framed record is stored *header last*: the payload first, then the header's first bytes,
//! then, after a fence, its last four bytes (the header checksum) with a single store. A
//! process killed in the middle of a copy (a page fault is a point where `SIGKILL` lands) thus
//! leaves either a whole record or one whose header does not check, which the reader takes
//! for a torn tail; never a valid header over a partly copied payload.
//!
//! A file system that refuses a shared writable map (some network and FUSE file systems do)
//! gets positioned `write(2)`s at the log's end instead, from the first refused window on,
//! with a warning in the log; nothing else changes.
//!
//! This module holds the crate's `unsafe` code but for the cache hints (`prefetch`),
//! `writeback`'s system call and the memtable's write-once entry slot
//! (`memtable::entry_cell`, set from `memtable::skiplist`): mapping a file is `unsafe` in Rust because
//! another process could change or shorten it under the map. No other siltdb process writes
//! or cuts a live WAL (a writer holds the database's directory lock; a read-only open only
//! reads), and the map covers only bytes that this writer allocated and only it writes.

use super::placement::{this_thread_id, Placement};
use super::writeback::start_writeback;
use super::{WritableFile, PAGE};
use memmap2::{MmapMut, MmapOptions};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{fence, AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes the file is extended and mapped by at a time (a record larger than this gets a window
/// of its own size). A crash leaves at most two windows of zeros after the last record (the
/// one being written and the one allocated ahead).
pub(crate) const WINDOW: u64 = 1 << 20;

/// A log file written through a memory map (see the module documentation).
#[derive(Debug)]
pub(crate) struct MappedLog {
    file: File,
    /// The mapped window and the file offset of its first byte.
    map: Option<(MmapMut, u64)>,
    /// Bytes appended.
    len: u64,
    /// Bytes allocated (the file's size while it is being written).
    allocated: u64,
    /// `allocated` as of the last sync: a sync after the file grew is an `fsync`, so that the
    /// new length is durable with the bytes in it whatever the file system's `fdatasync` does.
    synced_size: u64,
    /// The file system refused a shared writable map (some network and FUSE file systems do):
    /// the rest of the file is written with positioned `write(2)`s at `len`.
    unmappable: bool,
    /// The helper that allocates the next window while this one is written; started at the
    /// second window (a WAL that never outgrows its first needs none), or at once for a log
    /// told to [expect appends](WritableFile::expect_appends).
    ahead: Option<Ahead>,
    /// A sync ran since the current window was mapped. The windows allocated at the next
    /// switch (the one mapped then if it was not allocated ahead, and the one asked of the
    /// helper) are then not zeroed: every fsync writes each dirty page of the file, zeros of a
    /// window not yet written to included, one device write per page that a synced log does
    /// not need (its pages are rewritten by each fsync anyway: ~4 times per page with 8
    /// writers, ~27 with one), and the zeros did not change the 8-writers/1 ratio (8 pairs
    /// each: median 5.66x with them, 5.63x without). A heuristic, one window behind: the
    /// first window of every log is zeroed, and a log that turns from unsynced to synced gets
    /// one or two zeroed windows more.
    synced_in_window: bool,
    /// For a log told to expect appends: once `len` reaches this offset (half its first
    /// window), the helper is asked for the second window (zeroed if the bool says so).
    /// Asking when the first window is mapped would grow a WAL that holds a few records to
    /// 2 MiB behind its writer's back.
    ahead_at: Option<(u64, bool)>,
    /// The last window the helper was asked for is zeroed (see `populate_ahead`).
    ahead_zeroed: bool,
    /// Bytes from the start whose writeback the helper was asked to start (see
    /// `request_ahead`).
    written_back: u64,
    /// Test switch: every map fails as on such a file system.
    #[cfg(test)]
    refuse_maps: bool,
    /// Tests: jobs sent to the helper with pages to fault in.
    #[cfg(test)]
    populate_jobs: usize,
    /// Test switch: every window the helper allocates fails, as on a full disk.
    #[cfg(test)]
    fail_ahead: bool,
}

/// Bytes at the start of a new window that the writer faults in itself, while the helper
/// faults in the rest ([`MappedLog::populate_ahead`]).
const POPULATE_SKIP: usize = 64 << 10;

/// What the helper is asked to do: fault in `populate`'s pages of the writer's window for
/// writing, if any; allocate `[offset, offset + len)` (zeroed if `zero`); then, once it has
/// answered, start the writeback of `writeback`'s range of written bytes, if any.
#[derive(Debug, Clone, Copy)]
struct Job {
    offset: u64,
    len: u64,
    zero: bool,
    writeback: Option<(u64, u64)>,
    /// Pages of the writer's current window (address and length) to fault in for writing
    /// first (see [`MappedLog::populate_ahead`]).
    populate: Option<(usize, usize)>,
}

/// A thread that allocates windows ahead of the writer (and faults in the writer's new
/// window): one job at a time, each allocating the range `[offset, offset + len)`, answered
/// with the new allocated end.
#[derive(Debug)]
struct Ahead {
    jobs: Option<mpsc::Sender<Job>>,
    answers: mpsc::Receiver<io::Result<u64>>,
    helper: Option<JoinHandle<()>>,
    /// A job was sent and its answer not taken yet.
    pending: bool,
    /// The helper's thread id, once it runs (0 before).
    tid: Arc<AtomicI32>,
    /// Where the helper may run: kept off the writer's CPU (see [`super::placement`]);
    /// `None` with one CPU.
    placement: Option<Placement>,
}

impl Ahead {
    fn start(file: &File) -> io::Result<Ahead> {
        let file = file.try_clone()?;
        let (jobs, todo) = mpsc::channel::<Job>();
        let (done, answers) = mpsc::channel();
        let tid = Arc::new(AtomicI32::new(0));
        let helper_tid = Arc::clone(&tid);
        let helper = std::thread::Builder::new()
            .name("siltdb-wal-ahead".into())
            .spawn(move || {
                helper_tid.store(this_thread_id(), Ordering::Relaxed);
                // Its id goes back to 0 when the thread ends, however it ends (the kernel may
                // give the id to another thread then).
                struct Forget(Arc<AtomicI32>);
                impl Drop for Forget {
                    fn drop(&mut self) {
                        self.0.store(0, Ordering::Relaxed);
                    }
                }
                let _forget = Forget(Arc::clone(&helper_tid));
                for job in todo {
                    let Job {
                        offset,
                        len,
                        zero,
                        writeback,
                        populate,
                    } = job;
                    if let Some((addr, len)) = populate {
                        let _ = populate_write(addr, len);
                    }
                    let res = allocate(&file, offset, len, zero).map(|()| offset + len);
                    if done.send(res).is_err() {
                        break;
                    }
                    // After the answer: the call may wait for the device's queue, and the
                    // writer, which may be waiting for the window, need not wait for it too.
                    // (It writes no byte: a cut of the file meanwhile is harmless.)
                    if let Some((from, to)) = writeback {
                        start_writeback(&file, from, to);
                    }
                }
            })?;
        Ok(Ahead {
            jobs: Some(jobs),
            answers,
            helper: Some(helper),
            pending: false,
            tid,
            placement: Placement::of_this_thread(),
        })
    }

    /// Asks for `job`; false if the helper is gone. The helper is kept off the CPU of the
    /// calling writer first (see [`super::placement`]).
    fn request(&mut self, job: Job) -> bool {
        let tid = self.tid.load(Ordering::Relaxed);
        if let (Some(p), true) = (self.placement.as_mut(), tid > 0) {
            p.keep_off_this_cpu(tid);
        }
        let sent = self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok());
        self.pending = sent;
        sent
    }

    /// Waits for the pending job: `Some(new allocated end)`, `None` if there was none.
    fn settle(&mut self) -> io::Result<Option<u64>> {
        if !std::mem::take(&mut self.pending) {
            return Ok(None);
        }
        match self.answers.recv() {
            Ok(res) => res.map(Some),
            Err(_) => Err(io::Error::other("the WAL's allocation helper stopped")),
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.jobs = None; // the helper's loop ends once its job, if any, is done
        if let Some(h) = self.helper.take() {
            let _ = h.join();
        }
    }
}

/// Creates `path` (truncating an existing file) open for reading and writing, as a shared
/// writable map needs.
pub(crate) fn create_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

impl MappedLog {
    /// Writes a new, empty file through a map. The first window is allocated on the first
    /// append (by that append, unless [`expect_appends`](WritableFile::expect_appends) had a
    /// helper start on it).
    pub(crate) fn new(file: File) -> MappedLog {
        MappedLog {
            file,
            map: None,
            len: 0,
            allocated: 0,
            synced_size: 0,
            unmappable: false,
            ahead: None,
            synced_in_window: false,
            ahead_at: None,
            ahead_zeroed: false,
            written_back: 0,
            #[cfg(test)]
            refuse_maps: false,
            #[cfg(test)]
            populate_jobs: 0,
            #[cfg(test)]
            fail_ahead: false,
        }
    }

    /// Makes the window cover `[len, len + n)`, allocating and mapping a new one if needed;
    /// returns the window and the offset of `len` in it, or `None` if the file cannot be
    /// mapped (then `unmappable` is set, and the bytes are allocated all the same).
    fn window_for(&mut self, n: usize) -> io::Result<Option<(&mut MmapMut, usize)>> {
        let end = self.len + n as u64;
        let covered = matches!(&self.map, Some((m, start)) if start + m.len() as u64 >= end);
        if !covered {
            // The helper's job first (it may be faulting in pages of the map), then the
            // unmap, which keeps the dirty pages in the page cache: nothing is lost.
            let settled = self.settle_ahead();
            self.map = None;
            settled?;
            let start = self.len;
            let size = WINDOW.max(n as u64);
            let want = start + size;
            let zero = !std::mem::take(&mut self.synced_in_window);
            // Whether the whole window was allocated zeroed: the part the helper allocated
            // ahead (its last job's flag) and the part allocated here. (A heuristic in one
            // rare case: a window that starts inside an earlier, larger window allocated by
            // the writer is judged by the helper's flag.)
            let mut window_zeroed = start >= self.allocated || self.ahead_zeroed;
            if want > self.allocated {
                allocate(&self.file, self.allocated, want - self.allocated, zero)?;
                self.allocated = want;
                window_zeroed &= zero;
            }
            let size = usize::try_from(size)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "window too large"))?;
            // SAFETY: the range lies inside the file (allocated just above), which this writer
            // alone writes or cuts (see the module documentation).
            #[allow(unsafe_code)]
            let mapped = unsafe {
                MmapOptions::new()
                    .offset(start)
                    .len(size)
                    .map_mut(&self.file)
            };
            #[cfg(test)]
            let mapped = if self.refuse_maps {
                Err(io::Error::from_raw_os_error(libc::ENODEV))
            } else {
                mapped
            };
            match mapped {
                Ok(map) => {
                    self.map = Some((map, start));
                    // From the second window on, the next one is allocated (and its pages put
                    // in the page cache) by the helper while this one is written; for a log
                    // told to expect appends, from the first window on, once half of it is
                    // written.
                    self.ahead_at = None;
                    if start > 0 {
                        let populate = self.populate_ahead(window_zeroed);
                        self.request_ahead(zero, populate);
                    } else if self.ahead.is_some() {
                        self.ahead_at = Some((start + size as u64 / 2, zero));
                    }
                }
                Err(e) => {
                    log::warn!("a log cannot be memory-mapped ({e}): it is written with write(2)");
                    self.unmappable = true;
                    return Ok(None);
                }
            }
        }
        let (map, start) = self.map.as_mut().expect("mapped just above");
        let at = (self.len - *start) as usize;
        Ok(Some((map, at)))
    }

    /// Takes the answer of the job the helper runs, if any: after this, no helper writes to
    /// the file until the next request.
    fn settle_ahead(&mut self) -> io::Result<()> {
        let Some(ahead) = self.ahead.as_mut() else {
            return Ok(());
        };
        match ahead.settle() {
            Ok(end) => {
                self.allocated = self.allocated.max(end.unwrap_or(0));
                Ok(())
            }
            Err(e) => {
                // The failed allocation may have grown the file partly: `allocated` becomes
                // the file's size, so that the next window is allocated from there (an append
                // retried after the disk has room) and a later cut happens if it grew. Never
                // more than the size: a window mapped past the file's end would be written
                // with a SIGBUS. If even the size is unknown, appends go through write(2).
                match self.file.metadata() {
                    Ok(m) => self.allocated = m.len(),
                    Err(_) => {
                        self.allocated = u64::MAX;
                        self.unmappable = true;
                    }
                }
                Err(e)
            }
        }
    }

    /// The part of the window just mapped that the helper faults in for writing before it
    /// allocates the next window: its whole pages (of the system's page size) but for its
    /// first [`POPULATE_SKIP`] bytes, which the
    /// writer is about to fill itself. A store to a page of a shared file map that the writer
    /// has not written yet takes a page fault (~2% of a sequential load's writer time, one
    /// every ~27 records); `MADV_POPULATE_WRITE` from the helper takes them all at once, off
    /// the writer's thread (a map made with `MAP_POPULATE` would map the pages read-only and
    /// fault on the first store anyway). Only for a window allocated zeroed (`zeroed`):
    /// faulting a page in for writing dirties it, and a synced log does not want its unwritten
    /// pages written (see `synced_in_window`). The map stays while the helper works: every unmap settles
    /// the helper's job first (`window_for`, `cut_back`).
    fn populate_ahead(&self, zeroed: bool) -> Option<(usize, usize)> {
        let (map, _) = self.map.as_ref()?;
        // Whole pages (`madvise` wants a page-aligned start; a window starts where the log
        // ends, anywhere in a page).
        let page = page_size();
        let from = (map.as_ptr() as usize + POPULATE_SKIP).next_multiple_of(page);
        let to = (map.as_ptr() as usize + map.len()) / page * page;
        (zeroed && to > from).then_some((from, to - from))
    }

    /// Takes the helper's answer (no helper may extend the file after it is cut, or fault in
    /// pages of a map that is gone), unmaps and cuts the file back to the bytes appended. A failed allocation ahead (a full disk, for a
    /// window the log did not need yet) does not stop the cut: it is logged, not returned.
    fn cut_back(&mut self) -> io::Result<()> {
        self.ahead_at = None;
        // The helper's job first: it may be faulting in pages of the map.
        if let Err(e) = self.settle_ahead() {
            log::warn!("allocating a WAL window ahead failed ({e}); the WAL is cut back anyway");
        }
        self.map = None;
        if self.allocated != self.len {
            self.file.set_len(self.len)?;
            self.allocated = self.len;
        }
        Ok(())
    }

    /// Asks the helper (started now if need be) for the window after the allocated bytes.
    /// Without a helper (it could not start) the next window is allocated when it is needed.
    fn request_ahead(&mut self, zero: bool, populate: Option<(usize, usize)>) {
        if self.ahead.is_none() {
            match Ahead::start(&self.file) {
                Ok(a) => self.ahead = Some(a),
                Err(e) => {
                    log::warn!("no helper to allocate the WAL ahead ({e})");
                    return;
                }
            }
        }
        if let Some(a) = self.ahead.as_mut() {
            #[cfg(test)]
            let len = if self.fail_ahead {
                u64::MAX / 2
            } else {
                WINDOW
            };
            #[cfg(not(test))]
            let len = WINDOW;
            // An unsynced log's finished pages (all but the one being filled) start on their
            // way to the disk now, a window at a time, so that the fsync that seals the log
            // (a memtable rotation, on the writer's path) has about one window left to write
            // instead of the whole log (RocksDB's `wal_bytes_per_sync`). A synced log's
            // fsyncs write its pages anyway. This changes only when pages reach the disk, not
            // what a sync guarantees: a power loss may keep any unsynced page.
            let done = self.len / PAGE * PAGE;
            let writeback = (zero && done > self.written_back).then_some((self.written_back, done));
            if writeback.is_some() {
                self.written_back = done;
            }
            self.ahead_zeroed = zero;
            #[cfg(test)]
            if populate.is_some() {
                self.populate_jobs += 1;
            }
            let job = Job {
                offset: self.allocated,
                len,
                zero,
                writeback,
                populate,
            };
            if !a.request(job) {
                self.ahead = None;
            }
        }
    }

    /// Appends the record `head` + `payload` (`whole`, if the caller has those bytes in one
    /// piece): copied into the mapped window, payload first, then the header but for its last
    /// 4 bytes (its checksum word), then, after a release fence, that word in one store, so
    /// that a crash (whose writeback may catch any prefix of the stores) never leaves a whole
    /// header over a partial payload. Without a map, one `write(2)` at the log's end.
    fn store_framed(
        &mut self,
        head: &[u8],
        payload: &[&[u8]],
        whole: Option<&[u8]>,
    ) -> io::Result<()> {
        let len = head.len() + payload.iter().map(|p| p.len()).sum::<usize>();
        let window = if self.unmappable {
            None
        } else {
            self.window_for(len)?
        };
        let Some((map, at)) = window else {
            // One `write(2)` at the log's end: not cut short by a crash, in the page cache
            // when it returns. The file may be allocated past it, or not yet this far.
            match whole {
                Some(data) => self.file.write_all_at(data, self.len)?,
                None => {
                    let mut data = Vec::with_capacity(len);
                    data.extend_from_slice(head);
                    for p in payload {
                        data.extend_from_slice(p);
                    }
                    self.file.write_all_at(&data, self.len)?;
                }
            }
            self.len += len as u64;
            self.allocated = self.allocated.max(self.len);
            return Ok(());
        };
        let dst = &mut map[at..at + len];
        let mut from = head.len();
        for p in payload {
            dst[from..from + p.len()].copy_from_slice(p);
            from += p.len();
        }
        let last = head.len().saturating_sub(4);
        dst[..last].copy_from_slice(&head[..last]);
        fence(Ordering::Release);
        if head.len() - last == 4 {
            let word =
                u32::from_ne_bytes([head[last], head[last + 1], head[last + 2], head[last + 3]]);
            let p = dst[last..head.len()].as_mut_ptr().cast::<u32>();
            // SAFETY: `p` points at 4 bytes of `dst`, which is mapped and writable; the store
            // is unaligned-safe and is one instruction, so a crash never leaves half of it.
            #[allow(unsafe_code)]
            unsafe {
                p.write_unaligned(word)
            };
        } else {
            dst[last..head.len()].copy_from_slice(&head[last..]);
        }
        let end: *const u8 = dst.as_ptr_range().end;
        self.len += len as u64;
        // The next records' lines, from the one this record ends in (see `crate::prefetch`).
        crate::prefetch::for_write(end, 4);
        if let Some((at, zero)) = self.ahead_at {
            if self.len >= at {
                self.ahead_at = None;
                self.request_ahead(zero, None);
            }
        }
        Ok(())
    }
}

/// The system's page size (`sysconf(_SC_PAGESIZE)`; 4 KiB if it cannot say).
fn page_size() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        // SAFETY: a plain query with no memory passed.
        #[allow(unsafe_code)]
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
    })
}

/// Faults in `[addr, addr + len)` of this process's memory for writing
/// (`MADV_POPULATE_WRITE`, Linux 5.14 and later), best effort: on an older kernel, or any
/// error, the pages fault when first written, as without it.
fn populate_write(addr: usize, len: usize) -> io::Result<()> {
    // SAFETY: the range is part of a live shared map of the log (the writer keeps it mapped
    // until it has taken this job's answer: see `MappedLog::populate_ahead`); faulting its
    // pages in changes none of their bytes.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        log::debug!("populating a WAL window failed: {e}");
        return Err(e);
    }
    Ok(())
}

/// Allocates `[offset, offset + len)` of `file`, growing it, and if `zero` writes zeros over
/// it. `posix_fallocate` reserves the blocks (a full disk fails here, not at a later store
/// through the map, on the file systems [`maps_safely`] accepts). The zeros put the pages in
/// the page cache with one call, which costs the writer far less than a page fault per 4 KiB
/// that would allocate each one (fillseq 1M: 1.70M against 1.50M keys/s, three pairs); an
/// unsynced log writes its data over them before writeback. A log that was synced recently
/// skips them (see `synced_in_window`).
fn allocate(file: &File, offset: u64, len: u64, zero: bool) -> io::Result<()> {
    let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "file offset too large");
    let offset = libc::off_t::try_from(offset).map_err(|_| too_big())?;
    let len = libc::off_t::try_from(len).map_err(|_| too_big())?;
    retry_interrupted(|| {
        if interrupted_for_a_test() {
            return libc::EINTR;
        }
        // SAFETY: a plain system call on a descriptor this struct owns; no memory is passed.
        #[allow(unsafe_code)]
        unsafe {
            libc::posix_fallocate(file.as_raw_fd(), offset, len)
        }
    })?;
    if !zero {
        return Ok(());
    }
    static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
    let (mut at, end) = (offset as u64, offset as u64 + len as u64);
    while at < end {
        let n = (end - at).min(ZEROS.len() as u64) as usize;
        file.write_all_at(&ZEROS[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
thread_local! {
    /// How many of this thread's next `posix_fallocate` calls fail with `EINTR` (tests).
    static INTERRUPT_FALLOCATES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// True if a test asked this thread's next `posix_fallocate` to fail with `EINTR`.
fn interrupted_for_a_test() -> bool {
    #[cfg(test)]
    {
        INTERRUPT_FALLOCATES.with(|c| {
            let n = c.get();
            c.set(n.saturating_sub(1));
            n > 0
        })
    }
    #[cfg(not(test))]
    false
}

/// Runs `call` (which returns 0 or an error number, as `posix_fallocate` does) again for as
/// long as it reports `EINTR`. tmpfs's fallocate gives up with `EINTR` when any signal is
/// pending (a profiler's timer, a child's exit), with no `SA_RESTART`, and glibc passes it on:
/// taken as a failure, one such signal stopped writes until a reopen.
fn retry_interrupted(mut call: impl FnMut() -> libc::c_int) -> io::Result<()> {
    loop {
        match call() {
            0 => return Ok(()),
            libc::EINTR => continue,
            rc => return Err(io::Error::from_raw_os_error(rc)),
        }
    }
}

/// True if `file` lies on a file system where a log may be written through a map: one whose
/// `posix_fallocate` reserves the blocks that later stores overwrite (ext2/3/4, XFS, tmpfs).
/// On a copy-on-write file system (btrfs, ZFS, bcachefs) an overwrite needs new space, and a
/// full disk would stop the process with `SIGBUS` from a store instead of failing an append;
/// there, and on any file system not known here (network, FUSE), logs use `write(2)`.
pub(crate) fn maps_safely(file: &File) -> bool {
    const EXT_SUPER_MAGIC: i64 = 0xEF53;
    const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    // SAFETY: `statfs` is plain old data that the call fills; the descriptor is open.
    #[allow(unsafe_code)]
    let (rc, kind) = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        let rc = libc::fstatfs(file.as_raw_fd(), &mut st);
        (rc, st.f_type as i64)
    };
    rc == 0 && matches!(kind, EXT_SUPER_MAGIC | XFS_SUPER_MAGIC | TMPFS_MAGIC)
}

impl WritableFile for MappedLog {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.append_framed(data, 0)
    }

    /// Has a helper thread allocate (and zero) the first window now, while the caller does
    /// other work (the write path syncs the directory and the previous WAL between creating a
    /// log and its first append), the second once half of the first is written (so that a log
    /// of a few records stays one window long), and every later one while the one before it is
    /// written: the writer then allocates nothing itself unless it outruns the helper. Without it the
    /// writer allocates the first two windows of the log (2 MiB of zeros, ~7% of a
    /// sequential load's writer time) before a helper starts. Only for a log nothing was
    /// appended to or allocated for yet; if no helper can start, each window is allocated
    /// when it is needed.
    fn expect_appends(&mut self) {
        if self.allocated == 0 && self.ahead.is_none() && !self.unmappable {
            self.request_ahead(true, None);
        }
    }

    fn append_framed(&mut self, data: &[u8], head: usize) -> io::Result<()> {
        let head = head.min(data.len());
        self.store_framed(&data[..head], &[&data[head..]], Some(data))
    }

    fn append_framed_parts(&mut self, head: &[u8], payload: &[&[u8]]) -> io::Result<()> {
        self.store_framed(head, payload, None)
    }

    /// True while the log is written through its map.
    fn takes_pieces(&self) -> bool {
        !self.unmappable
    }

    /// True if the current window holds `n` more bytes and reaching its middle asks the
    /// helper for nothing new (a request may start a helper thread).
    fn appends_in_memory(&self, n: usize) -> bool {
        let end = self.len.saturating_add(n as u64);
        !self.unmappable
            && matches!(&self.map, Some((m, start)) if start + m.len() as u64 >= end)
            && self.ahead_at.is_none_or(|(at, _)| end < at)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.synced_in_window = true;
        if self.allocated == self.synced_size {
            return self.file.sync_data();
        }
        self.file.sync_all()?;
        self.synced_size = self.allocated;
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.cut_back()?;
        self.sync()
    }

    fn len(&self) -> u64 {
        self.len
    }
}

impl Drop for MappedLog {
    /// Cuts the file back to the bytes appended, best effort: a file that keeps its zero tail
    /// (this fails, or the process dies first) still reads correctly.
    fn drop(&mut self) {
        let _ = self.cut_back();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review finding (session 24): an `EINTR` from `posix_fallocate` (tmpfs, with a signal
    /// pending) failed the append that needed the window, and so stopped writes. It is retried;
    /// any other error is still returned.
    #[test]
    fn an_allocation_whose_fallocate_is_interrupted_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let file = create_file(&dir.path().join("log")).unwrap();
        INTERRUPT_FALLOCATES.with(|c| c.set(3));
        allocate(&file, 0, 8192, false).unwrap();
        assert_eq!(INTERRUPT_FALLOCATES.with(|c| c.get()), 0);
        assert_eq!(file.metadata().unwrap().len(), 8192);
    }

    #[test]
    fn an_interrupted_fallocate_is_retried_and_other_errors_are_not() {
        let mut answers = vec![0, libc::EINTR, libc::EINTR];
        let mut calls = 0;
        retry_interrupted(|| {
            calls += 1;
            answers.pop().unwrap()
        })
        .unwrap();
        assert_eq!(calls, 3);
        let mut answers = vec![libc::EINTR, libc::ENOSPC, libc::EINTR];
        let e = retry_interrupted(|| answers.pop().unwrap()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(answers, vec![libc::EINTR]);
    }

    /// A new log `log` in a temporary directory (kept alive by the returned guard).
    fn fresh(name: &str) -> (tempfile::TempDir, std::path::PathBuf, MappedLog) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        let w = MappedLog::new(create_file(&p).unwrap());
        (dir, p, w)
    }

    #[test]
    fn appends_across_windows_and_finish_cuts_the_zero_tail() {
        let (_dir, p, mut w) = fresh("log");
        let mut want = Vec::new();
        // Records of varied sizes, one larger than a window, crossing several windows.
        for (i, n) in [100usize, 5000, WINDOW as usize + 17, 3, 900_000, 0, 64]
            .into_iter()
            .enumerate()
        {
            let rec: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
            w.append_framed(&rec, 16).unwrap();
            want.extend_from_slice(&rec);
            assert_eq!(w.len(), want.len() as u64);
        }
        // Before `finish` the file is longer than the log, and what is past the log is zero.
        let raw = std::fs::read(&p).unwrap();
        assert!(raw.len() > want.len(), "{} <= {}", raw.len(), want.len());
        assert_eq!(&raw[..want.len()], &want[..]);
        assert!(raw[want.len()..].iter().all(|&b| b == 0));
        w.finish().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want);
        // Appends may go on after a finish.
        w.append(b"more").unwrap();
        drop(w);
        want.extend_from_slice(b"more");
        assert_eq!(std::fs::read(&p).unwrap(), want);
    }

    #[test]
    fn an_unsynced_log_starts_the_writeback_of_its_finished_pages_a_window_at_a_time() {
        let (_dir, p, mut w) = fresh("log");
        let rec = vec![7u8; 1000];
        let mut want = Vec::new();
        let mut asked = Vec::new();
        // Three and a half windows of 1,000-byte records.
        while want.len() < 3 * WINDOW as usize + WINDOW as usize / 2 {
            w.append_framed(&rec, 16).unwrap();
            want.extend_from_slice(&rec);
            if asked.last() != Some(&w.written_back) {
                asked.push(w.written_back);
            }
        }
        // Each window switch after the first asks for the pages finished by then (whole pages
        // only: the one being filled is not touched), each range following the last.
        assert_eq!(asked.len(), 4, "{asked:?}"); // 0, then three switches
        for pair in asked.windows(2) {
            assert!(pair[1] > pair[0], "{asked:?}");
            assert_eq!(pair[1] % PAGE, 0);
        }
        assert!(*asked.last().unwrap() <= 3 * WINDOW);
        assert!(*asked.last().unwrap() > 2 * WINDOW);
        w.finish().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want);

        // A synced log is written by its fsyncs: no writeback is asked for.
        let (_dir, p, mut w) = fresh("synced");
        let mut want = Vec::new();
        while want.len() < 3 * WINDOW as usize {
            w.append_framed(&rec, 16).unwrap();
            w.sync().unwrap();
            want.extend_from_slice(&rec);
        }
        assert_eq!(w.written_back, 0);
        w.finish().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want);
    }

    #[test]
    fn a_record_in_pieces_is_the_same_bytes_as_the_record_whole_mapped_or_not() {
        let (dir, p, mut whole) = fresh("whole");
        let q = dir.path().join("pieces");
        let mut pieces = MappedLog::new(create_file(&q).unwrap());
        assert!(pieces.takes_pieces());
        let mut want = Vec::new();
        for (i, sizes) in [
            vec![5usize, 120],
            vec![0, 7, 0, 300],
            vec![WINDOW as usize + 3],
            vec![1, 2, 3, 4, 5, 6, 7],
            vec![],
            vec![70_000, 64],
        ]
        .into_iter()
        .enumerate()
        {
            // A 16-byte header whose last 4 bytes are its checksum word, then the pieces.
            let head: Vec<u8> = (0..16).map(|j| (i * 7 + j + 1) as u8).collect();
            let parts: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(k, &n)| (0..n).map(|j| (i * 13 + k * 5 + j) as u8).collect())
                .collect();
            let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let mut rec = head.clone();
            rec.extend(parts.iter().flatten());
            whole.append_framed(&rec, 16).unwrap();
            pieces.append_framed_parts(&head, &slices).unwrap();
            want.extend_from_slice(&rec);
            assert_eq!(pieces.len(), want.len() as u64);
            if i == 2 {
                // From the next window on, the pieces go through write(2).
                pieces.refuse_maps = true;
            }
        }
        assert!(pieces.unmappable && !pieces.takes_pieces());
        whole.finish().unwrap();
        pieces.finish().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want);
        assert_eq!(std::fs::read(&q).unwrap(), want);
    }

    /// The part of a new window the helper faults in: whole pages inside the map, past the
    /// bytes the writer fills first, only for a zeroed window; faulting them in succeeds on a
    /// kernel that has `MADV_POPULATE_WRITE` (5.14) and changes no byte of the log.
    #[test]
    fn the_helper_populates_whole_pages_of_a_zeroed_window_and_changes_no_byte() {
        let (_dir, p, mut w) = fresh("log");
        let mut want = Vec::new();
        // A first record, then one that does not fit: the second window starts mid-page.
        for n in [1000usize, WINDOW as usize] {
            let rec: Vec<u8> = (0..n).map(|j| (j % 251) as u8 + 1).collect();
            w.append_framed(&rec, 16).unwrap();
            want.extend_from_slice(&rec);
        }
        let (start, end) = {
            let (map, _) = w.map.as_ref().unwrap();
            (map.as_ptr() as usize, map.as_ptr() as usize + map.len())
        };
        let page = page_size();
        assert_ne!(
            start % page,
            0,
            "the test wants a window that starts mid-page"
        );
        assert_eq!(w.populate_ahead(false), None);
        let (from, len) = w.populate_ahead(true).unwrap();
        assert_eq!(from % page, 0);
        assert_eq!(len % page, 0);
        assert!(from >= start + POPULATE_SKIP && from + len <= end && len > 0);
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|x| x.parse::<u32>().ok());
        let kernel = (v.next().unwrap_or(0), v.next().unwrap_or(0));
        let res = populate_write(from, len);
        if kernel >= (5, 14) {
            res.unwrap();
        }
        w.append_framed(b"after", 16).unwrap();
        want.extend_from_slice(b"after");
        w.finish().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want);
    }

    /// An unsynced log's windows are zeroed and faulted in by the helper; a log synced in
    /// every window gets windows allocated without zeros, which are not faulted in (that
    /// would dirty pages its fsyncs then write).
    #[test]
    fn only_zeroed_windows_are_faulted_in() {
        let rec = vec![3u8; 4000];
        for synced in [false, true] {
            let (_dir, p, mut w) = fresh("log");
            let mut want = Vec::new();
            while want.len() < 5 * WINDOW as usize {
                w.append_framed(&rec, 16).unwrap();
                want.extend_from_slice(&rec);
                if synced {
                    w.sync().unwrap();
                }
            }
            if synced {
                assert_eq!(w.populate_jobs, 0);
            } else {
                assert!(w.populate_jobs >= 3, "{}", w.populate_jobs);
            }
            w.finish().unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), want);
        }
    }

    #[test]
    fn bytes_are_in_the_file_before_any_sync_or_unmap() {
        let (_dir, p, mut w) = fresh("log");
        w.append_framed(b"0123456789abcdefpayload", 16).unwrap();
        // Another descriptor sees the bytes at once: they are in the page cache, which a
        // process crash does not take away.
        let raw = std::fs::read(&p).unwrap();
        assert_eq!(&raw[..23], b"0123456789abcdefpayload");
        assert_eq!(raw.len() as u64, WINDOW);
        // A leak (no drop, as in a crash) keeps them too.
        std::mem::forget(w);
        assert_eq!(
            &std::fs::read(&p).unwrap()[..23],
            b"0123456789abcdefpayload"
        );
    }

    #[test]
    fn a_file_system_that_refuses_maps_gets_plain_writes() {
        let (dir, p, mut w) = fresh("log");
        w.append_framed(b"first record, mapped", 16).unwrap();
        // Maps fail from the next window on: the log goes on with write(2), in order.
        w.refuse_maps = true;
        let big = vec![7u8; WINDOW as usize];
        w.append_framed(&big, 16).unwrap();
        w.append_framed(b"third", 16).unwrap();
        assert!(w.unmappable);
        let mut want = b"first record, mapped".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"third");
        assert_eq!(&std::fs::read(&p).unwrap()[..want.len()], &want[..]);
        w.sync().unwrap();
        w.finish().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want);
        // A log that could never be mapped works the same way.
        let q = dir.path().join("log2");
        let mut w = MappedLog::new(create_file(&q).unwrap());
        w.refuse_maps = true;
        w.append(b"only").unwrap();
        w.finish().unwrap();
        assert_eq!(std::fs::read(&q).unwrap(), b"only");
    }

    #[test]
    fn a_failed_window_ahead_fails_the_append_that_needs_it_not_the_finish() {
        let (dir, p, mut w) = fresh("log");
        w.fail_ahead = true;
        let big = vec![3u8; WINDOW as usize - 100];
        w.append_framed(&big, 16).unwrap();
        // The second window is mapped and the helper asked for the third, which fails.
        w.append_framed(&big, 16).unwrap();
        // The log is cut and synced all the same: the failed window was never needed.
        w.finish().unwrap();
        assert_eq!(std::fs::read(&p).unwrap().len(), big.len() * 2);
        // Without the finish, the append that needs that window gets the error.
        let q = dir.path().join("log2");
        let mut w = MappedLog::new(create_file(&q).unwrap());
        w.fail_ahead = true;
        w.append_framed(&big, 16).unwrap();
        w.append_framed(&big, 16).unwrap();
        let err = w.append_framed(&big, 16).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(w.len(), 2 * big.len() as u64);
        // Retried once the disk has room, the append allocates its window itself (it used
        // to map one past the file's end, and the copy died of SIGBUS).
        w.fail_ahead = false;
        w.append_framed(&big, 16).unwrap();
        w.finish().unwrap();
        assert_eq!(std::fs::read(&q).unwrap(), [&big[..], &big, &big].concat());
    }

    #[test]
    fn a_log_told_to_expect_appends_has_its_first_window_before_any_append() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let mut w = MappedLog::new(create_file(&p).unwrap());
        w.expect_appends();
        // The helper allocates and zeroes the first window with no append asking.
        w.settle_ahead().unwrap();
        assert_eq!(w.allocated, WINDOW);
        let raw = std::fs::read(&p).unwrap();
        assert_eq!(raw.len() as u64, WINDOW);
        assert!(raw.iter().all(|&b| b == 0));
        // A few records leave the log one window long; half a window written asks the helper
        // for the second.
        let rec = vec![9u8; 1000];
        w.append_framed(&rec, 16).unwrap();
        w.settle_ahead().unwrap();
        assert_eq!(w.allocated, WINDOW);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), WINDOW);
        let half = vec![4u8; WINDOW as usize / 2];
        w.append_framed(&half, 16).unwrap();
        w.settle_ahead().unwrap();
        assert_eq!(w.allocated, 2 * WINDOW);
        let big = vec![5u8; WINDOW as usize];
        w.append_framed(&big, 16).unwrap();
        w.finish().unwrap();
        let mut want = rec.clone();
        want.extend_from_slice(&half);
        want.extend_from_slice(&big);
        assert_eq!(std::fs::read(&p).unwrap(), want);
        // A log never appended to is cut back to nothing.
        let q = dir.path().join("empty");
        let mut w = MappedLog::new(create_file(&q).unwrap());
        w.expect_appends();
        w.finish().unwrap();
        assert_eq!(std::fs::read(&q).unwrap().len(), 0);
        // A first window the helper fails to allocate fails the first append.
        let r = dir.path().join("full");
        let mut w = MappedLog::new(create_file(&r).unwrap());
        w.fail_ahead = true;
        w.expect_appends();
        let err = w.append(b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn a_failed_allocation_is_an_error_not_a_signal() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let file = OpenOptions::new()
            .read(true)
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .unwrap();
        drop(file);
        // A read-only descriptor cannot be allocated or mapped for writing.
        let ro = File::open(&p).unwrap();
        let mut w = MappedLog::new(ro);
        assert!(w.append(b"x").is_err());
        assert_eq!(w.len(), 0);
    }

    /// An append is "in memory" only while the mapped window has room for it and it does not
    /// reach the mark that asks the helper for the second window.
    #[test]
    fn an_append_is_in_memory_only_inside_the_mapped_window() {
        let (dir, _p, mut w) = fresh("log");
        // No window mapped yet.
        assert!(!w.appends_in_memory(10));
        w.append_framed(&[1u8; 100], 16).unwrap();
        assert!(w.appends_in_memory(10));
        assert!(w.appends_in_memory(WINDOW as usize - 100));
        assert!(!w.appends_in_memory(WINDOW as usize - 99));
        w.finish().unwrap();
        // A log expecting appends: not past the half of its first window (that append asks
        // the helper for the second window).
        let q = dir.path().join("expecting");
        let mut w = MappedLog::new(create_file(&q).unwrap());
        w.expect_appends();
        w.append_framed(&[2u8; 100], 16).unwrap();
        let half = WINDOW as usize / 2;
        assert!(w.appends_in_memory(half - 101));
        assert!(!w.appends_in_memory(half - 100));
        w.finish().unwrap();
        // A log written with write(2) never is.
        let r = dir.path().join("refused");
        let mut w = MappedLog::new(create_file(&r).unwrap());
        w.refuse_maps = true;
        w.append(b"x").unwrap();
        assert!(!w.appends_in_memory(1));
        w.finish().unwrap();
    }

    /// Once the helper runs, each window it is asked for keeps it off the writer's CPU (with
    /// two CPUs or more).
    #[test]
    fn the_helper_is_kept_off_the_writers_cpu() {
        let (_dir, p, mut w) = fresh("log");
        let rec = vec![6u8; 4000];
        let mut want = Vec::new();
        for windows in [2, 5] {
            while want.len() < windows * WINDOW as usize {
                w.append_framed(&rec, 16).unwrap();
                want.extend_from_slice(&rec);
            }
            // The helper started at the second window: wait until it runs.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while w.ahead.as_ref().unwrap().tid.load(Ordering::Relaxed) == 0 {
                assert!(std::time::Instant::now() < deadline);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let ahead = w.ahead.as_ref().unwrap();
        if let Some(place) = &ahead.placement {
            let tid = ahead.tid.load(Ordering::Relaxed);
            assert!(tid > 0);
            let off = place.kept_off().expect("kept off a CPU");
            let cpus = super::super::placement::cpus_of(tid).unwrap();
            assert!(!cpus.contains(&off) && !cpus.is_empty(), "{cpus:?} {off}");
        }
        w.finish().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want);
    }
}
