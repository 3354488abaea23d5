//! [`VersionSet`]: the current version, the manifest that records how it came to be, and the
//! counters persisted with it (next file number, last sequence, live WAL).
//!
//! The manifest `MANIFEST-NNNNNN` is a record log (see [`crate::record`]) of [`VersionEdit`]s;
//! its first record is a snapshot of the whole state. `CURRENT` names the live manifest and is
//! replaced atomically (write a temporary, sync, rename, sync the directory). An edit counts
//! once it is synced; a torn last record is an edit that never committed and is ignored.
//!
//! Replay trusts nothing it reads: each edit is checked against the state the edits before it
//! built (see [`apply_edit`]), and one that no writer can have produced is corruption naming
//! the manifest and the offset of the edit's record.

use super::edit::{FileMeta, VersionEdit, NUM_LEVELS};
use super::{TableEnv, TableHandle, Version};
use crate::error::{io_context, Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::{self, FileSystem};
use crate::record::{self, RecordReader, RecordWriter};
use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A manifest larger than this is rewritten as a fresh snapshot (once it is also twice its
/// snapshot's size: see [`ManifestWriter::snapshot_len`]), unless the database's
/// `Options::max_manifest_size` says otherwise (its default is this too).
const MAX_MANIFEST_BYTES: u64 = 16 << 20;

#[derive(Debug)]
struct ManifestWriter {
    log: RecordWriter,
    number: u64,
    path: PathBuf,
    /// Bytes of the snapshot record the manifest starts with. A rewrite waits until the
    /// manifest is twice that: a tree whose snapshot alone passes [`MAX_MANIFEST_BYTES`]
    /// (many tables, long keys) would otherwise rewrite its whole manifest at every edit.
    snapshot_len: u64,
}

/// What a manifest replay found.
#[derive(Debug, Default, Clone)]
pub(crate) struct ManifestState {
    pub(crate) manifest_number: u64,
    pub(crate) log_number: u64,
    pub(crate) next_file_number: u64,
    pub(crate) last_sequence: u64,
    pub(crate) compact_pointers: Vec<Vec<u8>>,
    pub(crate) levels: Vec<BTreeMap<u64, FileMeta>>,
    /// Edits read.
    pub(crate) edits: u64,
    /// Bytes of a torn last record that were ignored.
    pub(crate) torn_bytes: u64,
}

/// The longest `CURRENT` read: far more than a manifest's name and a newline.
const CURRENT_MAX_LEN: u64 = 4096;

/// Reads `CURRENT` and returns the number of the live manifest; `Ok(None)` if there is no
/// `CURRENT`.
pub(crate) fn read_current(fs: &dyn FileSystem, dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(filename::CURRENT);
    if !fs.exists(&path) {
        return Ok(None);
    }
    // A manifest's name is a few bytes: a larger file is not read whole.
    let file = fs.open(&path).map_err(|e| io_context("open", &path, e))?;
    let len = file.len();
    if len > CURRENT_MAX_LEN {
        return Err(Error::corruption(
            &path,
            0,
            format!("CURRENT is {len} bytes: too long to name a manifest"),
        ));
    }
    let mut contents = vec![0u8; len as usize];
    file.read_exact_at(&mut contents, 0)
        .map_err(|e| io_context("read", &path, e))?;
    filename::parse_current(&contents).map(Some).ok_or_else(|| {
        Error::corruption(
            &path,
            0,
            format!(
                "CURRENT does not name a manifest ({} bytes: {:?})",
                contents.len(),
                String::from_utf8_lossy(&contents[..contents.len().min(64)])
            ),
        )
    })
}

/// Replays manifest `number`, which `CURRENT` named; returns the number of the manifest
/// replayed, and its state. A reader without the directory lock (a read-only open, `silt`)
/// may run beside a
/// writer that replaces its manifest (at every open, and when it grows large) between the
/// read of `CURRENT` and the open of the manifest: if the manifest is gone and `CURRENT` now
/// names another, that one is replayed instead (a few times at most), rather than calling a
/// healthy database corrupt. A writer holds the directory's lock, so nothing replaces its
/// manifest under it: for it (`read_only` false), a missing manifest is the corruption it
/// reads as.
pub(crate) fn replay_current_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
    mut number: u64,
    read_only: bool,
) -> Result<(u64, ManifestState)> {
    let mut retries = 0;
    loop {
        match replay_manifest(fs, dir, number) {
            Err(e)
                if read_only
                    && retries < 8
                    && e.is_corruption()
                    && !fs.exists(&dir.join(filename::manifest_name(number))) =>
            {
                match read_current(fs, dir)? {
                    Some(n) if n != number => {
                        log::info!(
                            "{}: the manifest was replaced while opening; reading {}",
                            dir.display(),
                            filename::manifest_name(n)
                        );
                        number = n;
                        retries += 1;
                    }
                    _ => return Err(e),
                }
            }
            res => return res.map(|st| (number, st)),
        }
    }
}

/// Replays a manifest into the state it describes.
pub(crate) fn replay_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
) -> Result<ManifestState> {
    let path = dir.join(filename::manifest_name(number));
    let file = fs.open(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::corruption(
                &dir.join(filename::CURRENT),
                0,
                format!("CURRENT names {} which does not exist", path.display()),
            )
        } else {
            io_context("open", &path, e)
        }
    })?;
    let mut reader = RecordReader::new(file, &path, number);
    let mut st = ManifestState {
        manifest_number: number,
        compact_pointers: vec![Vec::new(); NUM_LEVELS],
        levels: vec![BTreeMap::new(); NUM_LEVELS],
        ..ManifestState::default()
    };
    let mut history = History::new(number);
    while let Some(rec) = reader.next()? {
        let edit = VersionEdit::decode(&rec.payload)
            .map_err(|d| Error::corruption(&path, rec.offset, format!("manifest record: {d}")))?;
        apply_edit(&mut st, &mut history, &edit)
            .map_err(|d| Error::corruption(&path, rec.offset, format!("manifest edit: {d}")))?;
        st.edits += 1;
    }
    let tail = reader.tail();
    if let Some(at) = tail.torn_at {
        log::warn!(
            "{}: ignoring torn last record at offset {at} ({} bytes)",
            path.display(),
            tail.dropped_bytes
        );
        st.torn_bytes = tail.dropped_bytes;
    }
    if st.edits == 0 {
        return Err(Error::corruption(
            &path,
            0,
            "manifest holds no complete record",
        ));
    }
    Ok(st)
}

/// What a replay remembers beyond the state, to check each edit against the ones before it.
struct History {
    /// Numbers of tables deleted for good (not moved): a file number is never handed out twice.
    retired: HashSet<u64>,
    /// The largest file number used so far: the manifest's own and every table's.
    max_number: u64,
    /// Per level (L0's stays empty): smallest user key -> number of the live table that
    /// starts there, to find an overlapping neighbour in `O(log n)`.
    starts: Vec<BTreeMap<Vec<u8>, u64>>,
    /// L0 by sequence range: `min_seq` -> (`max_seq`, number).
    l0_seqs: BTreeMap<u64, (u64, u64)>,
}

impl History {
    fn new(manifest_number: u64) -> History {
        History {
            retired: HashSet::new(),
            max_number: manifest_number,
            starts: vec![BTreeMap::new(); NUM_LEVELS],
            l0_seqs: BTreeMap::new(),
        }
    }

    /// An L0 table whose sequence range meets a live one's, if any. Each L0 table is one
    /// flushed memtable, and memtables hold disjoint, increasing ranges: a get, which asks L0
    /// tables newest (largest `max_seq`) first and stops at the first that knows the key,
    /// relies on it.
    fn l0_seq_overlap(&self, m: &FileMeta) -> Option<u64> {
        let before = self.l0_seqs.range(..=m.max_seq).next_back();
        before
            .filter(|(_, &(max, _))| max >= m.min_seq)
            .map(|(_, &(_, n))| n)
    }
}

/// Applies `edit` to `st`, refusing one that contradicts the edits before it. siltdb writes
/// every edit from a consistent state, so these cannot happen without damage the checksums
/// missed (or a bug), and repairing them would hide it:
///
/// * `last_sequence` going backwards, or a table whose `max_seq` is above the last sequence
///   once the edit is applied (a flush edit raises `last_sequence` to its table's `max_seq`);
/// * deleting a table that is not in that level;
/// * adding a table whose number is live (in any level, after the edit's deletions: a table
///   deleted and added by the same edit moved levels), was deleted by an earlier edit, or is
///   the manifest's own number;
/// * tables of a level >= 1 whose user-key ranges overlap, or L0 tables whose sequence
///   ranges meet (each is one flushed memtable);
/// * `next_file_number` not above every file number used so far (the manifest's own and every
///   table's, live or deleted), or `log_number` not below it. The counter is monotonic and is
///   read after the numbers an edit refers to were handed out, so this is corruption, not
///   something to repair by taking a maximum: a counter that went back would hand out a live
///   file's number again.
fn apply_edit(
    st: &mut ManifestState,
    seen: &mut History,
    edit: &VersionEdit,
) -> Result<(), String> {
    if let Some(n) = edit.log_number {
        st.log_number = n;
    }
    if let Some(n) = edit.next_file_number {
        st.next_file_number = n;
    }
    if let Some(n) = edit.last_sequence {
        if n < st.last_sequence {
            return Err(format!(
                "last sequence goes back from {} to {n}",
                st.last_sequence
            ));
        }
        st.last_sequence = n;
    }
    for (l, k) in &edit.compact_pointers {
        st.compact_pointers[*l as usize] = k.clone();
    }
    for &(l, n) in &edit.deleted {
        let meta = st.levels[l as usize]
            .remove(&n)
            .ok_or_else(|| format!("deletes table {n} which is not in L{l}"))?;
        let starts = &mut seen.starts[l as usize];
        if starts.get(meta.smallest_user()) == Some(&n) {
            starts.remove(meta.smallest_user());
        }
        if l == 0 {
            seen.l0_seqs.remove(&meta.min_seq);
        }
    }
    for (l, m) in &edit.added {
        let (l, n) = (*l as usize, m.number);
        if n == st.manifest_number {
            return Err(format!("adds table {n}, the number of the manifest itself"));
        }
        if st.levels.iter().any(|level| level.contains_key(&n)) {
            return Err(format!("adds table {n} which is already live"));
        }
        if seen.retired.contains(&n) {
            return Err(format!(
                "adds table {n} which an earlier edit deleted: file numbers are never reused"
            ));
        }
        if l >= 1 {
            let (lo, hi) = (m.smallest_user(), m.largest_user());
            let starts = &mut seen.starts[l];
            // The live table starting last at or before `hi` is the only one that can overlap:
            // the ones before it end before it starts.
            let before = starts
                .range::<[u8], _>((Bound::Unbounded, Bound::Included(hi)))
                .next_back()
                .and_then(|(_, other)| st.levels[l].get(other));
            if let Some(other) = before.filter(|o| o.largest_user() >= lo) {
                return Err(format!("table {n} overlaps table {} in L{l}", other.number));
            }
            starts.insert(lo.to_vec(), n);
        } else {
            if let Some(other) = seen.l0_seq_overlap(m) {
                return Err(format!(
                    "L0 table {n} has sequence numbers {}..={} which meet those of L0 table {other}",
                    m.min_seq, m.max_seq
                ));
            }
            seen.l0_seqs.insert(m.min_seq, (m.max_seq, n));
        }
        st.levels[l].insert(n, m.clone());
        seen.max_number = seen.max_number.max(n);
        if m.max_seq > st.last_sequence {
            return Err(format!(
                "table {n} holds sequence numbers up to {} but the last sequence is {}",
                m.max_seq, st.last_sequence
            ));
        }
    }
    let moved: HashSet<u64> = edit.added.iter().map(|(_, m)| m.number).collect();
    for &(_, n) in &edit.deleted {
        if !moved.contains(&n) {
            seen.retired.insert(n);
        }
    }
    if st.next_file_number <= seen.max_number {
        return Err(format!(
            "next file number {} is not above file number {} which is already used",
            st.next_file_number, seen.max_number
        ));
    }
    if st.log_number >= st.next_file_number {
        return Err(format!(
            "log number {} is not below the next file number {}",
            st.log_number, st.next_file_number
        ));
    }
    Ok(())
}

/// The current version and the manifest.
#[derive(Debug)]
pub(crate) struct VersionSet {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    manifest: Option<ManifestWriter>,
    current: Arc<Version>,
    log_number: u64,
    last_sequence: u64,
    next_file: Arc<AtomicU64>,
    compact_pointers: Vec<Vec<u8>>,
    /// The manifest write that failed; every later edit is refused with it.
    failed: Option<Error>,
    /// Manifest bytes past which it is rewritten: `Options::max_manifest_size`
    /// ([`MAX_MANIFEST_BYTES`] until [`set_rewrite_at`](Self::set_rewrite_at)).
    rewrite_at: u64,
    /// What the tables share (caches, the obsolete-file queue).
    env: Arc<TableEnv>,
}

impl VersionSet {
    /// An empty tree (a new database); nothing is written until
    /// [`write_new_manifest`](Self::write_new_manifest).
    pub(crate) fn new_empty(fs: Arc<dyn FileSystem>, env: &Arc<TableEnv>) -> VersionSet {
        let dir = &env.dir;
        VersionSet {
            fs,
            dir: dir.to_path_buf(),
            manifest: None,
            current: Arc::new(Version::default()),
            log_number: 0,
            last_sequence: 0,
            next_file: Arc::new(AtomicU64::new(1)),
            compact_pointers: vec![Vec::new(); NUM_LEVELS],
            failed: None,
            rewrite_at: MAX_MANIFEST_BYTES,
            env: env.clone(),
        }
    }

    /// The tree the manifest describes, with every table opened.
    pub(crate) fn from_state(
        fs: Arc<dyn FileSystem>,
        env: &Arc<TableEnv>,
        st: &ManifestState,
    ) -> VersionSet {
        let dir = &env.dir;
        let mut version = Version::default();
        for (l, files) in st.levels.iter().enumerate() {
            for meta in files.values() {
                version.levels[l].push(TableHandle::open(env, meta.clone()));
            }
        }
        version.sort_levels();
        // `replay_manifest` checked that the last sequence is at or above every table's
        // sequence numbers and the file counter above every file number (a manifest where
        // they are not is corrupt, not repaired).
        VersionSet {
            fs,
            dir: dir.to_path_buf(),
            manifest: None,
            current: Arc::new(version),
            log_number: st.log_number,
            last_sequence: st.last_sequence,
            next_file: Arc::new(AtomicU64::new(st.next_file_number)),
            compact_pointers: st.compact_pointers.clone(),
            failed: None,
            rewrite_at: MAX_MANIFEST_BYTES,
            env: env.clone(),
        }
    }

    /// Rewrites the manifest once it is `bytes` long (and twice its snapshot's size).
    pub(crate) fn set_rewrite_at(&mut self, bytes: u64) {
        self.rewrite_at = bytes;
    }

    /// What the tables share.
    pub(crate) fn table_env(&self) -> &Arc<TableEnv> {
        &self.env
    }

    pub(crate) fn current(&self) -> Arc<Version> {
        self.current.clone()
    }

    pub(crate) fn log_number(&self) -> u64 {
        self.log_number
    }

    pub(crate) fn last_sequence(&self) -> u64 {
        self.last_sequence
    }

    /// The shared file-number counter.
    pub(crate) fn file_numbers(&self) -> Arc<AtomicU64> {
        self.next_file.clone()
    }

    pub(crate) fn new_file_number(&self) -> u64 {
        self.next_file.fetch_add(1, Ordering::SeqCst)
    }

    /// Makes sure later file numbers are above `n` (after WAL replay found files up to `n`).
    pub(crate) fn mark_file_number_used(&self, n: u64) {
        // `n` comes from a file name: at most `MAX_FILE_NUMBER`, but never trust it to be.
        self.next_file
            .fetch_max(n.saturating_add(1), Ordering::SeqCst);
    }

    pub(crate) fn compact_pointer(&self, level: usize) -> &[u8] {
        &self.compact_pointers[level]
    }

    pub(crate) fn manifest_number(&self) -> Option<u64> {
        self.manifest.as_ref().map(|m| m.number)
    }

    /// The manifest write that failed, if one did: every later edit is refused with it. An
    /// edit can succeed and still leave one behind (the rewrite of an oversized manifest
    /// that follows it failed), so a caller that must stop writes on any manifest failure
    /// (durability rule D7) checks this after a successful [`log_and_apply`](Self::log_and_apply).
    pub(crate) fn failure(&self) -> Option<&Error> {
        self.failed.as_ref()
    }

    fn check_usable(&self) -> Result<()> {
        match &self.failed {
            Some(why) => Err(why.clone().into_poison()),
            None => Ok(()),
        }
    }

    fn snapshot_edit(&self) -> VersionEdit {
        VersionEdit {
            log_number: Some(self.log_number),
            next_file_number: Some(
                self.next_file
                    .load(Ordering::SeqCst)
                    .min(filename::MAX_FILE_NUMBER + 1),
            ),
            last_sequence: Some(self.last_sequence),
            compact_pointers: self
                .compact_pointers
                .iter()
                .enumerate()
                .filter(|(_, k)| !k.is_empty())
                .map(|(l, k)| (l as u32, k.clone()))
                .collect(),
            deleted: Vec::new(),
            added: self
                .current
                .levels
                .iter()
                .enumerate()
                .flat_map(|(l, ts)| ts.iter().map(move |t| (l as u32, t.meta.clone())))
                .collect(),
        }
    }

    /// Writes a new manifest holding a snapshot of the current state, makes `CURRENT` point
    /// at it, and removes the previous manifest.
    pub(crate) fn write_new_manifest(&mut self) -> Result<()> {
        self.check_usable()?;
        let res = self.write_new_manifest_inner();
        if let Err(e) = &res {
            self.failed = Some(e.clone());
        }
        res
    }

    /// A number for a new file, refused past [`filename::MAX_FILE_NUMBER`].
    fn checked_file_number(&self) -> Result<u64> {
        filename::check_new_number(&self.dir, self.new_file_number())
    }

    fn write_new_manifest_inner(&mut self) -> Result<()> {
        let number = self.checked_file_number()?;
        let path = self.dir.join(filename::manifest_name(number));
        // Framed first: a snapshot too large for one record leaves no empty manifest behind.
        let snapshot = record::frame(&self.snapshot_edit().encode(), number)?;
        let file = self
            .fs
            .create(&path)
            .map_err(|e| io_context("create", &path, e))?;
        let mut log = RecordWriter::new(file);
        let snapshot_len = snapshot.len() as u64;
        log.append_framed(&snapshot)
            .map_err(|e| io_context("write", &path, e))?;
        log.sync().map_err(|e| io_context("sync", &path, e))?;
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| io_context("sync directory", &self.dir, e))?;
        let tmp = filename::temp_name(self.checked_file_number()?);
        let contents = format!("{}\n", filename::manifest_name(number));
        fs::write_atomic(
            self.fs.as_ref(),
            &self.dir,
            &tmp,
            filename::CURRENT,
            contents.as_bytes(),
        )
        .map_err(|e| io_context("install CURRENT for", &path, e))?;
        if let Some(old) = self.manifest.replace(ManifestWriter {
            log,
            number,
            path,
            snapshot_len,
        }) {
            if let Err(e) = self.fs.remove(&old.path) {
                log::warn!("could not remove old manifest {}: {e}", old.path.display());
            }
        }
        log::info!("manifest {} is current", filename::manifest_name(number));
        Ok(())
    }

    /// Records `edit` durably in the manifest, then makes the resulting version current.
    /// `opened` holds the handles of tables the edit adds.
    ///
    /// An edit too large for one log record ([`Error::InvalidArgument`], over 1 GiB) is
    /// refused before anything is written: the set is as it was.
    ///
    /// On a write or sync failure of the edit, the set refuses every later edit
    /// ([`Error::Poisoned`]): the manifest may be damaged, and a retried fsync proves nothing.
    /// The edit may still have reached the disk, so the caller must not delete the files it
    /// adds; the next open removes whatever the replayed manifest does not reference.
    ///
    /// If the edit is durable but rewriting an oversized manifest fails afterwards, the edit
    /// stands (`Ok`) and only later edits are refused.
    pub(crate) fn log_and_apply(
        &mut self,
        mut edit: VersionEdit,
        opened: &[Arc<TableHandle>],
    ) -> Result<Arc<Version>> {
        self.check_usable()?;
        // Numbers past the largest would not be read back: refuse the edit, not the next open.
        for n in edit
            .log_number
            .iter()
            .chain(edit.added.iter().map(|(_, m)| &m.number))
        {
            filename::check_new_number(&self.dir, *n)?;
        }
        let next = self.current.apply(&edit, opened)?;
        // A counter pushed past the largest number handed out nothing valid beyond it.
        let counter = self.next_file.load(Ordering::SeqCst);
        edit.next_file_number = Some(counter.min(filename::MAX_FILE_NUMBER + 1));
        let last = edit.last_sequence.unwrap_or(0).max(self.last_sequence);
        edit.last_sequence = Some(last);
        let m = self
            .manifest
            .as_mut()
            .ok_or_else(|| Error::other("no manifest is open for writing").into_poison())?;
        let framed = record::frame(&edit.encode(), m.number)?;
        let written = m
            .log
            .append_framed(&framed)
            .and_then(|()| m.log.sync())
            .map_err(|e| io_context("append to manifest", &m.path, e));
        if let Err(e) = written {
            self.failed = Some(e.clone());
            return Err(e);
        }
        let oversized = m.log.len() > self.rewrite_at.max(m.snapshot_len.saturating_mul(2));
        for (l, k) in &edit.compact_pointers {
            self.compact_pointers[*l as usize] = k.clone();
        }
        if let Some(n) = edit.log_number {
            self.log_number = self.log_number.max(n);
        }
        self.last_sequence = last;
        // Tables the edit removes (and does not add back elsewhere) are obsolete.
        for &(level, number) in &edit.deleted {
            let moved = edit.added.iter().any(|(_, m)| m.number == number);
            if !moved {
                if let Some(t) = self.current.levels[level as usize]
                    .iter()
                    .find(|t| t.number() == number)
                {
                    t.mark_obsolete();
                }
            }
        }
        self.current = Arc::new(next);
        if oversized {
            if let Err(e) = self.write_new_manifest() {
                // The edit above is durable; only later edits are refused (`failed` is set).
                log::error!("could not rewrite the manifest: {e}");
            }
        }
        Ok(self.current.clone())
    }
}

/// Classifies the files of `dir`.
pub(crate) fn list_files(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<(String, FileKind)>> {
    let names = fs.list(dir).map_err(|e| io_context("list", dir, e))?;
    Ok(names
        .into_iter()
        .filter_map(|n| filename::parse(&n).map(|k| (n, k)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    fn setup() -> (Arc<dyn FileSystem>, MemFs, PathBuf) {
        let mem = MemFs::new();
        let dir = PathBuf::from("/db");
        mem.create_dir_all(&dir).unwrap();
        (Arc::new(mem.clone()), mem, dir)
    }

    #[test]
    fn new_manifest_is_current_and_replays() {
        let (fs, mem, dir) = setup();
        let mut set =
            VersionSet::new_empty(fs.clone(), &TableEnv::new(fs.clone(), &dir, 100, None));
        set.write_new_manifest().unwrap();
        assert_eq!(read_current(fs.as_ref(), &dir).unwrap(), Some(1));
        // The log number is one that was handed out (here up to 5).
        while set.new_file_number() < 5 {}
        let edit = VersionEdit {
            log_number: Some(5),
            last_sequence: Some(77),
            ..VersionEdit::default()
        };
        set.log_and_apply(edit, &[]).unwrap();
        let st = replay_manifest(fs.as_ref(), &dir, 1).unwrap();
        assert_eq!(st.log_number, 5);
        assert_eq!(st.last_sequence, 77);
        assert_eq!(st.edits, 2);
        // Rewriting the manifest removes the old one and keeps the state.
        set.write_new_manifest().unwrap();
        let n = read_current(fs.as_ref(), &dir).unwrap().unwrap();
        assert!(n > 1);
        assert!(!mem.exists(&dir.join("MANIFEST-000001")));
        let st = replay_manifest(fs.as_ref(), &dir, n).unwrap();
        assert_eq!((st.log_number, st.last_sequence, st.edits), (5, 77, 1));
    }

    /// A reader without the lock that read `CURRENT` just before a writer replaced its
    /// manifest follows `CURRENT` to the new one; a writer (which holds the lock) does not.
    #[test]
    fn a_reader_follows_current_to_a_manifest_replaced_under_it() {
        let (fs, _mem, dir) = setup();
        let mut set =
            VersionSet::new_empty(fs.clone(), &TableEnv::new(fs.clone(), &dir, 100, None));
        set.write_new_manifest().unwrap();
        let old = read_current(fs.as_ref(), &dir).unwrap().unwrap();
        set.write_new_manifest().unwrap();
        let new = read_current(fs.as_ref(), &dir).unwrap().unwrap();
        assert_ne!(old, new);
        let (replayed, st) = replay_current_manifest(fs.as_ref(), &dir, old, true).unwrap();
        assert_eq!(replayed, new);
        assert_eq!(st.edits, 1);
        let err = replay_current_manifest(fs.as_ref(), &dir, old, false).unwrap_err();
        assert!(err.is_corruption(), "{err:?}");
    }

    /// Review finding (session 23): a tree whose snapshot alone passed the rewrite threshold
    /// rewrote its whole manifest (write, fsync, `CURRENT` swap) at every later edit. Here
    /// the threshold is 4 KiB and the snapshot ~13 KiB: one rewrite, then edits append.
    #[test]
    fn a_snapshot_over_the_threshold_is_not_rewritten_at_every_edit() {
        use crate::key::{encode, trailer, ValueKind};
        let (fs, _mem, dir) = setup();
        let mut set =
            VersionSet::new_empty(fs.clone(), &TableEnv::new(fs.clone(), &dir, 100, None));
        set.rewrite_at = 4096;
        set.write_new_manifest().unwrap();
        while set.new_file_number() < 100 {}
        let long = |i: u64, c: char| format!("{i:04}{}", c.to_string().repeat(120));
        let edit = VersionEdit {
            last_sequence: Some(50),
            added: (0..50u64)
                .map(|i| {
                    let meta = crate::version::FileMeta {
                        number: 10 + i,
                        size: 1000,
                        smallest: encode(long(i, 'a').as_bytes(), trailer(i + 1, ValueKind::Put))
                            .into(),
                        largest: encode(long(i, 'z').as_bytes(), trailer(i + 1, ValueKind::Put))
                            .into(),
                        min_seq: i + 1,
                        max_seq: i + 1,
                        entries: 2,
                    };
                    (0, meta)
                })
                .collect(),
            ..VersionEdit::default()
        };
        let opened: Vec<_> = edit
            .added
            .iter()
            .map(|(_, m)| crate::version::TableHandle::open(set.table_env(), m.clone()))
            .collect();
        set.log_and_apply(edit, &opened).unwrap();
        let rewritten = read_current(fs.as_ref(), &dir).unwrap().unwrap();
        assert!(
            rewritten > 1,
            "the edit passed 4 KiB: the manifest was rewritten"
        );
        for seq in 51..61 {
            let edit = VersionEdit {
                last_sequence: Some(seq),
                ..VersionEdit::default()
            };
            set.log_and_apply(edit, &[]).unwrap();
        }
        assert_eq!(read_current(fs.as_ref(), &dir).unwrap(), Some(rewritten));
        let st = replay_manifest(fs.as_ref(), &dir, rewritten).unwrap();
        assert_eq!(
            (st.last_sequence, st.edits, st.levels[0].len()),
            (60, 11, 50)
        );
    }

    #[test]
    fn manifest_sync_failure_poisons_the_set() {
        let (fs, mem, dir) = setup();
        let mut set = VersionSet::new_empty(fs.clone(), &TableEnv::new(fs, &dir, 100, None));
        set.write_new_manifest().unwrap();
        mem.set_fault(Some(crate::fs::FaultPlan::nth(crate::fs::OpKind::Sync, 0)));
        assert!(set.log_and_apply(VersionEdit::default(), &[]).is_err());
        let again = set.log_and_apply(VersionEdit::default(), &[]);
        assert!(matches!(again, Err(Error::Poisoned(_))), "{again:?}");
    }

    #[test]
    fn bad_current_is_corruption() {
        let (fs, mem, dir) = setup();
        mem.write_file(&dir.join("CURRENT"), b"garbage").unwrap();
        assert!(read_current(fs.as_ref(), &dir).unwrap_err().is_corruption());
        // A huge CURRENT is refused by its size, not read whole.
        let mut huge = b"MANIFEST-000009\n".to_vec();
        huge.resize(CURRENT_MAX_LEN as usize + 1, b'\n');
        mem.write_file(&dir.join("CURRENT"), &huge).unwrap();
        assert!(read_current(fs.as_ref(), &dir).unwrap_err().is_corruption());
        mem.write_file(&dir.join("CURRENT"), b"MANIFEST-000009\n")
            .unwrap();
        assert_eq!(read_current(fs.as_ref(), &dir).unwrap(), Some(9));
        assert!(replay_manifest(fs.as_ref(), &dir, 9)
            .unwrap_err()
            .is_corruption());
    }
}

/// Manifests holding an edit no writer can produce: each is refused, by the replay and by a
/// whole `Db::open`, as corruption naming the manifest and the offset of the edit's record.
#[cfg(test)]
mod validation_tests {
    use super::*;
    use crate::fs::MemFs;
    use crate::key::{encode, trailer, ValueKind, MAX_SEQ};
    use bytes::Bytes;

    const DIR: &str = "/db";

    /// A closed database with one table in L0 (sequence numbers 1 and 2), a manifest
    /// numbered above it (written by a second open), and an unflushed write in its WAL; and
    /// the state its manifest replays to.
    fn base() -> (MemFs, ManifestState) {
        let mem = MemFs::new();
        let db = crate::Db::open_with(DIR, options(&mem)).unwrap();
        db.insert("b", "1").unwrap();
        db.insert("d", "2").unwrap();
        db.flush().unwrap();
        db.close().unwrap();
        let db = crate::Db::open_with(DIR, options(&mem)).unwrap();
        db.insert("x", "3").unwrap();
        db.close().unwrap();
        let n = read_current(&mem, Path::new(DIR)).unwrap().unwrap();
        let st = replay_manifest(&mem, Path::new(DIR), n).unwrap();
        assert_eq!((st.levels[0].len(), st.last_sequence), (1, 2));
        assert!(st.manifest_number > live_table(&st).number);
        (mem, st)
    }

    fn options(mem: &MemFs) -> crate::Options {
        crate::Options::default()
            .auto_compaction(false)
            .file_system(Arc::new(mem.clone()))
    }

    fn live_table(st: &ManifestState) -> FileMeta {
        st.levels[0].values().next().unwrap().clone()
    }

    /// A table record for keys `lo..=hi` with sequence numbers `min..=max`.
    fn table(number: u64, lo: &str, hi: &str, min: u64, max: u64) -> FileMeta {
        FileMeta {
            number,
            size: 1000,
            smallest: Bytes::from(encode(lo.as_bytes(), trailer(max, ValueKind::Put))),
            largest: Bytes::from(encode(hi.as_bytes(), trailer(min, ValueKind::Put))),
            min_seq: min,
            max_seq: max,
            entries: 2,
        }
    }

    /// An edit that raises the file-number counter enough for the tables it adds.
    fn edit(st: &ManifestState) -> VersionEdit {
        VersionEdit {
            next_file_number: Some(st.next_file_number + 100),
            ..VersionEdit::default()
        }
    }

    /// Appends each edit, in one record each, to the live manifest: the manifest's path and
    /// the offset of the last record.
    fn append(mem: &MemFs, edits: &[VersionEdit]) -> (PathBuf, u64) {
        let n = read_current(mem, Path::new(DIR)).unwrap().unwrap();
        let path = Path::new(DIR).join(filename::manifest_name(n));
        let mut bytes = mem.read_file(&path).unwrap();
        let mut last = 0;
        for e in edits {
            last = bytes.len() as u64;
            bytes.extend_from_slice(&record::frame(&e.encode(), n).unwrap());
        }
        mem.write_file(&path, &bytes).unwrap();
        (path, last)
    }

    /// Appends the edits; the last one must be refused, the ones before it accepted.
    fn assert_refused(mem: &MemFs, edits: &[VersionEdit]) {
        let (path, at) = append(mem, edits);
        let number = read_current(mem, Path::new(DIR)).unwrap().unwrap();
        let replayed = replay_manifest(mem, Path::new(DIR), number);
        match replayed {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!((&file, offset), (&path, at), "{edits:?}")
            }
            other => panic!("{edits:?}: replay gave {other:?}"),
        }
        match crate::Db::open_with(DIR, options(mem)) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!((&file, offset), (&path, at), "{edits:?}")
            }
            other => panic!("{edits:?}: open gave {other:?}"),
        }
    }

    /// Appends the edits and replays them without complaint.
    fn assert_accepted(mem: &MemFs, edits: &[VersionEdit]) -> ManifestState {
        append(mem, edits);
        let number = read_current(mem, Path::new(DIR)).unwrap().unwrap();
        replay_manifest(mem, Path::new(DIR), number).unwrap()
    }

    #[test]
    fn the_base_database_reopens() {
        let (mem, _) = base();
        let db = crate::Db::open_with(DIR, options(&mem)).unwrap();
        assert_eq!(db.get("x").unwrap().as_deref(), Some(&b"3"[..]));
    }

    #[test]
    fn table_above_the_last_sequence() {
        let (mem, st) = base();
        let mut e = edit(&st);
        e.added.push((
            0,
            table(st.next_file_number, "a", "z", 3, st.last_sequence + 1),
        ));
        assert_refused(&mem, &[e]);
        // A flush edit raises the last sequence to its table's in the same edit.
        let (mem, st) = base();
        let mut e = edit(&st);
        e.added
            .push((0, table(st.next_file_number, "a", "z", 3, 9)));
        e.last_sequence = Some(9);
        assert_eq!(assert_accepted(&mem, &[e]).last_sequence, 9);
    }

    #[test]
    fn overlapping_tables_in_l1() {
        let n = |st: &ManifestState, i: u64| st.next_file_number + i;
        for (a, b) in [
            (("a", "c"), ("c", "e")),
            (("c", "e"), ("a", "c")),
            (("a", "z"), ("m", "n")),
            (("m", "n"), ("a", "z")),
            (("k", "k"), ("k", "k")),
        ] {
            // In one edit.
            let (mem, st) = base();
            let mut e = edit(&st);
            e.added.push((1, table(n(&st, 0), a.0, a.1, 1, 2)));
            e.added.push((1, table(n(&st, 1), b.0, b.1, 1, 2)));
            assert_refused(&mem, &[e]);
            // In two.
            let (mem, st) = base();
            let mut first = edit(&st);
            first.added.push((1, table(n(&st, 0), a.0, a.1, 1, 2)));
            let mut second = edit(&st);
            second.added.push((1, table(n(&st, 1), b.0, b.1, 1, 2)));
            assert_refused(&mem, &[first, second]);
        }
        // Disjoint ranges, and overlap in L0, are fine; so is a table replacing the one it
        // overlaps (deletions come first).
        let (mem, st) = base();
        let mut e = edit(&st);
        e.added.push((1, table(n(&st, 0), "a", "b", 1, 2)));
        e.added.push((1, table(n(&st, 1), "d", "f", 1, 2)));
        e.added.push((1, table(n(&st, 2), "c", "c", 1, 2)));
        e.added.push((0, table(n(&st, 3), "a", "z", 3, 3)));
        e.last_sequence = Some(3);
        let mut replace = edit(&st);
        replace.deleted.push((1, n(&st, 1)));
        replace.added.push((1, table(n(&st, 4), "d", "e", 1, 2)));
        let got = assert_accepted(&mem, &[e, replace]);
        assert_eq!(got.levels[1].len(), 3);
    }

    #[test]
    fn l0_tables_with_meeting_sequence_ranges() {
        // The live L0 table holds 1..=2.
        for (min, max) in [(1, 2), (2, 5), (0, 1), (0, 9), (2, 2)] {
            let (mem, st) = base();
            let mut e = edit(&st);
            e.added
                .push((0, table(st.next_file_number, "p", "q", min, max)));
            assert_refused(&mem, &[e]);
        }
        // Two in one edit.
        let (mem, st) = base();
        let mut e = edit(&st);
        e.last_sequence = Some(9);
        e.added
            .push((0, table(st.next_file_number, "a", "b", 3, 6)));
        e.added
            .push((0, table(st.next_file_number + 1, "a", "b", 6, 9)));
        assert_refused(&mem, &[e]);
        // Disjoint ranges are fine, and a range is free again once its table is gone.
        let (mem, st) = base();
        let live = live_table(&st);
        let mut e = edit(&st);
        e.last_sequence = Some(9);
        e.added
            .push((0, table(st.next_file_number, "a", "b", 3, 6)));
        e.added
            .push((0, table(st.next_file_number + 1, "a", "b", 7, 9)));
        let mut compacted = edit(&st);
        compacted.deleted.push((0, live.number));
        compacted
            .added
            .push((1, table(st.next_file_number + 2, "b", "d", 1, 2)));
        let mut again = edit(&st);
        again
            .added
            .push((0, table(st.next_file_number + 3, "x", "y", 1, 2)));
        assert_eq!(
            assert_accepted(&mem, &[e, compacted, again]).levels[0].len(),
            3
        );
    }

    #[test]
    fn level_out_of_range() {
        let (mem, st) = base();
        let mut e = edit(&st);
        e.added
            .push((7, table(st.next_file_number, "a", "b", 1, 2)));
        assert_refused(&mem, &[e]);
        let (mem, st) = base();
        let mut e = edit(&st);
        e.deleted.push((u32::MAX, live_table(&st).number));
        assert_refused(&mem, &[e]);
    }

    #[test]
    fn file_number_reused() {
        // A live table's number, in another level or the same one.
        for level in [0, 3] {
            let (mem, st) = base();
            let mut e = edit(&st);
            let live = live_table(&st);
            e.added.push((level, table(live.number, "p", "q", 1, 2)));
            assert_refused(&mem, &[e]);
        }
        // The manifest's own number.
        let (mem, st) = base();
        let mut e = edit(&st);
        e.added.push((2, table(st.manifest_number, "p", "q", 1, 2)));
        assert_refused(&mem, &[e]);
        // A number an earlier edit deleted.
        let (mem, st) = base();
        let live = live_table(&st);
        let mut delete = edit(&st);
        delete.deleted.push((0, live.number));
        let mut again = edit(&st);
        again.added.push((0, live));
        assert_refused(&mem, &[delete, again]);
        // Twice in one edit.
        let (mem, st) = base();
        let mut e = edit(&st);
        e.added
            .push((1, table(st.next_file_number, "a", "b", 1, 2)));
        e.added
            .push((2, table(st.next_file_number, "a", "b", 1, 2)));
        assert_refused(&mem, &[e]);
        // A move between levels deletes and adds the same number in one edit: fine.
        let (mem, st) = base();
        let live = live_table(&st);
        let mut moved = edit(&st);
        moved.deleted.push((0, live.number));
        moved.added.push((1, live.clone()));
        let got = assert_accepted(&mem, &[moved]);
        assert!(got.levels[1].contains_key(&live.number) && got.levels[0].is_empty());
        let db = crate::Db::open_with(DIR, options(&mem)).unwrap();
        assert_eq!(db.get("d").unwrap().as_deref(), Some(&b"2"[..]));
    }

    #[test]
    fn deleting_a_table_that_is_not_there() {
        let (mem, st) = base();
        let mut e = edit(&st);
        e.deleted.push((1, live_table(&st).number)); // it is in L0
        assert_refused(&mem, &[e]);
        let (mem, st) = base();
        let mut e = edit(&st);
        e.deleted.push((0, st.next_file_number + 5));
        assert_refused(&mem, &[e]);
    }

    #[test]
    fn sequence_numbers_past_max_seq() {
        for max in [MAX_SEQ + 1, u64::MAX] {
            let (mem, st) = base();
            let mut e = edit(&st);
            e.last_sequence = Some(max);
            assert_refused(&mem, &[e]);
            let (mem, st) = base();
            let mut e = edit(&st);
            let mut t = table(st.next_file_number, "a", "b", 1, 2);
            t.max_seq = max;
            e.added.push((0, t));
            assert_refused(&mem, &[e]);
        }
        let (mem, st) = base();
        let mut e = edit(&st);
        e.last_sequence = Some(MAX_SEQ);
        assert_eq!(assert_accepted(&mem, &[e]).last_sequence, MAX_SEQ);
    }

    #[test]
    fn last_sequence_going_back() {
        let (mem, st) = base();
        let mut e = edit(&st);
        e.last_sequence = Some(st.last_sequence - 1);
        assert_refused(&mem, &[e]);
    }

    #[test]
    fn min_seq_above_max_seq() {
        let (mem, st) = base();
        let mut e = edit(&st);
        let mut t = table(st.next_file_number, "a", "b", 2, 2);
        t.min_seq = 3;
        e.added.push((0, t));
        assert_refused(&mem, &[e]);
    }

    #[test]
    fn smallest_above_largest() {
        let (mem, st) = base();
        let mut e = edit(&st);
        e.added
            .push((0, table(st.next_file_number, "z", "a", 1, 2)));
        assert_refused(&mem, &[e]);
    }

    #[test]
    fn implausible_sizes_and_counts() {
        let cases: [fn(&mut FileMeta); 4] = [
            |t| t.size = 0,
            |t| t.size = super::super::edit::MAX_TABLE_SIZE + 1,
            |t| t.entries = 0,
            |t| t.entries = t.size + 1,
        ];
        for f in cases {
            let (mem, st) = base();
            let mut e = edit(&st);
            let mut t = table(st.next_file_number, "a", "b", 1, 2);
            f(&mut t);
            e.added.push((0, t));
            assert_refused(&mem, &[e]);
        }
    }

    #[test]
    fn counters_not_above_the_numbers_in_use() {
        let (mem, st) = base();
        let live = live_table(&st).number;
        for next in [live, st.manifest_number, st.manifest_number - 1, 1] {
            let (mem, _) = base();
            let e = VersionEdit {
                next_file_number: Some(next),
                ..VersionEdit::default()
            };
            assert_refused(&mem, &[e]);
        }
        // A table numbered at or above the counter.
        let e = VersionEdit {
            added: vec![(3, table(st.next_file_number, "a", "b", 1, 2))],
            ..VersionEdit::default()
        };
        assert_refused(&mem, &[e]);
        // The counter must stay above numbers of tables that are gone, too.
        let (mem, st) = base();
        let n = st.next_file_number;
        let mut add = edit(&st);
        add.added.push((3, table(n, "a", "b", 1, 2)));
        let mut delete = edit(&st);
        delete.deleted.push((3, n));
        let back = VersionEdit {
            next_file_number: Some(n),
            ..VersionEdit::default()
        };
        assert_refused(&mem, &[add, delete, back]);
        // The live WAL's number is below the counter.
        let (mem, st) = base();
        let e = VersionEdit {
            log_number: Some(st.next_file_number),
            ..VersionEdit::default()
        };
        assert_refused(&mem, &[e]);
    }
}

/// A directory holding a file numbered near [`filename::MAX_FILE_NUMBER`] (found by the
/// `directory` fuzz target: an open wrote `MANIFEST-72057594037927936`, which the next open
/// could not read).
#[cfg(test)]
mod number_limit_tests {
    use super::*;
    use crate::fs::MemFs;

    fn options(mem: &MemFs) -> crate::Options {
        crate::Options::default()
            .auto_compaction(false)
            .file_system(Arc::new(mem.clone()))
    }

    #[test]
    fn numbers_near_the_largest_never_name_an_unreadable_manifest_or_table() {
        for below in 0..8u64 {
            let mem = MemFs::new();
            let db = crate::Db::open_with("/db", options(&mem)).unwrap();
            db.insert("k", "v").unwrap();
            db.close().unwrap();
            let n = filename::MAX_FILE_NUMBER - below;
            mem.write_file(&Path::new("/db").join(filename::temp_name(n)), b"")
                .unwrap();
            let db = match crate::Db::open_with("/db", options(&mem)) {
                Ok(db) => db,
                Err(e) => {
                    assert!(e.is_corruption(), "{below}: {e:?}");
                    continue;
                }
            };
            assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v"[..]));
            // Flushing needs numbers too: refused once they are used up.
            if let Err(e) = db.flush() {
                assert!(e.is_corruption(), "{below}: {e:?}");
            }
            db.close().unwrap();
            for name in mem.list(Path::new("/db")).unwrap() {
                // (A WAL's number is handed out in `db.rs`, unchecked for now.)
                if name.starts_with("MANIFEST-") || name.ends_with(".sst") {
                    assert!(filename::parse(&name).is_some(), "{below}: {name}");
                }
            }
            let current = read_current(&mem, Path::new("/db")).unwrap().unwrap();
            assert!(current <= filename::MAX_FILE_NUMBER);
            match crate::Db::open_with("/db", options(&mem)) {
                Ok(db) => assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v"[..])),
                Err(e) => assert!(e.is_corruption(), "{below}: {e:?}"),
            }
        }
    }
}
