//! A read-only handle takes no lock, so the database it reads can be destroyed and made again
//! under it. Its table cache closes descriptors and reopens tables by name; a new table under
//! an old name, with the same offsets and sizes, has blocks that pass their checksums. Every
//! such read fails with `Error::Io` instead of answering from the new file (a table whose old
//! descriptor is still open answers from it, as before the files were replaced). A table the
//! writer deleted after the handle read the manifest is an I/O error too, not corruption.
use crate::common::hooked_fs::HookedFs;
use siltdb::fs::{FileSystem, MemFs};
use siltdb::{Db, Error, Options};
use std::path::Path;
use std::sync::Arc;

fn key(table: usize, i: usize) -> String {
    format!("t{table}k{i:04}")
}

/// Writes three tables of 200 keys each (values tagged `tag`, all of one length) and closes;
/// returns the table files' names and sizes.
fn load(dir: &std::path::Path, tag: &str) -> Vec<(String, u64)> {
    let db = Db::open(dir).unwrap();
    for t in 0..3 {
        for i in 0..200 {
            db.insert(key(t, i), format!("{tag}-{t}-{i:04}")).unwrap();
        }
        db.flush().unwrap();
    }
    db.close().unwrap();
    let mut tables: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".sst"))
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    tables.sort();
    tables
}

#[test]
fn tables_replaced_under_a_read_only_handle_fail_reads_instead_of_answering() {
    let dir = tempfile::tempdir().unwrap();
    let old = load(dir.path(), "old");
    assert_eq!(old.len(), 3);
    // One descriptor at most and no block cache: every get reads its block from a file the
    // table cache (re)opens by name.
    let ro = Db::open_with(
        dir.path(),
        Options::default()
            .read_only(true)
            .max_open_files(1)
            .block_cache_size(0),
    )
    .unwrap();
    for t in 0..3 {
        let v = ro.get(key(t, 5)).unwrap().map(Vec::from);
        assert_eq!(v, Some(format!("old-{t}-0005").into_bytes()));
    }

    // At most one descriptor is still open; the other tables were closed and reopened.
    let s = ro.stats();
    assert!(s.open_files <= 1 && s.table_opens > 3, "{s:?}");
    Db::destroy(dir.path()).unwrap();
    let new = load(dir.path(), "new");
    // The same names and sizes: only the identity of the files tells them apart.
    assert_eq!(new, old);

    // A table whose old file is still open answers from it (the database this handle
    // opened); every other read fails. None answers from the new files.
    let mut failed = 0;
    for t in 0..3 {
        for i in [5, 150] {
            match ro.get(key(t, i)) {
                Err(Error::Io(_)) => failed += 1,
                Ok(Some(v)) if v[..] == *format!("old-{t}-{i:04}").as_bytes() => {}
                other => panic!("{}: {other:?}", key(t, i)),
            }
        }
    }
    assert!(failed >= 4, "{failed} reads failed");
    // A fresh handle reads the new database.
    let fresh = Db::open_read_only(dir.path()).unwrap();
    let v = fresh.get(key(1, 5)).unwrap().map(Vec::from);
    assert_eq!(v, Some(b"new-1-0005".to_vec()));
}

#[test]
fn a_table_gone_before_a_read_only_handle_opens_it_is_an_io_error_not_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let tables = load(dir.path(), "old");
    // The writer deletes a table the manifest still lists when a read-only handle reads it
    // (a compaction finishing in between): here the file goes before the handle opens.
    std::fs::remove_file(dir.path().join(&tables[0].0)).unwrap();
    let ro = Db::open_read_only(dir.path()).unwrap();
    for _ in 0..2 {
        match ro.get(key(0, 5)) {
            Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
    }
    let v = ro.get(key(1, 5)).unwrap().map(Vec::from);
    assert_eq!(v, Some(b"old-1-0005".to_vec()));
    drop(ro);
    // A writer's open owns the directory: for it, the missing table is damage.
    let db = Db::open(dir.path()).unwrap();
    assert!(db.get(key(0, 5)).unwrap_err().is_corruption());
}

#[test]
fn tables_deleted_while_a_read_only_open_runs_do_not_fail_it() {
    // Files of a writer's compaction vanish between the open's listing of the directory and
    // its open of each table: a table the manifest lists (its reads fail with Error::Io), and
    // an unlisted one the open looks into for lost writes (skipped). Both once failed: the
    // first as corruption for the handle's life, the second the whole open.
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let opts = Options::default().file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>);
    let db = Db::open_with(dir, opts.auto_compaction(false)).unwrap();
    for t in 0..2 {
        for i in 0..200 {
            db.insert(key(t, i), format!("old-{t}-{i:04}")).unwrap();
        }
        db.flush().unwrap();
    }
    db.close().unwrap();
    drop(db);
    let tables = crate::common::mem_tables(&fs, dir);
    assert_eq!(tables.len(), 2);
    let table_0 = fs.read_file(&dir.join(&tables[0])).unwrap();
    let unlisted = dir.join("999999.sst");
    fs.write_file(&unlisted, &fs.read_file(&dir.join(&tables[1])).unwrap())
        .unwrap();
    let (gone_listed, inner) = (dir.join(&tables[0]), fs.clone());
    let removed = std::sync::atomic::AtomicBool::new(false);
    let hooked = HookedFs {
        // Each vanishes when the open reaches it (the listed one once: it comes back below).
        on_open: Some(Arc::new(move |p: &Path| {
            let first = || !removed.swap(true, std::sync::atomic::Ordering::Relaxed);
            if (p == gone_listed && first()) || p == Path::new("/db/999999.sst") {
                let _ = inner.remove(p);
            }
        })),
        ..HookedFs::new(fs.clone())
    };
    let ro = Db::open_with(
        dir,
        Options::default()
            .read_only(true)
            .file_system(Arc::new(hooked) as Arc<dyn FileSystem>),
    )
    .unwrap();
    assert!(matches!(ro.get(key(0, 5)), Err(Error::Io(_))));
    let v = ro.get(key(1, 5)).unwrap().map(Vec::from);
    assert_eq!(v, Some(b"old-1-0005".to_vec()));
    assert_eq!(ro.stats().broken_tables, 0);
    assert!(!fs.exists(&unlisted));

    // Another table now under the gone one's name (the database made again under the
    // handle): not the table the handle's manifest lists. An I/O error, not corruption kept
    // for the handle's life; it once was.
    let gone = dir.join(&tables[0]);
    fs.write_file(&gone, &fs.read_file(&dir.join(&tables[1])).unwrap())
        .unwrap();
    assert!(matches!(ro.get(key(0, 5)), Err(Error::Io(_))));
    assert_eq!(ro.stats().broken_tables, 0);
    // Nothing was kept: with the table's own file back, the handle reads it.
    fs.write_file(&gone, &table_0).unwrap();
    let v = ro.get(key(0, 5)).unwrap().map(Vec::from);
    assert_eq!(v, Some(b"old-0-0005".to_vec()));
}
