//! [`MemFs`]: an in-memory file system that knows what a crash would keep.
//!
//! Files are inodes holding their bytes, how many of them were synced, and whether a failed
//! sync lost some (the "fsyncgate" case: a later sync succeeds, but the bytes that were dirty
//! at the failure never reach the disk). Each directory has two namespaces: the current one and
//! the durable one, which a directory sync copies from the current. A crash image keeps the
//! durable namespace (or the current one) and, per file, the synced bytes (optionally plus part
//! or all of the unsynced ones).
//!
//! A [`FaultPlan`] makes the n-th operation of chosen kinds fail; crash images can be recorded
//! every k operations while a workload runs.

use super::{FileIdentity, FileLock, FileSystem, RandomAccessFile, WritableFile};
use parking_lot::{Mutex, RwLock};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The kinds of file-system operation that [`MemFs`] counts and can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `create`
    Create,
    /// `open`
    Open,
    /// An append to a writable file. A failed append stores the first half of its bytes, as a
    /// torn write would.
    Write,
    /// A file sync. A failed sync loses the unsynced bytes for good, even if a later sync
    /// succeeds.
    Sync,
    /// A directory sync.
    SyncDir,
    /// `rename`
    Rename,
    /// `remove`
    Remove,
    /// A positioned read.
    Read,
    /// `list`
    List,
    /// `lock`
    Lock,
}

/// Which operation to fail: the `index`-th (0-based) operation whose kind is in `kinds`.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    /// Index among the operations of the chosen kinds, counted from when the plan is set.
    pub index: u64,
    /// The kinds counted; empty means every kind.
    pub kinds: Vec<OpKind>,
    /// If true, every matching operation from `index` on fails (a dead device); otherwise only
    /// that one.
    pub persistent: bool,
    /// If set, only operations on paths containing this string are counted (e.g. `".sst"`).
    pub path_contains: Option<String>,
}

impl FaultPlan {
    /// Fails the `index`-th operation of kind `kind` (once).
    pub fn nth(kind: OpKind, index: u64) -> FaultPlan {
        FaultPlan {
            index,
            kinds: vec![kind],
            persistent: false,
            path_contains: None,
        }
    }
}

/// What a crash image keeps of the bytes that were written but not synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnsyncedData {
    /// Nothing: a power loss with no luck.
    Drop,
    /// Everything: a process crash (the operating system still has the bytes).
    Keep,
    /// A random-length prefix of each file's unsynced bytes, chosen by `seed`.
    RandomPrefix {
        /// Seed of the choice.
        seed: u64,
    },
    /// The file keeps its written length, but from a random 4 KiB-aligned offset at or after
    /// the synced length its bytes read as zeros: the size reached the disk before the pages
    /// did, as ext4 and XFS can leave a file after a power loss.
    ZeroTail {
        /// Seed of the choice.
        seed: u64,
    },
    /// The file keeps its written length, and each 4 KiB page holding unsynced bytes reached
    /// the disk, did not, or was torn (only a prefix of its 512-byte sectors reached it),
    /// independently, as `seed` chooses; what did not reach the disk reads as zeros from the
    /// synced length on. Background writeback writes a file's dirty pages in no
    /// promised order (Linux resumes where its last pass stopped and wraps around), so a power
    /// loss can keep a later page of a log and lose an earlier one.
    LostPages {
        /// Seed of the choice.
        seed: u64,
    },
}

/// How to build a crash image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashImageOptions {
    /// What happens to unsynced file bytes.
    pub unsynced_data: UnsyncedData,
    /// If true, directory entries that were never made durable by `sync_dir` survive (as after
    /// a process crash); if false they are lost (as after a power loss).
    pub keep_unsynced_dir_entries: bool,
}

impl CrashImageOptions {
    /// Power loss: only synced bytes and synced directory entries remain.
    pub const POWER_LOSS: CrashImageOptions = CrashImageOptions {
        unsynced_data: UnsyncedData::Drop,
        keep_unsynced_dir_entries: false,
    };
    /// Process crash: everything the operating system was given remains.
    pub const PROCESS_CRASH: CrashImageOptions = CrashImageOptions {
        unsynced_data: UnsyncedData::Keep,
        keep_unsynced_dir_entries: true,
    };
}

#[derive(Debug, Default, Clone)]
struct Content {
    data: Vec<u8>,
    synced_len: usize,
    /// Set by a failed sync: bytes from here on can never become durable.
    lost_from: Option<usize>,
}

impl Content {
    fn durable_len(&self) -> usize {
        self.synced_len.min(self.lost_from.unwrap_or(usize::MAX))
    }

    /// A sync of this file failed: as on Linux, its dirty pages may have been dropped, so the
    /// bytes not yet synced can never become durable, even if a later sync succeeds.
    fn sync_failed(&mut self) {
        if self.lost_from.is_none() && self.synced_len < self.data.len() {
            self.lost_from = Some(self.synced_len);
        }
    }
}

#[derive(Debug)]
struct Inode {
    /// Unique in the process: a file made again under an old name (or copied into a crash
    /// image) is another inode ([`RandomAccessFile::identity`]).
    number: u64,
    content: RwLock<Content>,
}

impl Inode {
    fn with(content: Content) -> Inode {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Inode {
            number: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            content: RwLock::new(content),
        }
    }
}

impl Default for Inode {
    fn default() -> Inode {
        Inode::with(Content::default())
    }
}

type InodeRef = Arc<Inode>;

#[derive(Default)]
struct State {
    current: BTreeMap<PathBuf, InodeRef>,
    durable: BTreeMap<PathBuf, InodeRef>,
    dirs: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
    ops: u64,
    fault: Option<(FaultPlan, u64)>,
    faults_injected: u64,
    recorder: Option<Recorder>,
    tag: u64,
}

struct Recorder {
    every: u64,
    images: Vec<CrashPoint>,
    hook: Option<CrashHook>,
}

/// A copy of the file system taken before one operation (see [`MemFs::record_every`]).
#[derive(Clone, Debug)]
pub struct CrashPoint {
    /// Index of the operation the copy was taken before.
    pub op: u64,
    /// The tag set with [`MemFs::set_tag`] when the copy was taken.
    pub tag: u64,
    /// The copy, synced state included: call [`MemFs::crash_image`] on it.
    pub fs: MemFs,
}

/// Called with each crash point as it is taken (see [`MemFs::set_crash_hook`]).
pub type CrashHook = Arc<dyn Fn(CrashPoint) + Send + Sync>;

/// An in-memory [`FileSystem`] for tests: crash images, fault injection, operation counts.
/// Cloning a `MemFs` gives another handle to the same files.
#[derive(Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for MemFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state.lock();
        f.debug_struct("MemFs")
            .field("files", &st.current.len())
            .field("ops", &st.ops)
            .finish()
    }
}

fn injected(kind: OpKind) -> io::Error {
    io::Error::other(format!("injected fault on {kind:?}"))
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

impl MemFs {
    /// An empty file system.
    pub fn new() -> MemFs {
        MemFs::default()
    }

    /// Counts one operation: records a crash image if one is due, then decides whether the
    /// operation fails.
    fn begin(&self, kind: OpKind, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        let index = st.ops;
        st.ops += 1;
        let mut due: Option<(CrashPoint, Option<CrashHook>)> = None;
        if let Some(rec) = &st.recorder {
            if index.is_multiple_of(rec.every) {
                let point = CrashPoint {
                    op: index,
                    tag: st.tag,
                    fs: deep_clone(&st),
                };
                due = Some((point, rec.hook.clone()));
            }
        }
        match due {
            Some((point, Some(hook))) => {
                // Run the hook without holding the lock: it may take a while.
                drop(st);
                hook(point);
                st = self.state.lock();
            }
            Some((point, None)) => {
                if let Some(rec) = st.recorder.as_mut() {
                    rec.images.push(point);
                }
            }
            None => {}
        }
        let mut fail = false;
        if let Some((plan, seen)) = st.fault.as_mut() {
            let path_ok = plan
                .path_contains
                .as_deref()
                .is_none_or(|s| path.to_string_lossy().contains(s));
            if path_ok && (plan.kinds.is_empty() || plan.kinds.contains(&kind)) {
                let i = *seen;
                *seen += 1;
                fail = i == plan.index || (plan.persistent && i > plan.index);
            }
        }
        if fail {
            st.faults_injected += 1;
            return Err(injected(kind));
        }
        Ok(())
    }

    /// Sets (or clears) the fault to inject. Counting starts now.
    pub fn set_fault(&self, plan: Option<FaultPlan>) {
        self.state.lock().fault = plan.map(|p| (p, 0));
    }

    /// How many faults were injected so far.
    pub fn faults_injected(&self) -> u64 {
        self.state.lock().faults_injected
    }

    /// How many operations were counted so far.
    pub fn op_count(&self) -> u64 {
        self.state.lock().ops
    }

    /// From now on, keep a full copy of the file system (synced state included) before every
    /// `every`-th operation; [`take_recorded`](Self::take_recorded) returns them. `every` of 0
    /// stops recording.
    pub fn record_every(&self, every: u64) {
        self.state.lock().recorder = (every > 0).then(|| Recorder {
            every,
            images: Vec::new(),
            hook: None,
        });
    }

    /// Like [`record_every`](Self::record_every), but hands each copy to `hook` as it is
    /// taken (on the thread doing the operation) instead of keeping it.
    pub fn set_crash_hook(&self, every: u64, hook: Option<CrashHook>) {
        self.state.lock().recorder = (every > 0 && hook.is_some()).then(|| Recorder {
            every,
            images: Vec::new(),
            hook,
        });
    }

    /// Sets the tag stored with crash points from now on (a workload's progress, say).
    pub fn set_tag(&self, tag: u64) {
        self.state.lock().tag = tag;
    }

    /// The copies recorded so far. Call [`crash_image`](Self::crash_image) on a copy to see
    /// what a crash then would leave.
    pub fn take_recorded(&self) -> Vec<CrashPoint> {
        self.state
            .lock()
            .recorder
            .as_mut()
            .map(|r| std::mem::take(&mut r.images))
            .unwrap_or_default()
    }

    /// What a crash right now would leave: a new, independent `MemFs`.
    ///
    /// After a power loss (any mode but [`UnsyncedData::Keep`]) everything that survived is on
    /// the disk, so the copy counts every byte and entry it holds as synced. After a process
    /// crash (`Keep`) the operating system still holds the unsynced bytes and entries, and a
    /// later power loss can still drop them: the copy keeps what was synced and what was not.
    pub fn crash_image(&self, opts: CrashImageOptions) -> MemFs {
        let st = self.state.lock();
        let process_crash = opts.unsynced_data == UnsyncedData::Keep;
        let names = if opts.keep_unsynced_dir_entries {
            &st.current
        } else {
            &st.durable
        };
        let mut rng = match opts.unsynced_data {
            UnsyncedData::RandomPrefix { seed }
            | UnsyncedData::ZeroTail { seed }
            | UnsyncedData::LostPages { seed } => seed ^ 0x5851_f42d_4c95_7f2d,
            _ => 0,
        };
        let mut copies: HashMap<*const Inode, InodeRef> = HashMap::new();
        let mut copy_of = |inode: &InodeRef| -> InodeRef {
            copies
                .entry(Arc::as_ptr(inode))
                .or_insert_with(|| {
                    let c = inode.content.read();
                    let durable = c.durable_len();
                    let keep = match opts.unsynced_data {
                        UnsyncedData::Drop => durable,
                        UnsyncedData::Keep
                        | UnsyncedData::ZeroTail { .. }
                        | UnsyncedData::LostPages { .. } => c.data.len(),
                        UnsyncedData::RandomPrefix { .. } => {
                            let extra = c.data.len() - durable;
                            durable + (splitmix(&mut rng) % (extra as u64 + 1)) as usize
                        }
                    };
                    let mut data = c.data[..keep].to_vec();
                    let page_len = super::PAGE as usize;
                    if let UnsyncedData::ZeroTail { .. } = opts.unsynced_data {
                        let first = durable.div_ceil(page_len) * page_len;
                        if first < data.len() {
                            let pages = (data.len() - first).div_ceil(page_len) as u64;
                            let from =
                                first + (splitmix(&mut rng) % (pages + 1)) as usize * page_len;
                            for b in data.iter_mut().skip(from) {
                                *b = 0;
                            }
                        }
                    }
                    if let UnsyncedData::LostPages { .. } = opts.unsynced_data {
                        let mut page = durable / page_len * page_len;
                        while page < data.len() {
                            let end = (page + page_len).min(data.len());
                            // Lost (one in two), torn: a prefix of its sectors reached the
                            // disk (one in four), or written whole.
                            let r = splitmix(&mut rng);
                            let lost_from = match r % 4 {
                                0 | 1 => Some(page),
                                2 => {
                                    let sectors = super::PAGE / super::SECTOR;
                                    Some(page + (r / 4 % sectors) as usize * super::SECTOR as usize)
                                }
                                _ => None,
                            };
                            if let Some(from) = lost_from {
                                data[from.max(durable).min(end)..end].fill(0);
                            }
                            page = end;
                        }
                    }
                    let content = if process_crash {
                        Content {
                            data,
                            synced_len: c.synced_len,
                            lost_from: c.lost_from,
                        }
                    } else {
                        Content {
                            synced_len: data.len(),
                            data,
                            lost_from: None,
                        }
                    };
                    Arc::new(Inode::with(content))
                })
                .clone()
        };
        let mut out = State {
            dirs: st.dirs.clone(),
            ..State::default()
        };
        for (path, inode) in names {
            out.current.insert(path.clone(), copy_of(inode));
        }
        if process_crash {
            for (path, inode) in &st.durable {
                out.durable.insert(path.clone(), copy_of(inode));
            }
        } else {
            out.durable = out.current.clone();
        }
        MemFs {
            state: Arc::new(Mutex::new(out)),
        }
    }

    /// The names of the files in the durable namespace that differ from the current one, for
    /// tests of the engine's directory syncs.
    pub fn unsynced_dir_entries(&self) -> Vec<PathBuf> {
        let st = self.state.lock();
        let mut out = Vec::new();
        for (p, i) in &st.current {
            match st.durable.get(p) {
                Some(d) if Arc::ptr_eq(d, i) => {}
                _ => out.push(p.clone()),
            }
        }
        for p in st.durable.keys() {
            if !st.current.contains_key(p) {
                out.push(p.clone());
            }
        }
        out
    }

    /// The current bytes of `path` (for tests that corrupt files).
    ///
    /// Errors: `NotFound` if there is no such file.
    pub fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let st = self.state.lock();
        let inode = st.current.get(path).ok_or_else(|| not_found(path))?;
        let c = inode.content.read();
        Ok(c.data.clone())
    }

    /// Replaces the bytes of `path` as if written and synced (for tests that corrupt files).
    /// An existing file is changed in place, so open readers see the new bytes, as with bit
    /// rot under an open file descriptor. Never fails (the `io::Result` matches
    /// [`FileSystem`]'s methods); the parent directory need not exist.
    pub fn write_file(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let mut st = self.state.lock();
        if let Some(inode) = st.current.get(path).cloned() {
            {
                let mut c = inode.content.write();
                c.data = data.to_vec();
                c.synced_len = data.len();
                c.lost_from = None;
            }
            st.durable.insert(path.to_path_buf(), inode);
            return Ok(());
        }
        let inode = Arc::new(Inode::with(Content {
            data: data.to_vec(),
            synced_len: data.len(),
            lost_from: None,
        }));
        st.current.insert(path.to_path_buf(), inode.clone());
        st.durable.insert(path.to_path_buf(), inode);
        Ok(())
    }

    fn parent_exists(st: &State, path: &Path) -> bool {
        match path.parent() {
            None => true,
            Some(p) if p.as_os_str().is_empty() => true,
            Some(p) => st.dirs.contains(p),
        }
    }
}

fn deep_clone(st: &State) -> MemFs {
    let mut copies: HashMap<*const Inode, InodeRef> = HashMap::new();
    let mut copy_of = |inode: &InodeRef| {
        copies
            .entry(Arc::as_ptr(inode))
            .or_insert_with(|| Arc::new(Inode::with(inode.content.read().clone())))
            .clone()
    };
    let mut out = State {
        dirs: st.dirs.clone(),
        ..State::default()
    };
    for (p, i) in &st.current {
        out.current.insert(p.clone(), copy_of(i));
    }
    for (p, i) in &st.durable {
        out.durable.insert(p.clone(), copy_of(i));
    }
    MemFs {
        state: Arc::new(Mutex::new(out)),
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct MemWritable {
    fs: MemFs,
    inode: InodeRef,
    path: PathBuf,
}

impl fmt::Debug for MemWritable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemWritable")
            .field("len", &self.len())
            .finish()
    }
}

impl WritableFile for MemWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        if let Err(e) = self.fs.begin(OpKind::Write, &self.path) {
            let torn = &data[..data.len() / 2];
            self.inode.content.write().data.extend_from_slice(torn);
            return Err(e);
        }
        self.inode.content.write().data.extend_from_slice(data);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        if let Err(e) = self.fs.begin(OpKind::Sync, &self.path) {
            self.inode.content.write().sync_failed();
            return Err(e);
        }
        let mut c = self.inode.content.write();
        c.synced_len = c.data.len();
        Ok(())
    }

    fn len(&self) -> u64 {
        self.inode.content.read().data.len() as u64
    }
}

struct MemReadable {
    fs: MemFs,
    inode: InodeRef,
    path: PathBuf,
}

impl fmt::Debug for MemReadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemReadable")
            .field("len", &self.len())
            .finish()
    }
}

impl RandomAccessFile for MemReadable {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.fs.begin(OpKind::Read, &self.path)?;
        let c = self.inode.content.read();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.checked_add(buf.len());
        match end {
            Some(end) if end <= c.data.len() => {
                buf.copy_from_slice(&c.data[start..end]);
                Ok(())
            }
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past end of file",
            )),
        }
    }

    fn len(&self) -> u64 {
        self.inode.content.read().data.len() as u64
    }

    fn identity(&self) -> Option<FileIdentity> {
        Some(FileIdentity {
            device: 0,
            inode: self.inode.number,
            modified_nanos: 0,
        })
    }
}

struct MemLock {
    fs: MemFs,
    path: PathBuf,
}

impl fmt::Debug for MemLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemLock").field("path", &self.path).finish()
    }
}

impl FileLock for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        self.fs.state.lock().locks.remove(&self.path);
    }
}

/// `path.parent() == Some(dir)`, answered by comparing bytes when `path` is `dir`, one `/`
/// and a plain name (what `dir.join(name)` gives), and by comparing components otherwise.
/// `sync_dir` and `list` ask this of every entry, and the component comparison made a tree
/// of a few thousand tables spend most of its time in them.
fn in_dir(path: &Path, dir: &Path) -> bool {
    let (p, d) = (
        path.as_os_str().as_encoded_bytes(),
        dir.as_os_str().as_encoded_bytes(),
    );
    if let Some(name) = p.strip_prefix(d).and_then(|rest| rest.strip_prefix(b"/")) {
        let plain = !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/');
        if plain && !d.is_empty() && !d.ends_with(b"/") && !d.ends_with(b"/.") && d != b"." {
            return true;
        }
    }
    path.parent() == Some(dir)
}

impl FileSystem for MemFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.begin(OpKind::Create, path)?;
        let mut st = self.state.lock();
        if !Self::parent_exists(&st, path) {
            return Err(not_found(path.parent().unwrap_or(path)));
        }
        let inode = InodeRef::default();
        st.current.insert(path.to_path_buf(), inode.clone());
        Ok(Box::new(MemWritable {
            fs: self.clone(),
            inode,
            path: path.to_path_buf(),
        }))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        self.begin(OpKind::Open, path)?;
        let st = self.state.lock();
        let inode = st.current.get(path).ok_or_else(|| not_found(path))?.clone();
        Ok(Arc::new(MemReadable {
            fs: self.clone(),
            inode,
            path: path.to_path_buf(),
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.begin(OpKind::Rename, from)?;
        let mut st = self.state.lock();
        let inode = st.current.remove(from).ok_or_else(|| not_found(from))?;
        st.current.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.begin(OpKind::Remove, path)?;
        let mut st = self.state.lock();
        st.current.remove(path).ok_or_else(|| not_found(path))?;
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.begin(OpKind::List, dir)?;
        let st = self.state.lock();
        if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(st
            .current
            .keys()
            .filter(|p| in_dir(p, dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        let mut d = Some(dir);
        while let Some(p) = d {
            if p.as_os_str().is_empty() {
                break;
            }
            st.dirs.insert(p.to_path_buf());
            d = p.parent();
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.begin(OpKind::SyncDir, dir)?;
        let mut guard = self.state.lock();
        let st = &mut *guard;
        // The durable entries of `dir` become its current ones. Both maps are in the same
        // order, so one merge finds the few entries that differ (a sync usually follows one
        // create or rename) without re-inserting thousands of unchanged ones.
        let mut cur = st.current.iter().filter(|(p, _)| in_dir(p, dir)).peekable();
        let mut dur = st.durable.iter().filter(|(p, _)| in_dir(p, dir)).peekable();
        let (mut gone, mut put) = (Vec::new(), Vec::new());
        loop {
            let order = match (cur.peek(), dur.peek()) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((c, _)), Some((d, _))) => c.cmp(d),
            };
            match order {
                Ordering::Less => put.extend(cur.next()),
                Ordering::Greater => gone.extend(dur.next()),
                Ordering::Equal => {
                    if let (Some(c), Some((_, di))) = (cur.next(), dur.next()) {
                        if !Arc::ptr_eq(c.1, di) {
                            put.push(c);
                        }
                    }
                }
            }
        }
        let gone: Vec<PathBuf> = gone.into_iter().map(|(p, _)| p.clone()).collect();
        let put: Vec<(PathBuf, InodeRef)> = put
            .into_iter()
            .map(|(p, i)| (p.clone(), i.clone()))
            .collect();
        for p in &gone {
            st.durable.remove(p);
        }
        st.durable.extend(put);
        Ok(())
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        if let Err(e) = self.begin(OpKind::Sync, path) {
            if let Some(inode) = self.state.lock().current.get(path) {
                inode.content.write().sync_failed();
            }
            return Err(e);
        }
        let st = self.state.lock();
        let inode = st.current.get(path).ok_or_else(|| not_found(path))?;
        let mut c = inode.content.write();
        c.synced_len = c.data.len();
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.begin(OpKind::Lock, path)?;
        let mut st = self.state.lock();
        if !st.locks.insert(path.to_path_buf()) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "lock held elsewhere",
            ));
        }
        st.current.entry(path.to_path_buf()).or_default();
        Ok(Box::new(MemLock {
            fs: self.clone(),
            path: path.to_path_buf(),
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        let st = self.state.lock();
        st.current.contains_key(path) || st.dirs.contains(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (MemFs, PathBuf) {
        let fs = MemFs::new();
        let dir = PathBuf::from("/db");
        fs.create_dir_all(&dir).unwrap();
        (fs, dir)
    }

    #[test]
    fn in_dir_agrees_with_comparing_components() {
        let dirs = [
            "/db", "/db/", "db", "/db/.", ".", "/", "", "/a//b", "/a/..", "/d",
        ];
        let names = ["x", "x/y", ".", "..", "", "/x", "//x", "x/", "000012.sst"];
        for d in dirs {
            for n in names {
                for p in [format!("{d}/{n}"), format!("{d}{n}"), n.to_string()] {
                    let (p, d) = (Path::new(&p), Path::new(d));
                    assert_eq!(in_dir(p, d), p.parent() == Some(d), "{p:?} in {d:?}");
                }
            }
        }
        assert!(in_dir(Path::new("/db/000012.sst"), Path::new("/db")));
        assert!(!in_dir(Path::new("/dbx/1.sst"), Path::new("/db")));
    }

    #[test]
    fn power_loss_keeps_only_synced_bytes_and_synced_entries() {
        let (fs, dir) = setup();
        let a = dir.join("a");
        let mut w = fs.create(&a).unwrap();
        w.append(b"synced").unwrap();
        w.sync().unwrap();
        w.append(b"-unsynced").unwrap();
        // Directory entry of `a` not synced yet: a power loss loses the file.
        let img = fs.crash_image(CrashImageOptions::POWER_LOSS);
        assert!(!img.exists(&a));
        fs.sync_dir(&dir).unwrap();
        let img = fs.crash_image(CrashImageOptions::POWER_LOSS);
        assert_eq!(img.read_file(&a).unwrap(), b"synced");
        let img = fs.crash_image(CrashImageOptions::PROCESS_CRASH);
        assert_eq!(img.read_file(&a).unwrap(), b"synced-unsynced");
        // A process crash does not make anything durable: a later power loss still drops
        // the unsynced bytes.
        let later = img.crash_image(CrashImageOptions::POWER_LOSS);
        assert_eq!(later.read_file(&a).unwrap(), b"synced");
    }

    #[test]
    fn sync_dir_makes_exactly_the_current_entries_of_that_directory_durable() {
        let (fs, dir) = setup();
        let other = PathBuf::from("/other");
        fs.create_dir_all(&other).unwrap();
        let write = |p: &Path, bytes: &[u8]| {
            let mut w = fs.create(p).unwrap();
            w.append(bytes).unwrap();
            w.sync().unwrap();
        };
        for name in ["a", "b", "c"] {
            write(&dir.join(name), name.as_bytes());
        }
        write(&other.join("o"), b"o");
        fs.sync_dir(&dir).unwrap();
        fs.sync_dir(&other).unwrap();
        // Removed, replaced by a new file, renamed, added; and a change in another directory.
        fs.remove(&dir.join("a")).unwrap();
        write(&dir.join("b"), b"new b");
        fs.rename(&dir.join("c"), &dir.join("d")).unwrap();
        write(&dir.join("e"), b"e");
        fs.remove(&other.join("o")).unwrap();
        fs.sync_dir(&dir).unwrap();
        let img = fs.crash_image(CrashImageOptions::POWER_LOSS);
        let mut names = img.list(&dir).unwrap();
        names.sort();
        assert_eq!(names, ["b", "d", "e"]);
        assert_eq!(img.read_file(&dir.join("b")).unwrap(), b"new b");
        assert_eq!(img.read_file(&dir.join("d")).unwrap(), b"c");
        assert_eq!(img.read_file(&other.join("o")).unwrap(), b"o");
        assert_eq!(fs.unsynced_dir_entries(), [other.join("o")]);
    }

    #[test]
    fn unsynced_rename_reverts_on_power_loss() {
        let (fs, dir) = setup();
        let tmp = dir.join("tmp");
        let mut w = fs.create(&tmp).unwrap();
        w.append(b"x").unwrap();
        w.sync().unwrap();
        fs.sync_dir(&dir).unwrap();
        fs.rename(&tmp, &dir.join("CURRENT")).unwrap();
        let img = fs.crash_image(CrashImageOptions::POWER_LOSS);
        assert!(img.exists(&tmp));
        assert!(!img.exists(&dir.join("CURRENT")));
        fs.sync_dir(&dir).unwrap();
        let img = fs.crash_image(CrashImageOptions::POWER_LOSS);
        assert!(!img.exists(&tmp));
        assert_eq!(img.read_file(&dir.join("CURRENT")).unwrap(), b"x");
    }

    #[test]
    fn failed_sync_loses_dirty_bytes_even_if_a_retry_succeeds() {
        let (fs, dir) = setup();
        let a = dir.join("a");
        let mut w = fs.create(&a).unwrap();
        fs.sync_dir(&dir).unwrap();
        w.append(b"one").unwrap();
        w.sync().unwrap();
        w.append(b"two").unwrap();
        fs.set_fault(Some(FaultPlan::nth(OpKind::Sync, 0)));
        assert!(w.sync().is_err());
        assert_eq!(fs.faults_injected(), 1);
        w.sync().unwrap(); // the retry "succeeds"
        let img = fs.crash_image(CrashImageOptions::POWER_LOSS);
        assert_eq!(img.read_file(&a).unwrap(), b"one");
    }

    #[test]
    fn failed_append_is_torn() {
        let (fs, dir) = setup();
        let a = dir.join("a");
        let mut w = fs.create(&a).unwrap();
        fs.set_fault(Some(FaultPlan::nth(OpKind::Write, 1)));
        w.append(b"abcd").unwrap();
        assert!(w.append(b"efgh").is_err());
        assert_eq!(fs.read_file(&a).unwrap(), b"abcdef");
    }

    #[test]
    fn zero_tail_keeps_the_size_and_zeroes_unsynced_pages() {
        let (fs, dir) = setup();
        let a = dir.join("a");
        let mut w = fs.create(&a).unwrap();
        fs.sync_dir(&dir).unwrap();
        w.append(&[1u8; 5000]).unwrap();
        w.sync().unwrap();
        w.append(&[2u8; 10000]).unwrap();
        let mut zeroed = BTreeSet::new();
        for seed in 0..50 {
            let img = fs.crash_image(CrashImageOptions {
                unsynced_data: UnsyncedData::ZeroTail { seed },
                keep_unsynced_dir_entries: false,
            });
            let data = img.read_file(&a).unwrap();
            assert_eq!(data.len(), 15000);
            assert!(
                data[..5000].iter().all(|&b| b == 1),
                "synced bytes are kept"
            );
            let first_zero = data.iter().position(|&b| b == 0).unwrap_or(15000);
            assert!(first_zero == 15000 || first_zero % 4096 == 0);
            zeroed.insert(first_zero);
        }
        assert!(zeroed.len() >= 3, "{zeroed:?}");
    }

    #[test]
    fn sync_file_makes_an_existing_files_bytes_durable() {
        let (fs, dir) = setup();
        let a = dir.join("a");
        let mut w = fs.create(&a).unwrap();
        fs.sync_dir(&dir).unwrap();
        w.append(b"page cache only").unwrap();
        drop(w);
        fs.sync_file(&a).unwrap();
        let img = fs.crash_image(CrashImageOptions::POWER_LOSS);
        assert_eq!(img.read_file(&a).unwrap(), b"page cache only");
    }

    #[test]
    fn a_failed_sync_by_path_loses_dirty_bytes_even_if_a_retry_succeeds() {
        let (fs, dir) = setup();
        let a = dir.join("a");
        let mut w = fs.create(&a).unwrap();
        fs.sync_dir(&dir).unwrap();
        w.append(b"one").unwrap();
        w.sync().unwrap();
        w.append(b"two").unwrap();
        drop(w);
        fs.set_fault(Some(FaultPlan::nth(OpKind::Sync, 0)));
        assert!(fs.sync_file(&a).is_err());
        assert_eq!(fs.faults_injected(), 1);
        fs.sync_file(&a).unwrap(); // the retry "succeeds"
        let img = fs.crash_image(CrashImageOptions::POWER_LOSS);
        assert_eq!(img.read_file(&a).unwrap(), b"one");
    }

    #[test]
    fn random_prefix_keeps_between_synced_and_written() {
        let (fs, dir) = setup();
        let a = dir.join("a");
        let mut w = fs.create(&a).unwrap();
        fs.sync_dir(&dir).unwrap();
        w.append(b"0123").unwrap();
        w.sync().unwrap();
        w.append(b"456789").unwrap();
        let mut seen = BTreeSet::new();
        for seed in 0..200 {
            let img = fs.crash_image(CrashImageOptions {
                unsynced_data: UnsyncedData::RandomPrefix { seed },
                keep_unsynced_dir_entries: false,
            });
            let data = img.read_file(&a).unwrap();
            assert!(data.len() >= 4 && b"0123456789".starts_with(&data));
            seen.insert(data.len());
        }
        assert!(seen.len() > 3, "prefix lengths should vary: {seen:?}");
    }

    #[test]
    fn recorder_copies_state_before_operations() {
        let (fs, dir) = setup();
        fs.set_tag(5);
        fs.record_every(1);
        let mut w = fs.create(&dir.join("a")).unwrap();
        w.append(b"x").unwrap();
        let rec = fs.take_recorded();
        assert_eq!(rec.len(), 2);
        assert!(!rec[0].fs.exists(&dir.join("a")));
        assert_eq!(rec[0].tag, 5);
        assert_eq!(rec[1].fs.read_file(&dir.join("a")).unwrap(), b"");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        fs.set_crash_hook(1, Some(Arc::new(move |p: CrashPoint| s2.lock().push(p.op))));
        w.append(b"y").unwrap();
        w.sync().unwrap();
        assert_eq!(seen.lock().len(), 2);
        assert!(fs.take_recorded().is_empty());
    }

    #[test]
    fn locks_are_exclusive_until_dropped() {
        let (fs, dir) = setup();
        let l = fs.lock(&dir.join("LOCK")).unwrap();
        assert_eq!(
            fs.lock(&dir.join("LOCK")).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        drop(l);
        fs.lock(&dir.join("LOCK")).unwrap();
    }

    #[test]
    fn reads_past_end_and_missing_files_are_errors() {
        let (fs, dir) = setup();
        assert_eq!(
            fs.open(&dir.join("nope")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let mut w = fs.create(&dir.join("a")).unwrap();
        w.append(b"abc").unwrap();
        let r = fs.open(&dir.join("a")).unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(
            r.read_exact_at(&mut buf, 0).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        assert_eq!(
            r.read_exact_at(&mut buf, u64::MAX).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        assert!(fs.create(Path::new("/nodir/x")).is_err());
    }
}
