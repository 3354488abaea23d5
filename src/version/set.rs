//! [`VersionSet`]: the current version, the manifest that records how it came to be, and the
//! counters persisted with it (next file number, last sequence, live WAL).
//!
//! The manifest `MANIFEST-NNNNNN` is a record log (see [`crate::record`]) of [`VersionEdit`]s;
//! its first record is a snapshot of the whole state. `CURRENT` names the live manifest and is
//! replaced atomically (write a temporary, sync, rename, sync the directory). An edit counts
//! once it is synced; a torn last record is an edit that never committed and is ignored.

use super::edit::{FileMeta, VersionEdit, NUM_LEVELS};
use super::{TableEnv, TableHandle, Version};
use crate::error::{io_context, Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::{self, FileSystem};
use crate::record::{self, RecordReader, RecordWriter};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A manifest larger than this is rewritten as a fresh snapshot.
const MAX_MANIFEST_BYTES: u64 = 16 << 20;

#[derive(Debug)]
struct ManifestWriter {
    log: RecordWriter,
    number: u64,
    path: PathBuf,
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

/// Reads `CURRENT` and returns the number of the live manifest; `Ok(None)` if there is no
/// `CURRENT`.
pub(crate) fn read_current(fs: &dyn FileSystem, dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(filename::CURRENT);
    if !fs.exists(&path) {
        return Ok(None);
    }
    let contents = fs::read_all(fs, &path).map_err(|e| io_context("read", &path, e))?;
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
    while let Some(rec) = reader.next()? {
        let edit = VersionEdit::decode(&rec.payload)
            .map_err(|d| Error::corruption(&path, rec.offset, format!("manifest record: {d}")))?;
        apply_to_state(&mut st, &edit);
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

fn apply_to_state(st: &mut ManifestState, edit: &VersionEdit) {
    if let Some(n) = edit.log_number {
        st.log_number = n;
    }
    if let Some(n) = edit.next_file_number {
        st.next_file_number = n;
    }
    if let Some(n) = edit.last_sequence {
        st.last_sequence = st.last_sequence.max(n);
    }
    for (l, k) in &edit.compact_pointers {
        st.compact_pointers[*l as usize] = k.clone();
    }
    for (l, n) in &edit.deleted {
        st.levels[*l as usize].remove(n);
    }
    for (l, m) in &edit.added {
        st.levels[*l as usize].insert(m.number, m.clone());
    }
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
        let max_table_seq = version
            .levels
            .iter()
            .flatten()
            .map(|t| t.meta.max_seq)
            .max()
            .unwrap_or(0);
        let max_number = version
            .levels
            .iter()
            .flatten()
            .map(|t| t.number())
            .chain([st.manifest_number, st.log_number])
            .max()
            .unwrap_or(0);
        VersionSet {
            fs,
            dir: dir.to_path_buf(),
            manifest: None,
            current: Arc::new(version),
            log_number: st.log_number,
            last_sequence: st.last_sequence.max(max_table_seq),
            next_file: Arc::new(AtomicU64::new(st.next_file_number.max(max_number + 1))),
            compact_pointers: st.compact_pointers.clone(),
            failed: None,
            env: env.clone(),
        }
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
        self.next_file.fetch_max(n + 1, Ordering::SeqCst);
    }

    pub(crate) fn compact_pointer(&self, level: usize) -> &[u8] {
        &self.compact_pointers[level]
    }

    pub(crate) fn manifest_number(&self) -> Option<u64> {
        self.manifest.as_ref().map(|m| m.number)
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
            next_file_number: Some(self.next_file.load(Ordering::SeqCst)),
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

    fn write_new_manifest_inner(&mut self) -> Result<()> {
        let number = self.new_file_number();
        let path = self.dir.join(filename::manifest_name(number));
        let file = self
            .fs
            .create(&path)
            .map_err(|e| io_context("create", &path, e))?;
        let mut log = RecordWriter::new(file);
        let snapshot = record::frame(&self.snapshot_edit().encode(), number);
        log.append_framed(&snapshot)
            .map_err(|e| io_context("write", &path, e))?;
        log.sync().map_err(|e| io_context("sync", &path, e))?;
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| io_context("sync directory", &self.dir, e))?;
        let tmp = filename::temp_name(self.new_file_number());
        let contents = format!("{}\n", filename::manifest_name(number));
        fs::write_atomic(
            self.fs.as_ref(),
            &self.dir,
            &tmp,
            filename::CURRENT,
            contents.as_bytes(),
        )
        .map_err(|e| io_context("install CURRENT for", &path, e))?;
        if let Some(old) = self.manifest.replace(ManifestWriter { log, number, path }) {
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
        let next = self.current.apply(&edit, opened)?;
        edit.next_file_number = Some(self.next_file.load(Ordering::SeqCst));
        let last = edit.last_sequence.unwrap_or(0).max(self.last_sequence);
        edit.last_sequence = Some(last);
        let m = self
            .manifest
            .as_mut()
            .ok_or_else(|| Error::other("no manifest is open for writing").into_poison())?;
        let framed = record::frame(&edit.encode(), m.number);
        let written = m
            .log
            .append_framed(&framed)
            .and_then(|()| m.log.sync())
            .map_err(|e| io_context("append to manifest", &m.path, e));
        if let Err(e) = written {
            self.failed = Some(e.clone());
            return Err(e);
        }
        let oversized = m.log.len() > MAX_MANIFEST_BYTES;
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
        mem.write_file(&dir.join("CURRENT"), b"MANIFEST-000009\n")
            .unwrap();
        assert_eq!(read_current(fs.as_ref(), &dir).unwrap(), Some(9));
        assert!(replay_manifest(fs.as_ref(), &dir, 9)
            .unwrap_err()
            .is_corruption());
    }
}
