//! The block cache is keyed by table ids unique for the life of the process, never by file
//! numbers: two databases that share one cache and hold tables with the same file numbers
//! never see each other's blocks, and a database deleted and recreated at the same path (same
//! file numbers again) never sees the old one's.

use siltdb::fs::{FileSystem, MemFs};
use siltdb::{BlockCache, Db, Options};
use std::path::Path;
use std::sync::Arc;

fn open(fs: &MemFs, dir: &str, cache: &BlockCache) -> Db {
    Db::open_with(
        dir,
        Options::default()
            .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
            .auto_compaction(false)
            .block_cache(cache.clone()),
    )
    .unwrap()
}

fn fill(db: &Db, tag: &str) {
    for i in 0..200u32 {
        db.insert(format!("k{i:03}"), format!("{tag}-{i}")).unwrap();
    }
    db.flush().unwrap();
}

#[test]
fn same_file_numbers_never_share_cached_blocks() {
    let cache = BlockCache::new(8 << 20);
    let fs = MemFs::new();
    let a = open(&fs, "/a", &cache);
    let b = open(&fs, "/b", &cache);
    fill(&a, "a");
    fill(&b, "b");
    // Same history, so the same file numbers in both directories.
    let names = |d: &str| {
        let mut v: Vec<String> = fs.list(Path::new(d)).unwrap();
        v.retain(|n| n.ends_with(".sst"));
        v
    };
    assert_eq!(names("/a"), names("/b"));
    // Warm the cache from `a`, then read `b`: every answer is b's.
    for i in 0..200u32 {
        assert_eq!(
            a.get(format!("k{i:03}")).unwrap().unwrap(),
            format!("a-{i}")
        );
    }
    assert!(!cache.is_empty());
    for i in 0..200u32 {
        assert_eq!(
            b.get(format!("k{i:03}")).unwrap().unwrap(),
            format!("b-{i}")
        );
    }
    // Read again: now both are served from the cache, still each its own.
    let before = a.stats().block_cache_hits;
    for i in 0..200u32 {
        assert_eq!(
            a.get(format!("k{i:03}")).unwrap().unwrap(),
            format!("a-{i}")
        );
    }
    assert!(a.stats().block_cache_hits > before);

    // Delete `a` and create a new database at the same path: same file numbers, new data.
    a.close().unwrap();
    drop(a);
    for n in fs.list(Path::new("/a")).unwrap() {
        fs.remove(&Path::new("/a").join(n)).unwrap();
    }
    let a2 = open(&fs, "/a", &cache);
    fill(&a2, "new");
    assert_eq!(names("/a"), names("/b"));
    for i in 0..200u32 {
        assert_eq!(
            a2.get(format!("k{i:03}")).unwrap().unwrap(),
            format!("new-{i}"),
            "a block of the deleted database was served"
        );
    }
}

#[test]
fn compaction_outputs_never_get_their_inputs_blocks() {
    let cache = BlockCache::new(8 << 20);
    let fs = MemFs::new();
    let db = open(&fs, "/db", &cache);
    for round in 0..4u32 {
        for i in 0..300u32 {
            db.insert(format!("k{i:03}"), format!("r{round}-{i}"))
                .unwrap();
        }
        db.flush().unwrap();
        // Cache every block of the tables as they are now.
        for i in 0..300u32 {
            assert_eq!(
                db.get(format!("k{i:03}")).unwrap().unwrap(),
                format!("r{round}-{i}")
            );
        }
        db.compact().unwrap();
        for i in 0..300u32 {
            assert_eq!(
                db.get(format!("k{i:03}")).unwrap().unwrap(),
                format!("r{round}-{i}")
            );
        }
    }
}
