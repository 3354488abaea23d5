//! A table that compaction made obsolete while a reader still held it is deleted when that
//! reader lets go, but not by the reader's thread: the last holder only queues the file, and
//! the engine's purge thread removes it. A user finishing a get or dropping an iterator never
//! pays for an `unlink`.
use crate::common;

use common::hooked_fs::HookedFs;
use parking_lot::Mutex;
use siltdb::fs::{FileSystem, MemFs};
use siltdb::Db;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[test]
fn the_purge_thread_deletes_what_a_reader_held_last() {
    // Which thread removed each file.
    let removed: Arc<Mutex<Vec<(PathBuf, String)>>> = Arc::default();
    let log = removed.clone();
    let fs = HookedFs {
        on_remove: Some(Arc::new(move |path: &Path| {
            let who = std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .to_string();
            log.lock().push((path.to_path_buf(), who));
        })),
        ..HookedFs::new(MemFs::new())
    };
    let dir = Path::new("/db");
    let db = Db::open_with(
        dir,
        common::small_options()
            .auto_compaction(false)
            .file_system(Arc::new(fs.clone())),
    )
    .unwrap();
    for round in 0..3u32 {
        for i in 0..200u32 {
            db.insert(format!("k{i:04}"), format!("v{round}-{i}"))
                .unwrap();
        }
        db.flush().unwrap();
    }
    let before: Vec<String> = fs
        .inner
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".sst"))
        .collect();
    assert!(before.len() >= 3, "{before:?}");

    // A scan holds the current version (every table above) across the compaction.
    let mut scan = db.iter();
    assert!(scan.next().is_some());
    db.compact().unwrap();
    for name in &before {
        assert!(
            fs.inner.exists(&dir.join(name)),
            "{name} was deleted while a scan still held it"
        );
    }
    // The scan is the last holder: dropping it queues the files, it does not remove them.
    let me = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .to_string();
    drop(scan);
    db.wait_for_compactions().unwrap();
    for name in &before {
        assert!(
            !fs.inner.exists(&dir.join(name)),
            "{name} is obsolete and released but still on disk"
        );
    }
    let removed = removed.lock().clone();
    let tables: Vec<&(PathBuf, String)> = removed
        .iter()
        .filter(|(p, _)| p.extension().is_some_and(|e| e == "sst"))
        .collect();
    assert!(tables.len() >= before.len(), "{removed:?}");
    for (path, who) in tables {
        assert_ne!(
            who,
            &me,
            "{} was removed on the user's thread",
            path.display()
        );
        assert_eq!(who, "siltdb-purge", "{} removed by {who}", path.display());
    }
    siltdb::inspect::check_invariants(&db).unwrap();
}
