//! Framed, checksummed record logs: the byte format shared by the WAL and the manifest.
//!
//! ```text
//! record     := payload_crc u32 | len u32 | kind u8 | reserved [u8; 3] | header_crc u32 | payload
//! payload_crc = mask(crc32(payload))
//! header_crc  = mask(crc32(file_number u64 LE ++ record[0..12]))
//! kind        = 1 (a whole record); reserved = 0
//! ```
//!
//! The header has its own checksum, bound to the number of the log file, so that a candidate
//! record start is judged in constant time and a record copied from another log (or stored
//! inside a value) never validates here.
//!
//! Reading tells a *torn tail* (a write cut short by a crash: the last record is incomplete, or
//! zero-filled from a page boundary on, and no valid record follows) from *corruption* (bytes
//! that were once good went bad), which is an error. A bad record is corruption if a valid
//! record follows it, if its header is valid and its complete payload fails its checksum, or if
//! a single-bit change to its header makes it whole: a crash truncates or zero-fills, it does
//! not flip bits.

use crate::error::{Error, Result};
use crate::fs::{RandomAccessFile, WritableFile, PAGE, SECTOR};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How many times a live log's reader reads a bad record again before it calls it corruption
/// (see [`RecordReader::live`]).
pub(crate) const LIVE_RETRIES: u32 = 100;

/// Bytes before the payload of each record.
pub(crate) const HEADER_LEN: usize = 16;
const KIND_FULL: u8 = 1;
/// Largest payload accepted (1 GiB + slack for framing of a maximal batch).
pub(crate) const MAX_PAYLOAD: usize = (1 << 30) + (1 << 20);

/// LevelDB's CRC mask: storing the CRC of data that itself contains CRCs is error-prone.
pub(crate) fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

fn header_crc(file_number: u64, first12: &[u8]) -> u32 {
    // One update over the 20 bytes together: the CRC of the concatenation, as two updates
    // would give, but one 16-byte step of the table-driven CRC and four single bytes instead
    // of twenty single bytes (a header is framed once per WAL record).
    let mut covered = [0u8; 20];
    covered[..8].copy_from_slice(&file_number.to_le_bytes());
    let n = first12.len().min(12);
    covered[8..8 + n].copy_from_slice(&first12[..n]);
    mask_crc(crc32fast::hash(&covered[..8 + n]))
}

/// Fills the header of a record whose payload starts at `buf[HEADER_LEN..]`, for the log
/// numbered `file_number`. `buf[..HEADER_LEN]` must have been reserved by the caller.
/// The payload must be at most [`MAX_PAYLOAD`] bytes (the manifest's are: see [`frame`]; the
/// WAL's, a batch and a write group bounded below it, are framed with [`header`]).
pub(crate) fn frame_in_place(buf: &mut [u8], file_number: u64) {
    let payload_crc = crc32fast::hash(&buf[HEADER_LEN..]);
    let h = header(buf.len() - HEADER_LEN, payload_crc, file_number);
    buf[..HEADER_LEN].copy_from_slice(&h);
}

/// The header of a record of `payload_len` bytes (at most [`MAX_PAYLOAD`]) whose CRC-32
/// (unmasked) is `payload_crc`, for the log numbered `file_number`. The WAL computes that CRC
/// from the pieces of its record (the batches, written long before) rather than from a
/// buffer it has just written in small stores: reading those back stalls the CPU until the
/// stores reach the cache (the vector loads of a CRC over 128 bytes or more cannot be
/// forwarded from them), which cost the sequential load 5-8% of its time.
pub(crate) fn header(payload_len: usize, payload_crc: u32, file_number: u64) -> [u8; HEADER_LEN] {
    debug_assert!(payload_len <= MAX_PAYLOAD);
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&mask_crc(payload_crc).to_le_bytes());
    h[4..8].copy_from_slice(&(payload_len as u32).to_le_bytes());
    h[8] = KIND_FULL;
    let hcrc = header_crc(file_number, &h[0..12]);
    h[12..16].copy_from_slice(&hcrc.to_le_bytes());
    h
}

/// One framed record for the log numbered `file_number` (manifest edits and snapshots).
///
/// Errors: [`Error::InvalidArgument`] for a payload over [`MAX_PAYLOAD`], which every reader
/// refuses (a manifest snapshot of some 8,000 tables with 64 KiB keys gets there): the
/// record is not written, rather than written and then read as a torn tail.
pub(crate) fn frame(payload: &[u8], file_number: u64) -> Result<Vec<u8>> {
    if payload.len() > MAX_PAYLOAD {
        return Err(Error::InvalidArgument(format!(
            "a log record of {} bytes is over the largest a reader accepts ({MAX_PAYLOAD})",
            payload.len()
        )));
    }
    let mut buf = vec![0u8; HEADER_LEN];
    buf.extend_from_slice(payload);
    frame_in_place(&mut buf, file_number);
    Ok(buf)
}

/// Checks a header: `Some((payload_crc, len))` if it is valid for `file_number` and its
/// payload fits in `room` bytes.
fn check_header(h: &[u8], file_number: u64, room: u64) -> Option<(u32, u32)> {
    if h.len() < HEADER_LEN || h[8] != KIND_FULL || h[9..12] != [0, 0, 0] {
        return None;
    }
    let stored = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
    if header_crc(file_number, &h[0..12]) != stored {
        return None;
    }
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    if len as usize > MAX_PAYLOAD || u64::from(len) > room {
        return None;
    }
    Some((u32::from_le_bytes([h[0], h[1], h[2], h[3]]), len))
}

/// Writes framed records to a file.
#[derive(Debug)]
pub(crate) struct RecordWriter {
    file: Box<dyn WritableFile>,
}

impl RecordWriter {
    pub(crate) fn new(file: Box<dyn WritableFile>) -> Self {
        RecordWriter { file }
    }

    /// Passes on [`WritableFile::expect_appends`].
    pub(crate) fn expect_appends(&mut self) {
        self.file.expect_appends();
    }

    /// Appends an already framed buffer (see [`frame_in_place`]) with one write, its header
    /// stored last.
    pub(crate) fn append_framed(&mut self, framed: &[u8]) -> io::Result<()> {
        self.file.append_framed(framed, HEADER_LEN)
    }

    /// Passes on [`WritableFile::takes_pieces`].
    pub(crate) fn takes_pieces(&self) -> bool {
        self.file.takes_pieces()
    }

    /// [`WritableFile::appends_in_memory`] for a record of `payload` bytes.
    pub(crate) fn appends_in_memory(&self, payload: usize) -> bool {
        self.file.appends_in_memory(HEADER_LEN + payload)
    }

    /// Appends a record from its [`header`] and its payload in pieces, the header stored
    /// last (see [`WritableFile::append_framed_parts`]).
    pub(crate) fn append_framed_parts(
        &mut self,
        head: &[u8; HEADER_LEN],
        payload: &[&[u8]],
    ) -> io::Result<()> {
        self.file.append_framed_parts(head, payload)
    }

    pub(crate) fn sync(&mut self) -> io::Result<()> {
        self.file.sync()
    }

    /// Ends the log: space allocated ahead is given back and everything is synced.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        self.file.finish()
    }

    pub(crate) fn len(&self) -> u64 {
        self.file.len()
    }
}

/// What happened at the end of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct TailReport {
    /// Offset where a torn tail starts, if there was one.
    pub(crate) torn_at: Option<u64>,
    /// Bytes of the torn tail that were dropped.
    pub(crate) dropped_bytes: u64,
    /// The torn tail starts at pages a power loss lost while later ones reached the disk (or
    /// at a record header writeback caught half-stored): valid records follow it, none of
    /// them a sync mark (see [`RecordReader::lost_pages_after_sync`]).
    pub(crate) lost_pages: bool,
}

/// Zero bytes, ending at a 4 KiB boundary, that a damaged stretch must hold to be read as a
/// page a power loss lost (a single flipped bit never makes them).
const LOST_PAGE_ZEROS: usize = 32;

/// Bytes a scan past a bad record reads at a time: however far the rest of the log runs, the
/// scan holds one window (and at most one candidate record's payload) in memory. Small in
/// unit tests, so that their logs cross many windows.
#[cfg(not(test))]
const SCAN_WINDOW: u64 = 1 << 20;
#[cfg(test)]
const SCAN_WINDOW: u64 = 1000;

/// What a record that does not decode, with no valid record after it, is.
enum Verdict {
    /// Damage a crash cannot explain.
    Corrupt(&'static str),
    /// A write cut short by a crash.
    Torn,
    /// A write a power loss left with a page missing in its middle (see
    /// [`RecordReader::lost_pages_after_sync`]).
    LostPages,
}

/// What follows a record that does not decode.
struct After {
    /// Offset of the first valid record after it.
    first_valid: Option<u64>,
    /// A valid sync mark comes after it.
    sync_mark: bool,
}

/// Reads the records of a log in order.
#[derive(Debug)]
pub(crate) struct RecordReader {
    file: Arc<dyn RandomAccessFile>,
    path: PathBuf,
    file_number: u64,
    len: u64,
    pos: u64,
    tail: TailReport,
    done: bool,
    /// Another process may be appending to the log while it is read (see [`live`](Self::live)).
    live: bool,
    /// Tells a sync mark from other payloads, for a log whose pages a power loss may lose out
    /// of order after its last sync (see [`lost_pages_after_sync`](Self::lost_pages_after_sync)).
    sync_mark: Option<fn(&[u8]) -> bool>,
}

/// One record read from a log.
#[derive(Debug)]
pub(crate) struct Record {
    /// Offset of the record's header in the file.
    pub(crate) offset: u64,
    pub(crate) payload: Vec<u8>,
}

impl RecordReader {
    /// Reads the log at `path`, whose records were written for `file_number`.
    pub(crate) fn new(file: Arc<dyn RandomAccessFile>, path: &Path, file_number: u64) -> Self {
        let len = file.len();
        RecordReader {
            file,
            path: path.to_path_buf(),
            file_number,
            len,
            pos: 0,
            tail: TailReport::default(),
            done: false,
            live: false,
            sync_mark: None,
        }
    }

    /// Reads a log that another process may be appending to (a read-only open of a database
    /// in use, `silt wal dump` of a live WAL). A writer through a map stores a record's header
    /// last, so a reader can find a record whose header is not there yet with the next ones
    /// already after it: such a record is read again (up to [`LIVE_RETRIES`] times, 1 ms
    /// apart) before it counts as corruption. The file can also be cut back to its records
    /// (a seal or close) while it is read: reading past the new end ends the log.
    pub(crate) fn live(mut self) -> Self {
        self.live = true;
        self
    }

    /// Reads a log whose writer marks every sync with a record that `is_sync_mark` tells apart
    /// (the WAL). Writeback writes a file's dirty pages in no promised order, so a power loss
    /// can keep a later page of the unsynced end of the log and lose an earlier one: a bad
    /// record followed by valid ones is cut off as a torn tail (with
    /// [`TailReport::lost_pages`] set) instead of being corruption when the bad stretch holds
    /// what a lost page leaves (a header of zeros, or at least [`LOST_PAGE_ZEROS`] zero bytes
    /// up to a 4 KiB boundary) and no sync mark follows it. So is a record whole but for a
    /// header checksum word of zeros, the header writeback can catch half-stored in a log
    /// written through a map (see `header_half_stored`). A sync mark after either means an
    /// fsync wrote those pages: then the damage is corruption, as before.
    pub(crate) fn lost_pages_after_sync(mut self, is_sync_mark: fn(&[u8]) -> bool) -> Self {
        self.sync_mark = Some(is_sync_mark);
        self
    }

    /// The torn tail found, valid once [`next`](Self::next) returned `Ok(None)`.
    pub(crate) fn tail(&self) -> TailReport {
        self.tail
    }

    fn read(&self, offset: u64, n: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; n];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|e| crate::error::io_context("read", &self.path, e))?;
        Ok(buf)
    }

    /// Tries to decode a valid record at `offset`; `None` if there is none.
    fn try_record(&self, offset: u64) -> Result<Option<Vec<u8>>> {
        let remaining = self.len - offset;
        if remaining < HEADER_LEN as u64 {
            return Ok(None);
        }
        let header = self.read(offset, HEADER_LEN)?;
        let Some((crc, len)) =
            check_header(&header, self.file_number, remaining - HEADER_LEN as u64)
        else {
            return Ok(None);
        };
        let payload = self.read(offset + HEADER_LEN as u64, len as usize)?;
        if mask_crc(crc32fast::hash(&payload)) != crc {
            return Ok(None);
        }
        Ok(Some(payload))
    }

    /// The valid records that start at or after `from` (> the bad record's offset): where the
    /// first one starts, and, for a log with sync marks, whether any is one (else the scan
    /// stops at the first). Each candidate start costs a constant-time header check; only a
    /// valid header leads to a payload checksum, and a valid record is stepped over whole.
    fn scan_after(&self, from: u64) -> Result<After> {
        let mut after = After {
            first_valid: None,
            sync_mark: false,
        };
        // The bytes read last, `[window_at, window_at + window.len())`.
        let (mut window_at, mut window) = (from, Vec::new());
        let mut pos = from;
        while self.len.saturating_sub(pos) >= HEADER_LEN as u64 {
            if pos + HEADER_LEN as u64 > window_at + window.len() as u64 {
                window_at = pos;
                window = self.read(pos, (self.len - pos).min(SCAN_WINDOW) as usize)?;
            }
            let at = (pos - window_at) as usize;
            let room = self.len - pos - HEADER_LEN as u64;
            if let Some((crc, len)) = check_header(&window[at..], self.file_number, room) {
                let (start, end) = (at + HEADER_LEN, at + HEADER_LEN + len as usize);
                let outside;
                let payload = if end <= window.len() {
                    &window[start..end]
                } else {
                    outside = self.read(pos + HEADER_LEN as u64, len as usize)?;
                    &outside[..]
                };
                if mask_crc(crc32fast::hash(payload)) == crc {
                    after.first_valid.get_or_insert(pos);
                    let Some(is_mark) = self.sync_mark else {
                        break;
                    };
                    if is_mark(payload) {
                        after.sync_mark = true;
                        break;
                    }
                    pos += (HEADER_LEN + len as usize) as u64;
                    continue;
                }
            }
            pos += 1;
        }
        Ok(after)
    }

    /// True if the bad stretch `[from, to)` holds what a page lost by a power loss leaves:
    /// zeros that end at a 4 KiB boundary and either start at `from` or run for at least
    /// [`LOST_PAGE_ZEROS`] bytes, or a record header of zeros at `from`; and no single flipped
    /// bit of the header at `from` makes its record whole (a flip can zero a byte). Reads the
    /// stretch a window at a time.
    fn looks_like_lost_pages(&self, from: u64, to: u64) -> Result<bool> {
        let zero = |bytes: &[u8]| bytes.iter().all(|&b| b == 0);
        // Zeros from `from` to a boundary count only where they broke the header: a header
        // that checks lost nothing (its first bytes were zero anyway).
        let head = self.read(from, (to - from).min(LOST_PAGE_ZEROS as u64) as usize)?;
        let header = &head[..head.len().min(HEADER_LEN)];
        let header_checks = check_header(header, self.file_number, u64::MAX).is_some();
        let mut found = head.len() >= HEADER_LEN && zero(&head[..HEADER_LEN]);
        // Windows end at page boundaries, so that the zeros before each boundary past the
        // first window's start lie in the boundary's own window.
        let mut window_at = from;
        while !found && window_at < to {
            let window_end = (window_at + SCAN_WINDOW).next_multiple_of(PAGE).min(to);
            let window = self.read(window_at, (window_end - window_at) as usize)?;
            let mut boundary = (window_at + 1).next_multiple_of(PAGE);
            while !found && boundary <= window_end {
                found = if boundary - from < LOST_PAGE_ZEROS as u64 {
                    !header_checks && zero(&head[..(boundary - from) as usize])
                } else {
                    let end = (boundary - window_at) as usize;
                    zero(&window[end - LOST_PAGE_ZEROS..end])
                };
                boundary += PAGE;
            }
            window_at = window_end;
        }
        Ok(found && !self.header_bit_flip_makes_whole(from)?)
    }

    /// True if the record at `offset` is whole but for its header checksum word, which is
    /// zero (or, where a page boundary falls inside the word, zero on one side of it and the
    /// checksum's own bytes on the other): what writeback leaves of a record written through
    /// a map when it writes the record's page after the writer stored the header's first 12
    /// bytes and before it stored that word (the writer stores the payload, then those 12
    /// bytes, then the word), and the page's newer version is then lost to a power loss while
    /// a later page reached the disk.
    /// The 12 bytes must be a header's (kind, zeros, a length that fits) and the payload must
    /// match their checksum; and no single flipped bit of the word may make the record whole
    /// instead (a word of one set bit flipped to zero is damage, as before).
    fn header_half_stored(&self, offset: u64) -> Result<bool> {
        let remaining = self.len - offset;
        if remaining < HEADER_LEN as u64 {
            return Ok(false);
        }
        let h = self.read(offset, HEADER_LEN)?;
        // The word is one store; where a page boundary falls inside it, writeback can catch
        // the page before the boundary without it and the page after with it, or the other
        // way round: each side of the boundary is zeros or the header's checksum bytes, and
        // one side at least is zeros.
        let want = header_crc(self.file_number, &h[..12]).to_le_bytes();
        let word_at = offset + 12;
        let split = ((word_at + 1).next_multiple_of(PAGE) - word_at).min(4) as usize;
        let word = &h[12..16];
        let zero = |r: std::ops::Range<usize>| word[r].iter().all(|&b| b == 0);
        let stored = |r: std::ops::Range<usize>| word[r.clone()] == want[r];
        let sides_ok = (zero(0..split) || stored(0..split)) && (zero(split..4) || stored(split..4));
        let one_zero = (split > 0 && zero(0..split)) || (split < 4 && zero(split..4));
        if !(sides_ok && one_zero) {
            return Ok(false);
        }
        // With the word it was to get, the record must be whole (a header's kind, zeros and
        // length, and a payload that matches the header's checksum).
        let mut whole = h;
        whole[12..16].copy_from_slice(&want);
        let room = remaining - HEADER_LEN as u64;
        let Some((crc, len)) = check_header(&whole, self.file_number, room) else {
            return Ok(false);
        };
        let payload = self.read(offset + HEADER_LEN as u64, len as usize)?;
        if mask_crc(crc32fast::hash(&payload)) != crc {
            return Ok(false);
        }
        Ok(!self.header_bit_flip_makes_whole(offset)?)
    }

    /// True if the record at `offset` checks once a single bit of its header is flipped,
    /// other than a bit set in zeros a crash explains. A header may cross one 512-byte sector
    /// boundary. If that boundary is a page's and the header's bytes before it are all zero,
    /// they may be the end of a page whose new version a power loss lost while the next page
    /// reached the disk (the log's synced length was the record's start, as it is for a sync
    /// mark). If the header's bytes after it are all zero, and so is everything from there
    /// to the end of that page (or of the file), they may be sectors a torn page write never
    /// wrote. A bit set in such a run rebuilds bytes the crash took, not a bit it flipped.
    fn header_bit_flip_makes_whole(&self, offset: u64) -> Result<bool> {
        let remaining = self.len - offset;
        if remaining < HEADER_LEN as u64 {
            return Ok(false);
        }
        let header = self.read(offset, HEADER_LEN)?;
        let room = remaining - HEADER_LEN as u64;
        let zero = |bytes: &[u8]| bytes.iter().all(|&b| b == 0);
        let boundary = (offset + 1).next_multiple_of(SECTOR);
        let split = (boundary - offset) as usize;
        let (lost_before, lost_after) = if split < HEADER_LEN {
            // The end of the page the bytes after the boundary are in.
            let page_end = (boundary + 1).next_multiple_of(PAGE).min(self.len);
            let after_header = offset + HEADER_LEN as u64;
            let rest = page_end.saturating_sub(after_header) as usize;
            (
                boundary.is_multiple_of(PAGE) && zero(&header[..split]),
                zero(&header[split..]) && zero(&self.read(after_header, rest)?),
            )
        } else {
            (false, false)
        };
        let lost = |byte: usize| {
            if byte < split {
                lost_before
            } else {
                lost_after
            }
        };
        for bit in 0..HEADER_LEN * 8 {
            if lost(bit / 8) {
                continue;
            }
            let mut h = header.clone();
            h[bit / 8] ^= 1 << (bit % 8);
            if let Some((crc, len)) = check_header(&h, self.file_number, room) {
                let payload = self.read(offset + HEADER_LEN as u64, len as usize)?;
                if mask_crc(crc32fast::hash(&payload)) == crc {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Whether the record at `offset`, which did not decode and has no valid record after
    /// it, is corruption or a write a crash cut short.
    fn damage_not_crash(&self, offset: u64) -> Result<Verdict> {
        let remaining = self.len - offset;
        if remaining < HEADER_LEN as u64 {
            return Ok(Verdict::Torn);
        }
        let header = self.read(offset, HEADER_LEN)?;
        let room = remaining - HEADER_LEN as u64;
        if let Some((crc, len)) = check_header(&header, self.file_number, u64::MAX) {
            let (start, len) = (offset + HEADER_LEN as u64, u64::from(len));
            // A payload reaching past the end (or checking after all) is a write cut short,
            // and so is one whose last sectors were never written.
            if len > room
                || mask_crc(crc32fast::hash(&self.read(start, len as usize)?)) == crc
                || self.last_sectors_unwritten(start, len)?
            {
                return Ok(Verdict::Torn);
            }
            // A page in its middle lost while its last one was written (its fsync never
            // returned: a large manifest edit, or a WAL batch). In a WAL that is a lost-page
            // cut, which recovery reads as the end of the history (unless a later sync mark
            // proves a later fsync returned).
            if self.looks_like_lost_pages(offset, start + len)? {
                return Ok(if self.sync_mark.is_some() {
                    Verdict::LostPages
                } else {
                    Verdict::Torn
                });
            }
            return Ok(Verdict::Corrupt(
                "complete record fails its payload checksum",
            ));
        }
        if self.header_bit_flip_makes_whole(offset)? {
            return Ok(Verdict::Corrupt(
                "a single flipped bit in the record header",
            ));
        }
        Ok(Verdict::Torn)
    }

    /// True if the bytes `[start, start + len)` are zero from the start of the 512-byte sector
    /// holding their last byte (or from `start`, if that sector starts before it) to their
    /// end, and the bytes after them are zero up to the end of that page (or of the file):
    /// what a page write that reached the disk as a prefix of its sectors, or not at all,
    /// leaves of the last record (a file extended by a crash before its pages were written,
    /// or a log allocated ahead, reads as zeros there).
    fn last_sectors_unwritten(&self, start: u64, len: u64) -> Result<bool> {
        if len == 0 {
            return Ok(false);
        }
        let end = start + len;
        let boundary = ((end - 1) & !(SECTOR - 1)).max(start);
        let page_end = end.next_multiple_of(PAGE).min(self.len);
        let tail = self.read(boundary, (page_end - boundary) as usize)?;
        Ok(tail.iter().all(|&b| b == 0))
    }

    /// True if every byte from `from` to the end of the file is zero.
    fn zero_to_end(&self, from: u64) -> Result<bool> {
        let mut at = from;
        while at < self.len {
            let n = SCAN_WINDOW.min(self.len - at);
            if self.read(at, n as usize)?.iter().any(|&b| b != 0) {
                return Ok(false);
            }
            at += n;
        }
        Ok(true)
    }

    /// The next record; `Ok(None)` at the end (after which [`tail`](Self::tail) says whether a
    /// torn tail was cut); `Err(Corruption)` for damage that a crash cannot explain.
    pub(crate) fn next(&mut self) -> Result<Option<Record>> {
        match self.next_record() {
            Err(Error::Io(e)) if self.live && e.kind() == io::ErrorKind::UnexpectedEof => {
                // A live log cut back to its records while it was read: it ends here.
                self.done = true;
                Ok(None)
            }
            res => res,
        }
    }

    /// The record at `offset`, decoded: the reader moves past it.
    fn accept(&mut self, offset: u64, payload: Vec<u8>) -> Record {
        self.pos = offset + (HEADER_LEN + payload.len()) as u64;
        Record { offset, payload }
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        if self.done || self.pos >= self.len {
            self.done = true;
            return Ok(None);
        }
        let offset = self.pos;
        if let Some(payload) = self.try_record(offset)? {
            return Ok(Some(self.accept(offset, payload)));
        }
        self.done = true;
        // Zeros from a record boundary to the end are space allocated ahead of the writer (a
        // log written through a map, cut short by a crash): the log ends here, nothing is torn.
        if self.zero_to_end(offset)? {
            return Ok(None);
        }
        // Where a following record could start: after this one if its header is intact (its
        // own payload is user data and may hold anything), else anywhere after its start.
        let remaining = self.len - offset;
        let header = self.read(offset, (HEADER_LEN as u64).min(remaining) as usize)?;
        let next_start = match check_header(&header, self.file_number, u64::MAX) {
            Some((_, len)) => offset + HEADER_LEN as u64 + u64::from(len),
            None => offset + 1,
        };
        let after = self.scan_after(next_start)?;
        let lost_pages = if let Some(first_valid) = after.first_valid {
            if self.live {
                // Perhaps a record still being written, its header not stored yet.
                for _ in 0..LIVE_RETRIES {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    if let Some(payload) = self.try_record(offset)? {
                        self.done = false;
                        return Ok(Some(self.accept(offset, payload)));
                    }
                }
            }
            let cut = self.sync_mark.is_some()
                && !after.sync_mark
                && (self.looks_like_lost_pages(offset, first_valid)?
                    || self.header_half_stored(offset)?);
            if !cut {
                return Err(Error::corruption(
                    &self.path,
                    offset,
                    "record fails its checksum or framing, and valid records follow it",
                ));
            }
            true
        } else {
            match self.damage_not_crash(offset)? {
                Verdict::Corrupt(why) => return Err(Error::corruption(&self.path, offset, why)),
                Verdict::Torn => false,
                Verdict::LostPages => true,
            }
        };
        self.tail = TailReport {
            torn_at: Some(offset),
            dropped_bytes: self.len - offset,
            lost_pages,
        };
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, MemFs};

    fn log_with(records: &[&[u8]]) -> (MemFs, PathBuf, Vec<u8>) {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let p = PathBuf::from("/d/log");
        let mut w = RecordWriter::new(fs.create(&p).unwrap());
        for r in records {
            w.append_framed(&frame(r, 7).unwrap()).unwrap();
        }
        let bytes = fs.read_file(&p).unwrap();
        (fs, p, bytes)
    }

    fn read_all(fs: &MemFs, p: &Path) -> Result<(Vec<Vec<u8>>, TailReport)> {
        let mut r = RecordReader::new(fs.open(p).unwrap(), p, 7);
        let mut out = Vec::new();
        while let Some(rec) = r.next()? {
            out.push(rec.payload);
        }
        Ok((out, r.tail()))
    }

    /// A reader of a log whose sync marks are its empty records.
    fn read_with_marks(fs: &MemFs, p: &Path) -> Result<(Vec<Vec<u8>>, TailReport)> {
        let mut r =
            RecordReader::new(fs.open(p).unwrap(), p, 7).lost_pages_after_sync(|p| p.is_empty());
        let mut out = Vec::new();
        while let Some(rec) = r.next()? {
            out.push(rec.payload);
        }
        Ok((out, r.tail()))
    }

    /// `n` records of 200 bytes (216 framed: 18 fit before the first page boundary), an
    /// empty one (a sync mark) where `mark_at` says, with `damage` applied to the bytes.
    fn damaged_log(n: u8, mark_at: Option<usize>, damage: impl Fn(&mut [u8])) -> (MemFs, PathBuf) {
        let payloads: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                if Some(i as usize) == mark_at {
                    Vec::new()
                } else {
                    vec![i | 1; 200]
                }
            })
            .collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        let (fs, p, mut bytes) = log_with(&refs);
        damage(&mut bytes);
        fs.write_file(&p, &bytes).unwrap();
        (fs, p)
    }

    /// 60 records of 200 bytes, sync marks where `mark_at` says, and page 1 zeroed.
    fn log_losing_page_1(mark_at: Option<usize>) -> (MemFs, PathBuf) {
        damaged_log(60, mark_at, |b| b[4096..8192].fill(0))
    }

    /// The header checksum is format (`docs/format.md` section 2): the CRC of the file
    /// number's 8 little-endian bytes followed by the header's first 12, masked. Computed in
    /// one pass since session 26; it must equal the two-part computation that wrote every
    /// older file.
    #[test]
    fn header_crc_is_the_crc_of_the_file_number_then_the_first_twelve_bytes() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..1000 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let file_number = rng >> (rng % 64);
            let first12: Vec<u8> = (0..12).map(|i| (rng >> (i * 5)) as u8).collect();
            let mut h = crc32fast::Hasher::new();
            h.update(&file_number.to_le_bytes());
            h.update(&first12);
            assert_eq!(header_crc(file_number, &first12), mask_crc(h.finalize()));
        }
    }

    #[test]
    fn a_payload_over_the_readers_limit_is_refused_not_framed() {
        // `vec!` of zeros is calloc'd: the pages are never touched, the check comes first.
        let over = vec![0u8; MAX_PAYLOAD + 1];
        assert!(matches!(frame(&over, 7), Err(Error::InvalidArgument(_))));
        assert!(check_header(&frame(b"x", 7).unwrap(), 7, 1).is_some());
    }

    #[test]
    fn a_framed_header_is_the_one_docs_format_md_specifies() {
        // docs/format.md: payload_crc = mask(crc32(payload)), then len, kind 1, three zero
        // bytes, header_crc = mask(crc32(file_number u64 LE ++ record[0..12])), computed
        // here by streaming the parts through a hasher.
        for (payload, file_number) in [
            (&b""[..], 0u64),
            (&b"x"[..], 7),
            (&b"a longer payload than twenty bytes"[..], u64::MAX),
        ] {
            let framed = frame(payload, file_number).unwrap();
            let crc = mask_crc(crc32fast::hash(payload));
            let mut first12 = crc.to_le_bytes().to_vec();
            first12.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            first12.extend_from_slice(&[KIND_FULL, 0, 0, 0]);
            let mut h = crc32fast::Hasher::new();
            h.update(&file_number.to_le_bytes());
            h.update(&first12);
            assert_eq!(framed[..12], first12[..]);
            assert_eq!(framed[12..16], mask_crc(h.finalize()).to_le_bytes());
            assert_eq!(&framed[HEADER_LEN..], payload);
        }
        // A known answer, worked out apart from this code (Python's `zlib.crc32` and the mask
        // as the format states it): a change of CRC, mask or layout shows here.
        assert_eq!(
            frame(b"x", 7).unwrap()[..HEADER_LEN],
            [144, 4, 138, 207, 1, 0, 0, 0, 1, 0, 0, 0, 137, 140, 216, 158]
        );
    }

    #[test]
    fn a_lost_page_with_records_after_it_is_cut_unless_a_sync_mark_follows() {
        // Without sync marks (a manifest), a bad record followed by good ones is corruption.
        let (fs, p) = log_losing_page_1(None);
        assert!(matches!(
            read_all(&fs, &p),
            Err(Error::Corruption { offset: 3888, .. })
        ));
        // In a log with sync marks, the lost page cuts the log where it starts to show.
        let (recs, tail) = read_with_marks(&fs, &p).unwrap();
        assert_eq!(recs.len(), 18);
        assert_eq!(tail.torn_at, Some(18 * 216));
        assert_eq!(tail.dropped_bytes, 60 * 216 - 18 * 216);
        assert!(tail.lost_pages);
        // A sync mark before the lost page changes nothing (it is 200 bytes shorter than the
        // record it replaces, so one more record fits before the page).
        let (fs, p) = log_losing_page_1(Some(5));
        let (recs, tail) = read_with_marks(&fs, &p).unwrap();
        assert_eq!((recs.len(), tail.lost_pages), (19, true));
        // A sync mark after it: the fsync before that mark wrote the page, so it is damage.
        let (fs, p) = log_losing_page_1(Some(50));
        assert!(matches!(
            read_with_marks(&fs, &p),
            Err(Error::Corruption { offset: 3888, .. })
        ));
    }

    /// 40 records of 200 bytes, with empty ones (sync marks) where `mark_at` says, record 10's
    /// header checksum word zeroed (as writeback leaves a header half-stored), and `damage`
    /// applied to the bytes.
    fn log_with_half_stored_header(
        mark_at: Option<usize>,
        damage: fn(&mut [u8]),
    ) -> (MemFs, PathBuf) {
        damaged_log(40, mark_at, |b| {
            b[10 * 216 + 12..10 * 216 + 16].fill(0);
            damage(b);
        })
    }

    #[test]
    fn a_header_half_stored_by_writeback_is_cut_unless_a_sync_mark_follows() {
        let at = 10 * 216;
        // In a WAL (sync marks), the history ends at the half-stored record: the writes after
        // it were never synced.
        let (fs, p) = log_with_half_stored_header(None, |_| {});
        let (recs, tail) = read_with_marks(&fs, &p).unwrap();
        assert_eq!(
            (recs.len(), tail.torn_at, tail.lost_pages),
            (10, Some(at as u64), true)
        );
        assert_eq!(tail.dropped_bytes, 30 * 216);
        // A manifest is never written through a map: there it is damage.
        assert!(matches!(
            read_all(&fs, &p),
            Err(Error::Corruption { offset, .. }) if offset == at as u64
        ));
        // A sync mark after it: the fsync before that mark wrote the whole header.
        let (fs, p) = log_with_half_stored_header(Some(30), |_| {});
        assert!(matches!(
            read_with_marks(&fs, &p),
            Err(Error::Corruption { offset, .. }) if offset == at as u64
        ));
        // The payload was stored before the header: one that fails the header's checksum is
        // damage, and so is a header whose other bytes are not a header's.
        for damage in [
            (|b: &mut [u8]| b[10 * 216 + 100] ^= 0x10) as fn(&mut [u8]),
            |b| b[10 * 216 + 9] = 1,
            |b| b[10 * 216 + 8] = 2,
            |b| b[10 * 216 + 4..10 * 216 + 8].copy_from_slice(&201u32.to_le_bytes()),
        ] {
            let (fs, p) = log_with_half_stored_header(None, damage);
            assert!(matches!(
                read_with_marks(&fs, &p),
                Err(Error::Corruption { offset, .. }) if offset == at as u64
            ));
        }
        // The last record half-stored, nothing after it: a torn tail, as before.
        let (fs, p, mut bytes) = log_with(&[&[1u8; 200][..], &[3u8; 200][..]]);
        bytes[216 + 12..216 + 16].fill(0);
        fs.write_file(&p, &bytes).unwrap();
        let (recs, tail) = read_with_marks(&fs, &p).unwrap();
        assert_eq!(
            (recs.len(), tail.torn_at, tail.lost_pages),
            (1, Some(216), false)
        );
    }

    /// Where a page boundary falls inside the checksum word, writeback can catch one side
    /// of the word's store and not the other: a side of zeros with the checksum's own bytes
    /// on the other side is the same half-stored header. Anything else there is damage.
    #[test]
    fn a_header_checksum_word_half_stored_across_a_page_boundary_is_cut() {
        // Record 0 of 178 bytes, then records of 200: record 19's header starts at 4082, its
        // checksum word at 4094, two bytes before the first page boundary.
        let mut payloads = vec![vec![9u8; 178]];
        payloads.extend((1..40u8).map(|i| vec![i | 1; 200]));
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        let (fs, p, good) = log_with(&refs);
        assert_eq!(
            check_header(&good[4082..], 7, u64::MAX).map(|h| h.1),
            Some(200)
        );
        for (zeroed, damaged, whole) in [
            (4094..4096, None, true),
            (4096..4098, None, true),
            (4094..4096, Some(4096), false),
            (4096..4098, Some(4094), false),
        ] {
            let mut bytes = good.clone();
            bytes[zeroed.clone()].fill(0);
            if let Some(at) = damaged {
                bytes[at] ^= 0x5a;
            }
            fs.write_file(&p, &bytes).unwrap();
            let read = read_with_marks(&fs, &p);
            if whole {
                let (recs, tail) = read.unwrap();
                assert_eq!(
                    (recs.len(), tail.torn_at, tail.lost_pages),
                    (19, Some(4082), true),
                    "{zeroed:?}"
                );
            } else {
                assert!(
                    matches!(read, Err(Error::Corruption { offset: 4082, .. })),
                    "{zeroed:?} {damaged:?}"
                );
            }
        }
    }

    #[test]
    fn a_lost_page_under_the_first_bytes_of_a_header_is_cut() {
        // Record 0 of 184 bytes, then records of 200: record 19 starts 8 bytes before the
        // first page boundary. The bytes synced end there, and the page's last 8 bytes (the
        // start of record 19's header) were lost while the next page was written.
        let mut payloads = vec![vec![9u8; 184]];
        payloads.extend((1..40u8).map(|i| vec![i | 1; 200]));
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        let (fs, p, mut bytes) = log_with(&refs);
        bytes[4088..4096].fill(0);
        fs.write_file(&p, &bytes).unwrap();
        let (recs, tail) = read_with_marks(&fs, &p).unwrap();
        assert_eq!(
            (recs.len(), tail.torn_at, tail.lost_pages),
            (19, Some(4088), true)
        );
        assert!(matches!(
            read_all(&fs, &p),
            Err(Error::Corruption { offset: 4088, .. })
        ));
    }

    #[test]
    fn zeros_an_intact_header_starts_with_are_no_lost_page() {
        // A record whose payload checksum starts with a zero byte, its header placed one byte
        // before the first page boundary, and a flipped bit in its payload, with records
        // after it: the zero before the boundary lost nothing (the header checks), so this
        // is a flipped bit, corruption.
        let odd = (0u32..)
            .map(|i| {
                let mut p = vec![3u8; 200];
                p[..4].copy_from_slice(&i.to_le_bytes());
                p
            })
            .find(|p| frame(p, 7).unwrap()[0] == 0)
            .unwrap();
        let first = vec![1u8; 4095 - 3 * 216 - HEADER_LEN];
        let mut payloads = vec![first, vec![2; 200], vec![2; 200], vec![2; 200], odd];
        payloads.extend((0..10).map(|_| vec![4u8; 200]));
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        let (fs, p, mut bytes) = log_with(&refs);
        assert_eq!(bytes[4095], 0, "the record starts at 4095 with a zero byte");
        bytes[4095 + HEADER_LEN + 100] ^= 0x04;
        fs.write_file(&p, &bytes).unwrap();
        assert!(matches!(
            read_with_marks(&fs, &p),
            Err(Error::Corruption { offset: 4095, .. })
        ));
    }

    #[test]
    fn a_last_record_with_a_lost_middle_page_is_torn() {
        let big = vec![5u8; 10_000];
        let (fs, p, mut bytes) = log_with(&[b"first", &big]);
        bytes[4096..8192].fill(0);
        fs.write_file(&p, &bytes).unwrap();
        let (recs, tail) = read_with_marks(&fs, &p).unwrap();
        assert_eq!(recs, vec![b"first".to_vec()]);
        assert_eq!(tail.torn_at, Some((HEADER_LEN + 5) as u64));
        // Recovery accepts this only in the last WAL holding records.
        assert!(tail.lost_pages);
        // In a log without sync marks (a manifest, synced after every edit), the last record
        // is the one whose fsync never returned: a torn tail too.
        let (recs, tail) = read_all(&fs, &p).unwrap();
        assert_eq!(recs, vec![b"first".to_vec()]);
        assert_eq!(
            (tail.torn_at, tail.lost_pages),
            (Some((HEADER_LEN + 5) as u64), false)
        );
        // With a record after it, the lost page is corruption in a manifest, as before.
        let (fs, p, mut bytes) = log_with(&[b"first", &big, b"last"]);
        bytes[4096..8192].fill(0);
        fs.write_file(&p, &bytes).unwrap();
        assert!(matches!(read_all(&fs, &p), Err(Error::Corruption { .. })));
    }

    #[test]
    fn every_single_bit_flip_in_a_header_is_corruption_in_a_log_with_sync_marks() {
        let payloads: Vec<Vec<u8>> = (0..30u8).map(|i| vec![i | 1; 200]).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        let (fs, p, clean) = log_with(&refs);
        for record in [0, 18, 29] {
            for bit in 0..HEADER_LEN * 8 {
                let mut bytes = clean.clone();
                bytes[record * 216 + bit / 8] ^= 1 << (bit % 8);
                fs.write_file(&p, &bytes).unwrap();
                assert!(
                    matches!(read_with_marks(&fs, &p), Err(Error::Corruption { .. })),
                    "record {record} bit {bit}"
                );
            }
        }
    }

    /// A record whose header's first byte has exactly one bit set, and 200 bytes of payload.
    fn record_with_one_bit_first_byte() -> Vec<u8> {
        (0u32..)
            .map(|i| {
                let mut p = vec![5u8; 200];
                p[..4].copy_from_slice(&i.to_le_bytes());
                p
            })
            .find(|p| frame(p, 7).unwrap()[0].count_ones() == 1)
            .unwrap()
    }

    #[test]
    fn a_lost_header_prefix_of_one_set_bit_is_a_lost_page_not_a_flipped_bit() {
        // The log was synced at 4095, where the next record starts (a sync mark does): a
        // power loss keeps page 1 and loses page 0's new version, whose byte 4095, the
        // header's first, reads as the zero of the synced version. That byte had one bit
        // set, so setting it makes the record whole: once read as a flipped bit (corruption,
        // the open failed), it is a lost page.
        let first = vec![9u8; 4095 - HEADER_LEN];
        let second = record_with_one_bit_first_byte();
        for later in [0, 30] {
            let mut payloads = vec![first.clone(), second.clone()];
            payloads.extend((0..later).map(|i| vec![i as u8 | 1; 200]));
            let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
            let (fs, p, mut bytes) = log_with(&refs);
            bytes[4095] = 0;
            fs.write_file(&p, &bytes).unwrap();
            let (recs, tail) = read_with_marks(&fs, &p).unwrap();
            assert_eq!(
                (recs, tail.torn_at),
                (vec![first.clone()], Some(4095)),
                "{later}"
            );
            assert_eq!(tail.lost_pages, later > 0);
        }
        // The same zero where no page starts inside the header is a flipped bit: at 4000
        // (no boundary in the header) and at 3583 (a sector's, inside a page, which a crash
        // writes as a prefix of its sectors: never a hole before a written sector).
        for at in [4000, 3583] {
            let first = vec![9u8; at - HEADER_LEN];
            let (fs, p, mut bytes) = log_with(&[&first, &second]);
            bytes[at] = 0;
            fs.write_file(&p, &bytes).unwrap();
            assert!(
                matches!(read_with_marks(&fs, &p), Err(Error::Corruption { .. })),
                "{at}"
            );
        }
    }

    #[test]
    fn a_flipped_bit_in_a_header_after_a_sector_boundary_is_corruption_unless_the_page_rest_is_zero(
    ) {
        // The last record starts 15 bytes before the sector boundary at 3584, so its last
        // header byte (hcrc's top byte) lies after it; that byte has one bit set, and reads
        // as zero. With a payload behind it, no torn page write leaves that (unwritten
        // sectors run to the end of the page): corruption. With nothing but zeros from the
        // boundary to the end of the page (a payload of zeros), it is a torn write.
        let start = 3584 - 15;
        let first = vec![9u8; start - HEADER_LEN];
        let one_bit_top = |p: &Vec<u8>| frame(p, 7).unwrap()[HEADER_LEN - 1].count_ones() == 1;
        let written = (0u32..)
            .map(|i| {
                let mut p = vec![7u8; 100];
                p[..4].copy_from_slice(&i.to_le_bytes());
                p
            })
            .find(one_bit_top)
            .unwrap();
        let zeros = (1..).map(|n| vec![0u8; n]).find(one_bit_top).unwrap();
        for (payload, torn) in [(written, false), (zeros, true)] {
            let (fs, p, mut bytes) = log_with(&[&first, &payload]);
            bytes[start + HEADER_LEN - 1] = 0;
            fs.write_file(&p, &bytes).unwrap();
            let read = read_with_marks(&fs, &p);
            if torn {
                let (recs, tail) = read.unwrap();
                assert_eq!(
                    (recs, tail.torn_at),
                    (vec![first.clone()], Some(start as u64))
                );
            } else {
                assert!(matches!(read, Err(Error::Corruption { .. })), "{read:?}");
            }
        }
    }

    #[test]
    fn damage_no_lost_page_leaves_is_corruption_in_a_log_with_sync_marks() {
        let payloads: Vec<Vec<u8>> = (0..60u8).map(|i| vec![i | 1; 200]).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        let (fs, p, clean) = log_with(&refs);
        let record_20 = 20 * 216;
        // One flipped bit in a payload, one in a header, 16 zeros mid-payload, 31 zeros up to a
        // page boundary: none is what a lost page leaves.
        let flip = |at: usize, mask: u8| {
            let mut b = clean.clone();
            b[at] ^= mask;
            b
        };
        let zero = |at: usize, n: usize| {
            let mut b = clean.clone();
            b[at..at + n].fill(0);
            b
        };
        for bytes in [
            flip(record_20 + 100, 0x80),
            flip(record_20 + 5, 0x01),
            zero(record_20 + 50, 16),
            zero(8192 - 31, 31),
        ] {
            fs.write_file(&p, &bytes).unwrap();
            assert!(matches!(
                read_with_marks(&fs, &p),
                Err(Error::Corruption { .. })
            ));
        }
        // A header of zeros is what a lost page leaves (records after it, no mark).
        let mut bytes = clean.clone();
        bytes[record_20..record_20 + HEADER_LEN].fill(0);
        fs.write_file(&p, &bytes).unwrap();
        let (recs, tail) = read_with_marks(&fs, &p).unwrap();
        assert_eq!((recs.len(), tail.torn_at), (20, Some(record_20 as u64)));
    }

    #[test]
    fn roundtrip() {
        let (fs, p, _) = log_with(&[b"one", b"", b"three"]);
        let (recs, tail) = read_all(&fs, &p).unwrap();
        assert_eq!(recs, vec![b"one".to_vec(), b"".to_vec(), b"three".to_vec()]);
        assert_eq!(tail, TailReport::default());
    }

    #[test]
    fn truncated_last_record_is_a_torn_tail() {
        let (fs, p, bytes) = log_with(&[b"one", b"two-two"]);
        for cut in 1..(HEADER_LEN + 7) {
            fs.write_file(&p, &bytes[..bytes.len() - cut]).unwrap();
            let (recs, tail) = read_all(&fs, &p).unwrap();
            assert_eq!(recs, vec![b"one".to_vec()], "cut {cut}");
            assert_eq!(tail.torn_at, Some((HEADER_LEN + 3) as u64));
            assert_eq!(tail.dropped_bytes, (HEADER_LEN + 7 - cut) as u64);
        }
    }

    #[test]
    fn records_of_another_log_or_inside_values_never_validate() {
        // A record framed for log 8 stored as the payload of a record of log 7.
        let foreign = frame(b"hidden", 8).unwrap();
        let (fs, p, bytes) = log_with(&[b"one", &foreign]);
        let (recs, _) = read_all(&fs, &p).unwrap();
        assert_eq!(recs.len(), 2);
        // Tear the outer record: the inner one must not make it look like corruption.
        fs.write_file(&p, &bytes[..bytes.len() - 1]).unwrap();
        let (recs, tail) = read_all(&fs, &p).unwrap();
        assert_eq!(recs.len(), 1);
        assert!(tail.torn_at.is_some());
        // Even a record framed for this same log number, if stored inside a value, is only
        // found by the scan when the outer record is damaged; a plain read never sees it.
        let mut r = RecordReader::new(fs.open(&p).unwrap(), &p, 8);
        assert!(
            r.next().unwrap().is_none(),
            "wrong log number: nothing validates"
        );
    }

    #[test]
    fn a_torn_run_of_ones_is_scanned_reading_each_byte_a_few_times_at_most() {
        // Bytes of 0x01 parse as kind 1 with a huge length at every offset; the header
        // checksum rejects each candidate without reading its payload, so the scan reads the
        // run about once, not once per candidate (4 Mi candidates of up to 4 MiB each).
        let (fs, p, mut bytes) = log_with(&[b"one"]);
        bytes.extend_from_slice(&vec![1u8; 4 << 20]);
        fs.write_file(&p, &bytes).unwrap();
        let file = Arc::new(LargestRead {
            inner: fs.open(&p).unwrap(),
            largest: Default::default(),
            total: Default::default(),
        });
        let mut r = RecordReader::new(file.clone(), &p, 7);
        let mut recs = 0;
        while r.next().unwrap().is_some() {
            recs += 1;
        }
        assert_eq!(recs, 1);
        assert_eq!(r.tail().dropped_bytes, 4 << 20);
        let total = file.total.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            total <= 3 * bytes.len() as u64,
            "{total} bytes read of a {}-byte file",
            bytes.len()
        );
    }

    /// A file that remembers the largest single read made of it, and the bytes read in all.
    #[derive(Debug)]
    struct LargestRead {
        inner: Arc<dyn RandomAccessFile>,
        largest: std::sync::atomic::AtomicUsize,
        total: std::sync::atomic::AtomicU64,
    }

    impl RandomAccessFile for LargestRead {
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.largest
                .fetch_max(buf.len(), std::sync::atomic::Ordering::Relaxed);
            self.total
                .fetch_add(buf.len() as u64, std::sync::atomic::Ordering::Relaxed);
            self.inner.read_exact_at(buf, offset)
        }
        fn len(&self) -> u64 {
            self.inner.len()
        }
    }

    #[test]
    fn scans_past_a_bad_record_read_a_window_at_a_time() {
        // A run of ones after the first record (every offset a candidate header), then 32
        // zeros up to a page boundary and valid records: with sync marks the bad stretch is
        // a lost page, cut; every read the scans make stays within a window.
        let (fs, p, mut bytes) = log_with(&[b"one"]);
        let garbage_end = 60 * PAGE as usize;
        bytes.resize(garbage_end - LOST_PAGE_ZEROS, 1);
        bytes.resize(garbage_end, 0);
        let records_at = bytes.len() as u64;
        for i in 0..20u8 {
            bytes.extend_from_slice(&frame(&[i; 150], 7).unwrap());
        }
        fs.write_file(&p, &bytes).unwrap();
        for marks in [false, true] {
            let file = Arc::new(LargestRead {
                inner: fs.open(&p).unwrap(),
                largest: Default::default(),
                total: Default::default(),
            });
            let mut r = RecordReader::new(file.clone(), &p, 7);
            if marks {
                r = r.lost_pages_after_sync(|p| p.is_empty());
            }
            assert_eq!(r.next().unwrap().unwrap().payload, b"one");
            if marks {
                assert!(r.next().unwrap().is_none());
                assert!(r.tail().lost_pages);
                assert_eq!(r.tail().dropped_bytes, bytes.len() as u64 - 19);
            } else {
                let e = r.next().unwrap_err();
                assert!(e.is_corruption(), "{e:?}");
            }
            let largest = file.largest.load(std::sync::atomic::Ordering::Relaxed);
            assert!(
                largest as u64 <= SCAN_WINDOW + PAGE,
                "a read of {largest} bytes"
            );
            assert!(records_at > 50 * SCAN_WINDOW);
        }
    }

    /// A log on the real file system: `one`, then `two` with its header not stored yet (as a
    /// writer through a map leaves it mid-append), then `three`, then zeros. Returns the path
    /// (in `dir`), the bytes of `two`'s header and its offset.
    fn live_log(dir: &Path) -> (PathBuf, Vec<u8>, u64) {
        let p = dir.join("000007.wal");
        let mut bytes = frame(b"one", 7).unwrap();
        let at = bytes.len();
        let two = frame(b"two", 7).unwrap();
        bytes.extend_from_slice(&[0u8; HEADER_LEN]);
        bytes.extend_from_slice(&two[HEADER_LEN..]);
        bytes.extend_from_slice(&frame(b"three", 7).unwrap());
        bytes.extend_from_slice(&[0u8; 4096]);
        std::fs::write(&p, &bytes).unwrap();
        (p, two[..HEADER_LEN].to_vec(), at as u64)
    }

    fn read_os(p: &Path, live: bool) -> Result<Vec<Vec<u8>>> {
        let mut r = RecordReader::new(crate::fs::OsFs.open(p).unwrap(), p, 7);
        if live {
            r = r.live();
        }
        let mut out = Vec::new();
        while let Some(rec) = r.next()? {
            out.push(rec.payload);
        }
        Ok(out)
    }

    #[test]
    fn a_live_log_reads_a_record_again_until_its_header_is_stored() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let (p, header, at) = live_log(dir.path());
        // Not live: a bad record with valid ones after it is corruption.
        assert!(matches!(read_os(&p, false), Err(Error::Corruption { .. })));
        // Live, and the header never comes: corruption too, after the retries.
        assert!(matches!(read_os(&p, true), Err(Error::Corruption { .. })));
        // Live, and the writer stores the header a moment later: every record is read.
        let writer = {
            let p = p.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(3));
                let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.write_all_at(&header, at).unwrap();
            })
        };
        let recs = read_os(&p, true).unwrap();
        writer.join().unwrap();
        assert_eq!(
            recs,
            vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
        );
    }

    #[test]
    fn a_live_log_cut_back_while_it_is_read_ends_there() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("000007.wal");
        let mut bytes = frame(b"one", 7).unwrap();
        bytes.extend_from_slice(&frame(b"two", 7).unwrap());
        let records = bytes.len() as u64;
        bytes.extend_from_slice(&[0u8; 8192]);
        std::fs::write(&p, &bytes).unwrap();
        let open = |live: bool| {
            let r = RecordReader::new(crate::fs::OsFs.open(&p).unwrap(), &p, 7);
            if live {
                r.live()
            } else {
                r
            }
        };
        let (mut live, mut not_live) = (open(true), open(false));
        // The writer seals the log: it is cut back to its records after both opened it.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(records)
            .unwrap();
        for r in [&mut live, &mut not_live] {
            assert_eq!(r.next().unwrap().unwrap().payload, b"one");
            assert_eq!(r.next().unwrap().unwrap().payload, b"two");
        }
        // Past the cut: the live reader's log ends; the other reads past its file's end.
        assert!(live.next().unwrap().is_none());
        assert_eq!(live.tail(), TailReport::default());
        assert!(matches!(not_live.next(), Err(Error::Io(_))));
    }

    #[test]
    fn zeros_after_the_last_record_end_the_log_without_a_torn_tail() {
        // Space allocated ahead of a mapped log's writer, left by a crash.
        let (fs, p, mut bytes) = log_with(&[b"one"]);
        bytes.extend_from_slice(&[0u8; 100]);
        fs.write_file(&p, &bytes).unwrap();
        let (recs, tail) = read_all(&fs, &p).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(tail, TailReport::default());
    }

    #[test]
    fn a_payload_copied_without_its_header_is_a_torn_tail() {
        // A mapped log stores the header last: a process killed in the copy leaves the payload
        // (or part of it) after a zero header, and zeros after that.
        let (fs, p, mut bytes) = log_with(&[b"one"]);
        let start = bytes.len();
        let full = frame(b"a payload the crash cut off", 7).unwrap();
        bytes.extend_from_slice(&[0u8; HEADER_LEN]);
        bytes.extend_from_slice(&full[HEADER_LEN..HEADER_LEN + 10]);
        bytes.extend_from_slice(&[0u8; 4096]);
        fs.write_file(&p, &bytes).unwrap();
        let (recs, tail) = read_all(&fs, &p).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(tail.torn_at, Some(start as u64));
        assert_eq!(tail.dropped_bytes, (bytes.len() - start) as u64);
        // The header's first 12 bytes copied too, its checksum not yet: still torn.
        bytes[start..start + 12].copy_from_slice(&full[..12]);
        fs.write_file(&p, &bytes).unwrap();
        let (recs, tail) = read_all(&fs, &p).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(tail.torn_at, Some(start as u64));
    }

    #[test]
    fn bad_record_followed_by_good_one_is_corruption() {
        let (fs, p, mut bytes) = log_with(&[b"one", b"two", b"three"]);
        let second = HEADER_LEN + 3;
        bytes[second + HEADER_LEN] ^= 0x01; // flip a payload bit of "two"
        fs.write_file(&p, &bytes).unwrap();
        match read_all(&fs, &p) {
            Err(Error::Corruption { offset, file, .. }) => {
                assert_eq!(offset, second as u64);
                assert_eq!(file, p);
            }
            other => panic!("expected corruption, got {other:?}"),
        }
        // A flipped length bit too.
        let (fs, p, mut bytes) = log_with(&[b"one", b"two", b"three"]);
        bytes[second + 4] ^= 0x40;
        fs.write_file(&p, &bytes).unwrap();
        assert!(read_all(&fs, &p).unwrap_err().is_corruption());
    }

    #[test]
    fn every_single_bit_flip_is_corruption_even_in_the_last_record() {
        let (fs, p, bytes) = log_with(&[b"alpha", b"beta", b"gamma"]);
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            fs.write_file(&p, &b).unwrap();
            match read_all(&fs, &p) {
                Err(e) => assert!(e.is_corruption()),
                Ok(r) => panic!("bit {bit} not detected: {r:?}"),
            }
        }
    }

    #[test]
    fn zero_filled_last_page_ending_on_a_page_boundary_is_torn() {
        // The record's payload ends exactly at file offset 8192.
        let first = vec![1u8; 1000 - HEADER_LEN];
        let second_len = 8192 - 1000 - HEADER_LEN;
        let (fs, p, mut bytes) = log_with(&[&first, &vec![9u8; second_len]]);
        assert_eq!(bytes.len(), 8192);
        for b in &mut bytes[4096..] {
            *b = 0;
        }
        fs.write_file(&p, &bytes).unwrap();
        let (recs, tail) = read_all(&fs, &p).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(tail.torn_at, Some(1000));
    }

    #[test]
    fn a_frame_inside_a_cut_records_payload_is_not_a_following_record() {
        // A value that holds a valid frame for this very log, in a record cut short.
        let inner = frame(b"inside a value", 7).unwrap();
        let mut payload = vec![0xabu8; 100];
        payload.extend_from_slice(&inner);
        payload.extend_from_slice(&[0xcd; 100]);
        let (fs, p, bytes) = log_with(&[b"one", &payload]);
        fs.write_file(&p, &bytes[..bytes.len() - 50]).unwrap();
        let (recs, tail) = read_all(&fs, &p).unwrap();
        assert_eq!(
            recs.len(),
            1,
            "the cut record is a torn tail, not corruption"
        );
        assert!(tail.torn_at.is_some());
    }

    #[test]
    fn a_last_page_written_as_a_prefix_of_its_sectors_is_torn() {
        // A mapped log allocated ahead (zeros past the records): the last record's header
        // reached the disk, and of the page holding its end only the first sector did
        // (512-byte sectors, no power-loss protection). Its payload is zero from a sector
        // boundary that is no page boundary, and so is the rest of the page.
        let payload = vec![7u8; 6000];
        let (fs, p, mut bytes) = log_with(&[b"one", &payload]);
        let second = HEADER_LEN + 3;
        let end = bytes.len();
        assert!(
            end % 4096 > 512,
            "the record ends past the page's first sector"
        );
        bytes.resize(1 << 16, 0);
        let torn = (end & !4095) + 512;
        bytes[torn..end].fill(0);
        fs.write_file(&p, &bytes).unwrap();
        let (recs, tail) = read_all(&fs, &p).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(tail.torn_at, Some(second as u64));
        // The same zeros with a byte after the record in that page written: the page reached
        // the disk, so its zeros are the value's own and the failed checksum is damage.
        bytes[end + 10] = 1;
        fs.write_file(&p, &bytes).unwrap();
        assert!(read_all(&fs, &p).unwrap_err().is_corruption());
        // The last sector's zeros starting past its boundary: damage too (a sector is
        // written whole).
        bytes[end + 10] = 0;
        let last_sector = (end - 1) & !511;
        assert!(last_sector > torn);
        bytes[last_sector..last_sector + 8].fill(3);
        fs.write_file(&p, &bytes).unwrap();
        assert!(read_all(&fs, &p).unwrap_err().is_corruption());
    }

    #[test]
    fn zero_filled_pages_after_a_valid_header_are_torn() {
        // A crash that extended the file before writing the payload's pages leaves zeros.
        let payload = vec![7u8; 10_000];
        let (fs, p, mut bytes) = log_with(&[b"one", &payload]);
        let second = HEADER_LEN + 3;
        let page = (second + HEADER_LEN + 4096) & !4095; // a page boundary inside the payload
        for b in &mut bytes[page..] {
            *b = 0;
        }
        fs.write_file(&p, &bytes).unwrap();
        let (recs, tail) = read_all(&fs, &p).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(tail.torn_at, Some(second as u64));
    }
}
