//! [`HookedFs`]: a `MemFs` that calls a test's hook before every open, every remove and every
//! directory sync (to count opens, slow one file down, record which thread removed a file, or
//! hold a directory sync while the test looks at what else can run).
#![allow(dead_code)]

use siltdb::fs::{FileLock, FileSystem, MemFs, RandomAccessFile, WritableFile};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Called with the path before the operation runs.
pub type Hook = Arc<dyn Fn(&Path) + Send + Sync>;

#[derive(Clone)]
pub struct HookedFs {
    pub inner: MemFs,
    pub on_open: Option<Hook>,
    pub on_remove: Option<Hook>,
    pub on_sync_dir: Option<Hook>,
}

impl std::fmt::Debug for HookedFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookedFs").finish_non_exhaustive()
    }
}

impl FileSystem for HookedFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.inner.create(path)
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        if let Some(h) = &self.on_open {
            h(path);
        }
        self.inner.open(path)
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
        self.inner.lock(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
}
