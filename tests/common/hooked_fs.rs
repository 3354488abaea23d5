//! [`HookedFs`]: a `MemFs` that calls a test's hook before every open, every remove, every
//! directory sync and every fsync of a file being written (to count opens, slow one file down,
//! record which thread removed a file, hold a directory sync while the test looks at what else
//! can run, or make fsyncs as slow as a disk's).
#![allow(dead_code)]

use siltdb::fs::{FileLock, FileSystem, MemFs, RandomAccessFile, WritableFile};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Called with the path before the operation runs.
pub type Hook = Arc<dyn Fn(&Path) + Send + Sync>;

/// Opens a file in the test's own way (to fail opens, or wrap the file), given the path and
/// the `MemFs` underneath.
pub type OpenWith =
    Arc<dyn Fn(&Path, &MemFs) -> io::Result<Arc<dyn RandomAccessFile>> + Send + Sync>;

#[derive(Clone)]
pub struct HookedFs {
    pub inner: MemFs,
    pub on_open: Option<Hook>,
    pub on_remove: Option<Hook>,
    pub on_sync_dir: Option<Hook>,
    /// Before every `WritableFile::sync` (the WAL's fsyncs, a table's before it is named).
    pub on_sync: Option<Hook>,
    /// Before every `lock` (an open for writing, a destroy).
    pub on_lock: Option<Hook>,
    /// Instead of `MemFs::open` (after `on_open`).
    pub open_with: Option<OpenWith>,
}

impl HookedFs {
    /// `inner` with no hooks: set the ones a test needs with struct update syntax,
    /// `HookedFs { on_open: Some(..), ..HookedFs::new(mem) }`.
    pub fn new(inner: MemFs) -> HookedFs {
        HookedFs {
            inner,
            on_open: None,
            on_remove: None,
            on_sync_dir: None,
            on_sync: None,
            on_lock: None,
            open_with: None,
        }
    }
}

impl std::fmt::Debug for HookedFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookedFs").finish_non_exhaustive()
    }
}

impl FileSystem for HookedFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let inner = self.inner.create(path)?;
        Ok(match &self.on_sync {
            Some(hook) => Box::new(HookedWrite {
                inner,
                path: path.to_path_buf(),
                hook: hook.clone(),
            }),
            None => inner,
        })
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        if let Some(h) = &self.on_open {
            h(path);
        }
        match &self.open_with {
            Some(open) => open(path, &self.inner),
            None => self.inner.open(path),
        }
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        if let Some(h) = &self.on_remove {
            h(path);
        }
        self.inner.remove(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if let Some(h) = &self.on_sync_dir {
            h(dir);
        }
        self.inner.sync_dir(dir)
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_file(path)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        if let Some(h) = &self.on_lock {
            h(path);
        }
        self.inner.lock(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
}

/// A file being written whose `sync` calls the hook first.
struct HookedWrite {
    inner: Box<dyn WritableFile>,
    path: std::path::PathBuf,
    hook: Hook,
}

impl std::fmt::Debug for HookedWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookedWrite")
            .field("path", &self.path)
            .finish()
    }
}

impl WritableFile for HookedWrite {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.inner.append(data)
    }
    fn sync(&mut self) -> io::Result<()> {
        (self.hook)(&self.path);
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

/// A [`HookedFs`] over a new `MemFs` that, once `armed` is set, holds the first directory
/// fsync made by the thread named `thread` (a memtable rotation's is the seal thread's,
/// `siltdb-wal-seal`):
/// it sends on `entered`'s channel, then waits for a message on `release` (or 20 s).
pub struct HeldDirSync {
    pub fs: HookedFs,
    pub armed: Arc<std::sync::atomic::AtomicBool>,
    pub entered: std::sync::mpsc::Receiver<()>,
    pub release: std::sync::mpsc::Sender<()>,
}

pub fn hold_dir_sync_of(thread: &'static str) -> HeldDirSync {
    let (hook, armed, entered, release) =
        hold_once(move || std::thread::current().name() == Some(thread));
    let fs = HookedFs {
        on_sync_dir: Some(hook),
        ..HookedFs::new(siltdb::fs::MemFs::new())
    };
    HeldDirSync {
        fs,
        armed,
        entered,
        release,
    }
}

/// A hook that, once `armed` is set, holds the first call for which `mine()` is true: it
/// sends on `entered`'s channel, then waits for a message on `release` (or 20 s).
pub fn hold_once(
    mine: impl Fn() -> bool + Send + Sync + 'static,
) -> (
    Hook,
    Arc<std::sync::atomic::AtomicBool>,
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Mutex};
    let armed = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (release, release_rx) = mpsc::channel::<()>();
    let (entered_tx, release_rx) = (Mutex::new(entered_tx), Mutex::new(release_rx));
    let hook_armed = armed.clone();
    let hook: Hook = Arc::new(move |_: &Path| {
        if mine() && hook_armed.swap(false, Ordering::SeqCst) {
            entered_tx.lock().unwrap().send(()).unwrap();
            let _ = release_rx
                .lock()
                .unwrap()
                .recv_timeout(std::time::Duration::from_secs(20));
        }
    });
    (hook, armed, entered, release)
}

/// A [`HookedFs`] whose file creations call `on_create` first (with the new file's path).
#[derive(Clone)]
pub struct CreateHookedFs {
    pub inner: HookedFs,
    pub on_create: Hook,
}

impl std::fmt::Debug for CreateHookedFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateHookedFs").finish_non_exhaustive()
    }
}

impl FileSystem for CreateHookedFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        (self.on_create)(path);
        self.inner.create(path)
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        self.inner.open(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_file(path)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.inner.lock(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
}

/// A [`CreateHookedFs`] over a new `MemFs` that, once `armed` is set, holds the first creation
/// of a WAL made by the thread named `thread` (a memtable rotation's, for a writer thread,
/// which creates the next WAL before it takes its group): it sends on `entered`'s channel,
/// then waits for a message on `release` (or 20 s).
pub struct HeldWalCreate {
    pub fs: CreateHookedFs,
    pub armed: Arc<std::sync::atomic::AtomicBool>,
    pub entered: std::sync::mpsc::Receiver<()>,
    pub release: std::sync::mpsc::Sender<()>,
}

pub fn hold_wal_create_of(thread: &'static str) -> HeldWalCreate {
    let (hook, armed, entered, release) =
        hold_once(move || std::thread::current().name() == Some(thread));
    let on_create: Hook = Arc::new(move |path: &Path| {
        if path.extension().is_some_and(|e| e == "wal") {
            hook(path);
        }
    });
    HeldWalCreate {
        fs: CreateHookedFs {
            inner: HookedFs::new(siltdb::fs::MemFs::new()),
            on_create,
        },
        armed,
        entered,
        release,
    }
}

/// A [`HookedFs`] over a new `MemFs` that, once `armed` is set, holds the first fsync of a file
/// being written whose name ends in `.{ext}` (`wal`: after unsynced writes, the old WAL's fsync
/// in the seal of a full memtable's WAL, on whichever thread runs it; `sst`: a flush's table):
/// it sends on `entered`'s channel, then waits for a message on `release` (or 20 s).
pub fn hold_sync_of_a(ext: &'static str) -> HeldDirSync {
    let (hook, armed, entered, release) = hold_once(|| true);
    let on_sync: Hook = Arc::new(move |path: &Path| {
        if path.extension().is_some_and(|e| e == ext) {
            hook(path);
        }
    });
    HeldDirSync {
        fs: HookedFs {
            on_sync: Some(on_sync),
            ..HookedFs::new(siltdb::fs::MemFs::new())
        },
        armed,
        entered,
        release,
    }
}
