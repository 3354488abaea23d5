//! 2,000 tables behind a table cache of 64 descriptors: every key reads right, the cache never
//! holds more than 64 files open, readers that need a closed table together open it once
//! (single flight), and writes and compactions go on. `close` lets go of every descriptor.
use crate::common;

use common::hooked_fs::HookedFs;
use parking_lot::Mutex;
use siltdb::fs::MemFs;
use siltdb::Db;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Opens per file, and the one file whose opens are made slow.
#[derive(Default)]
struct Opens {
    count: Mutex<HashMap<PathBuf, u64>>,
    slow: Mutex<Option<PathBuf>>,
}

impl Opens {
    fn of(&self, p: &Path) -> u64 {
        self.count.lock().get(p).copied().unwrap_or(0)
    }
}

const TABLES: u32 = 2000;
const KEYS_PER_TABLE: u32 = 3;

fn key(i: u32) -> String {
    format!("key{i:06}")
}

#[test]
fn two_thousand_tables_with_64_descriptors() {
    let opens = Arc::new(Opens::default());
    let seen = opens.clone();
    let fs = HookedFs {
        on_open: Some(Arc::new(move |path: &Path| {
            *seen.count.lock().entry(path.to_path_buf()).or_default() += 1;
            if seen.slow.lock().as_deref() == Some(path) {
                // Long enough for every waiting reader to pile up behind this open.
                std::thread::sleep(Duration::from_millis(50));
            }
        })),
        ..HookedFs::new(MemFs::new())
    };
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
    let before = opens.of(&oldest);
    *opens.slow.lock() = Some(oldest.clone());
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
    *opens.slow.lock() = None;
    assert_eq!(
        opens.of(&oldest) - before,
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

#[test]
fn close_lets_go_of_every_table_descriptor() {
    // A handle kept after `close` (an `Arc` elsewhere, a live snapshot) held the descriptors
    // of its tables, so the space of tables a later handle deleted was not given back.
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    for t in 0..3 {
        db.insert(format!("key{t}"), "value").unwrap();
        db.flush().unwrap();
    }
    for t in 0..3 {
        assert!(db.get(format!("key{t}")).unwrap().is_some());
    }
    let snapshot = db.snapshot();
    assert!(db.stats().open_files >= 1);
    db.close().unwrap();
    assert_eq!(db.stats().open_files, 0);
    assert!(matches!(snapshot.get("key0"), Err(siltdb::Error::Closed)));
}
