//! A table whose open failed when the database opened (a transient I/O error) is opened by
//! the first get that needs it: that get read the table's footer and metadata blocks, and its
//! `bytes_read` (in its trace and in `Stats`) counts them, so that a get's bytes are the
//! bytes the file system served. Review finding (session 24): the open's reads were not
//! counted anywhere.
use crate::common;

use common::hooked_fs::HookedFs;
use siltdb::fs::{FileSystem, MemFs, RandomAccessFile};
use siltdb::{Db, Options, TableOutcome};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A table file that counts the bytes read from it.
#[derive(Debug)]
struct CountingFile {
    inner: Arc<dyn RandomAccessFile>,
    bytes: Arc<AtomicU64>,
}

impl RandomAccessFile for CountingFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.bytes.fetch_add(buf.len() as u64, Ordering::SeqCst);
        self.inner.read_exact_at(buf, offset)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn identity(&self) -> Option<siltdb::fs::FileIdentity> {
        self.inner.identity()
    }
}

/// A `MemFs` that fails every open of a table while `fail_tables` is set, and counts the
/// bytes read from tables in `table_bytes`.
fn counting_fs(fail_tables: &Arc<AtomicBool>, table_bytes: &Arc<AtomicU64>) -> HookedFs {
    let (fail, bytes) = (fail_tables.clone(), table_bytes.clone());
    HookedFs {
        open_with: Some(Arc::new(move |path: &Path, mem: &MemFs| {
            if path.extension().is_none_or(|e| e != "sst") {
                return mem.open(path);
            }
            if fail.load(Ordering::SeqCst) {
                return Err(io::Error::other("a transient failure"));
            }
            Ok(Arc::new(CountingFile {
                inner: mem.open(path)?,
                bytes: bytes.clone(),
            }) as Arc<dyn RandomAccessFile>)
        })),
        ..HookedFs::new(MemFs::new())
    }
}

/// A database of one table of keys `k0000` .. `k0999`, reopened while its table cannot be
/// opened, and the count of bytes read from tables since.
fn reopened_with_its_table_closed() -> (Db, Arc<AtomicU64>) {
    let (fail_tables, table_bytes) = (Arc::new(AtomicBool::new(false)), Arc::default());
    let fs = counting_fs(&fail_tables, &table_bytes);
    let opts = || {
        Options::default()
            .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
            .auto_compaction(false)
    };
    {
        let db = Db::open_with("/db", opts()).unwrap();
        for i in 0..1000u32 {
            db.insert(format!("k{i:04}"), "v").unwrap();
        }
        db.flush().unwrap();
        db.close().unwrap();
    }
    fail_tables.store(true, Ordering::SeqCst);
    let db = Db::open_with("/db", opts()).unwrap();
    fail_tables.store(false, Ordering::SeqCst);
    (db, table_bytes)
}

#[test]
fn a_get_that_opens_a_table_counts_the_open_reads() {
    let (db, table_bytes) = reopened_with_its_table_closed();
    // (No `stats` first: it would open the table.)
    let fs_before = table_bytes.load(Ordering::SeqCst);
    let (v, trace) = db.get_traced("k0500").unwrap();
    assert_eq!(v.as_deref(), Some(&b"v"[..]));
    let served = table_bytes.load(Ordering::SeqCst) - fs_before;
    // The footer, properties, index and filter blocks, then one data block.
    assert!(served > 4096, "{served}");
    assert_eq!(trace.bytes_read, served);
    assert_eq!(trace.tables.len(), 1);
    assert_eq!(trace.tables[0].bytes_read, served);
    let s = db.stats();
    assert_eq!((s.gets, s.bytes_read, s.broken_tables), (1, served, 0));
    // The table is open now: the next get reads only its data block.
    let fs_before = table_bytes.load(Ordering::SeqCst);
    let (_, trace) = db.get_traced("k0999").unwrap();
    assert_eq!(
        trace.bytes_read,
        table_bytes.load(Ordering::SeqCst) - fs_before
    );
    assert!(trace.bytes_read < served);
}

/// The same for a get of an absent key that the table's filter rules out: no block read, but
/// the open's reads counted (and the same for a false positive, which adds its block).
#[test]
fn a_get_that_opens_a_table_its_filter_rules_out_counts_the_open_reads() {
    let (db, table_bytes) = reopened_with_its_table_closed();
    let fs_before = table_bytes.load(Ordering::SeqCst);
    let (v, trace) = db.get_traced("k0500x").unwrap();
    assert_eq!(v, None);
    let served = table_bytes.load(Ordering::SeqCst) - fs_before;
    assert_eq!(trace.tables.len(), 1);
    let t = trace.tables[0];
    assert!(
        matches!(
            t.outcome,
            TableOutcome::FilterNegative | TableOutcome::FalsePositive
        ),
        "{t:?}"
    );
    assert!(served > 0);
    assert_eq!((t.bytes_read, trace.bytes_read), (served, served));
    assert_eq!(db.stats().bytes_read, served);
    // Open now: another absent key costs what its filter says, no more.
    let fs_before = table_bytes.load(Ordering::SeqCst);
    let (_, trace) = db.get_traced("k0501x").unwrap();
    let served_now = table_bytes.load(Ordering::SeqCst) - fs_before;
    assert_eq!(trace.bytes_read, served_now);
    if trace.tables[0].outcome == TableOutcome::FilterNegative {
        assert_eq!(served_now, 0);
    }
}
