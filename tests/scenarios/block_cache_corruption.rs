//! Corruption found on a block-cache miss is `Error::Corruption` naming the file and the block's
//! offset, every time: a block that fails its checksum is never cached, while good blocks of the
//! same table are.

use siltdb::fs::{FileSystem, MemFs};
use siltdb::inspect::table::TableReader;
use siltdb::{BlockCache, Db, Error, Options};
use std::path::Path;
use std::sync::Arc;

#[test]
fn a_corrupt_block_is_reported_each_time_and_never_cached() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let cache = BlockCache::new(4 << 20);
    let opts = Options::default()
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .auto_compaction(false)
        .block_size(512)
        .block_cache(cache.clone());
    let db = Db::open_with(dir, opts.clone()).unwrap();
    for i in 0..400u32 {
        db.insert(format!("k{i:03}"), format!("value-{i:03}"))
            .unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    drop(db);

    // Damage the first data block of the table.
    let name = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".sst"))
        .unwrap();
    let path = dir.join(&name);
    let first_block = {
        let t = TableReader::open(&fs, &path).unwrap();
        t.index()[0].handle
    };
    let mut bytes = fs.read_file(&path).unwrap();
    bytes[first_block.offset as usize + 3] ^= 0x40;
    fs.write_file(&path, &bytes).unwrap();

    let db = Db::open_with(dir, opts).unwrap();
    let blocks_before = cache.len();
    for attempt in 0..3 {
        match db.get("k000") {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, path, "attempt {attempt}");
                assert_eq!(offset, first_block.offset, "attempt {attempt}");
            }
            other => panic!("attempt {attempt}: expected Corruption, got {other:?}"),
        }
    }
    let s = db.stats();
    assert_eq!(
        s.block_cache_hits, 0,
        "the bad block was served from the cache"
    );
    assert_eq!(s.block_cache_misses, 3);
    assert_eq!(cache.len(), blocks_before, "the bad block was cached");

    // A good block of the same table is cached on its first read and hit on the second.
    assert_eq!(db.get("k399").unwrap().unwrap(), "value-399");
    assert_eq!(db.get("k399").unwrap().unwrap(), "value-399");
    let s = db.stats();
    assert_eq!((s.block_cache_hits, s.block_cache_misses), (1, 4));
}
