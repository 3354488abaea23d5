//! 2,000 tables behind a table cache of 64 descriptors: every key reads right, the cache never
//! holds more than 64 files open, readers that need a closed table together open it once
//! (single flight), and writes and compactions go on.
mod common;

use parking_lot::Mutex;
use siltdb::fs::{FileLock, FileSystem, MemFs, RandomAccessFile, WritableFile};
use siltdb::Db;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// A `MemFs` that counts opens per file and can make opens of one file slow.
#[derive(Debug, Clone, Default)]
struct CountingFs {
    inner: MemFs,
    opens: Arc<Mutex<HashMap<PathBuf, u64>>>,
    slow: Arc<Mutex<Option<PathBuf>>>,
}

impl CountingFs {
    fn opens_of(&self, p: &Path) -> u64 {
        self.opens.lock().get(p).copied().unwrap_or(0)
    }
}

impl FileSystem for CountingFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.inner.create(path)
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        *self.opens.lock().entry(path.to_path_buf()).or_default() += 1;
        if self.slow.lock().as_deref() == Some(path) {
            // Long enough for every waiting reader to pile up behind this open.
            std::thread::sleep(Duration::from_millis(50));
        }
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

const TABLES: u32 = 2000;
const KEYS_PER_TABLE: u32 = 3;

fn key(i: u32) -> String {
    format!("key{i:06}")
}

#[test]
fn two_thousand_tables_with_64_descriptors() {
    let fs = CountingFs::default();
    let dir = Path::new("/db");
    let db = Db::open_with(
        dir,
        siltdb::Options::default()
            .file_system(Arc::new(fs.clone()))
            .auto_compaction(false)
            .max_open_files(64)
            .block_cache_size(0)
            .bloom_bits_per_key(10.0),
    )
    .unwrap();
    // Each flush makes one L0 table; keys interleave so that every table spans the range.
    for t in 0..TABLES {
        for j in 0..KEYS_PER_TABLE {
            let i = j * TABLES + t;
            db.insert(key(i), format!("v{i}")).unwrap();
        }
        db.flush().unwrap();
        assert!(db.stats().open_files <= 64);
    }
    assert_eq!(db.levels()[0].tables, TABLES as usize);

    for i in (0..TABLES * KEYS_PER_TABLE).step_by(7) {
        assert_eq!(
            db.get(key(i)).unwrap().as_deref(),
            Some(format!("v{i}").as_bytes()),
            "{}",
            key(i)
        );
    }
    let s = db.stats();
    assert!(s.open_files <= 64, "{} files open", s.open_files);
    assert!(
        s.table_opens > u64::from(TABLES),
        "reads must have reopened closed tables: {} opens",
        s.table_opens
    );

    // The oldest table was closed long ago. Eight readers that need it at once open it once.
    let oldest =
        siltdb::inspect::files::table_name(db.tables().iter().map(|t| t.table_id).min().unwrap());
    let oldest = dir.join(oldest);
    let before = fs.opens_of(&oldest);
    *fs.slow.lock() = Some(oldest.clone());
    let barrier = Arc::new(Barrier::new(8));
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let (db, barrier) = (db.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                // Key 0 was written into the first table flushed.
                db.get(key(0)).unwrap()
            })
        })
        .collect();
    for r in readers {
        assert_eq!(r.join().unwrap().as_deref(), Some(&b"v0"[..]));
    }
    *fs.slow.lock() = None;
    assert_eq!(
        fs.opens_of(&oldest) - before,
        1,
        "concurrent readers of a closed table must share one open"
    );

    // Writes and a full compaction go on under the same limit.
    for i in 0..500u32 {
        db.insert(key(i), format!("w{i}")).unwrap();
    }
    db.compact().unwrap();
    assert!(db.stats().open_files <= 64);
    for i in (0..TABLES * KEYS_PER_TABLE).step_by(11) {
        let want = if i < 500 {
            format!("w{i}")
        } else {
            format!("v{i}")
        };
        assert_eq!(db.get(key(i)).unwrap().as_deref(), Some(want.as_bytes()));
    }
    siltdb::inspect::check_invariants(&db).unwrap();
}
