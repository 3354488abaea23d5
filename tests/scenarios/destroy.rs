//! `Db::destroy` removes a closed database's files and nothing else, and refuses with
//! `Locked` while the database is open.
use crate::common;

use siltdb::fs::{FileSystem, MemFs};
use siltdb::{Db, Error, Options};
use std::collections::BTreeMap;
use std::path::Path;

/// Name -> contents of every file in `dir`.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            let name = e.file_name().into_string().unwrap();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

#[test]
fn destroy_removes_every_siltdb_file_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Files that are not siltdb's, some with names close to its own.
    let unrelated: BTreeMap<String, Vec<u8>> = [
        "notes.txt",
        "000007.sst.bak",
        "MANIFEST",
        "MANIFEST-backup",
        "CURRENT.old",
        "LOCK2",
        "x.wal",
    ]
    .iter()
    .map(|n| (n.to_string(), format!("mine: {n}").into_bytes()))
    .collect();
    for (n, c) in &unrelated {
        std::fs::write(d.join(n), c).unwrap();
    }
    std::fs::create_dir(d.join("backup")).unwrap();
    std::fs::write(d.join("backup").join("000001.sst"), b"kept").unwrap();

    let db = Db::open_with(d, common::small_options()).unwrap();
    for i in 0..2000u32 {
        db.insert(format!("k{i:05}"), [5u8; 40]).unwrap();
    }
    db.close().unwrap();
    // Reopened with nothing to do in the background: the files stay put while compared.
    let db = Db::open_with(d, Options::default().auto_compaction(false)).unwrap();
    db.insert("in-the-wal", "v").unwrap();
    let open_files = files(d);
    assert!(open_files.keys().any(|n| n.ends_with(".sst")));

    assert!(matches!(Db::destroy(d), Err(Error::Locked)));
    assert_eq!(files(d), open_files, "a refused destroy removed something");
    assert_eq!(db.get("in-the-wal").unwrap().as_deref(), Some(&b"v"[..]));

    db.close().unwrap();
    Db::destroy(d).unwrap();
    assert_eq!(files(d), unrelated);
    assert_eq!(
        std::fs::read(d.join("backup").join("000001.sst")).unwrap(),
        b"kept"
    );

    // The directory holds no database now: a new one starts empty.
    let db = Db::open(d).unwrap();
    assert_eq!(db.get("in-the-wal").unwrap(), None);
    assert_eq!(db.iter().count(), 0);
}

#[test]
fn destroying_nothing_is_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    Db::destroy(dir.path().join("never-created")).unwrap();
    assert!(!dir.path().join("never-created").exists());
    Db::destroy(dir.path()).unwrap();
    assert!(files(dir.path()).is_empty());
}

#[test]
fn destroy_on_another_file_system() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let opts = common::mem_options(&fs);
    let db = Db::open_with(dir, opts.clone()).unwrap();
    db.insert("a", "b").unwrap();
    db.flush().unwrap();
    fs.create(&dir.join("keep.me"))
        .unwrap()
        .append(b"x")
        .unwrap();
    assert!(matches!(
        Db::destroy_with(dir, opts.clone()),
        Err(Error::Locked)
    ));
    drop(db);
    Db::destroy_with(dir, opts).unwrap();
    assert_eq!(fs.list(dir).unwrap(), vec!["keep.me".to_string()]);
}

/// `CURRENT`'s removal is made durable (a directory sync) before any WAL, table or manifest
/// is removed: on a file system that does not keep unlinks in order across a power loss, the
/// directory could otherwise keep `CURRENT` and lose the files it needs.
#[test]
fn destroy_syncs_the_removal_of_current_before_removing_anything_else() {
    use crate::common::hooked_fs::HookedFs;
    use std::sync::{Arc, Mutex};
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open_with(dir, common::mem_options(&fs)).unwrap();
    db.insert("a", "b").unwrap();
    db.flush().unwrap();
    db.insert("c", "d").unwrap();
    drop(db);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (on_remove, on_sync_dir) = (seen.clone(), seen.clone());
    let hooked = HookedFs {
        on_remove: Some(Arc::new(move |p: &Path| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            on_remove.lock().unwrap().push(name);
        })),
        on_sync_dir: Some(Arc::new(move |_: &Path| {
            on_sync_dir.lock().unwrap().push("<sync>".into());
        })),
        ..HookedFs::new(fs.clone())
    };
    let opts = Options::default().file_system(Arc::new(hooked) as Arc<dyn FileSystem>);
    Db::destroy_with(dir, opts).unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.first().map(String::as_str),
        Some("CURRENT"),
        "{seen:?}"
    );
    assert_eq!(seen.get(1).map(String::as_str), Some("<sync>"), "{seen:?}");
    assert!(
        seen.iter().any(|n| n.ends_with(".wal")) && seen.iter().any(|n| n.ends_with(".sst")),
        "{seen:?}"
    );
}
