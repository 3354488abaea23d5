//! Damage to a range-deletion block is `Error::Corruption` naming the table and an offset
//! inside the block, never a table that reads with its tombstones silently gone.
use crate::common;

use siltdb::fs::{FileSystem, MemFs};
use siltdb::inspect::table::{BlockKind, TableReader};
use siltdb::Error;
use std::path::Path;

#[test]
fn every_bit_flip_in_a_range_deletion_block_is_corruption_at_the_block() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    {
        let db = common::open_mem(&fs, dir);
        for i in 0..50u32 {
            db.insert(format!("k{i:03}"), "v").unwrap();
        }
        db.remove_range("k010".."k020").unwrap();
        db.remove_range("k030"..).unwrap();
        db.flush().unwrap();
        db.close().unwrap();
    }
    let name = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".sst"))
        .unwrap();
    let path = dir.join(name);
    let good = fs.read_file(&path).unwrap();
    let t = TableReader::open(&fs, &path).unwrap();
    assert_eq!(t.range_tombstones().len(), 2);
    let h = t
        .blocks()
        .into_iter()
        .find(|b| b.kind == BlockKind::RangeDel)
        .unwrap()
        .handle;
    drop(t);
    let (start, end) = (h.offset as usize, (h.offset + h.size + 5) as usize);
    for bit in start * 8..end * 8 {
        let mut bad = good.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        fs.write_file(&path, &bad).unwrap();
        match TableReader::open(&fs, &path) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, path);
                assert!(
                    (start as u64..end as u64).contains(&offset),
                    "bit {bit}: offset {offset} outside the block {start}..{end}"
                );
            }
            other => panic!("bit {bit}: {other:?}"),
        }
    }
    // Through the database: the damaged table fails the reads that need it.
    let mut bad = good.clone();
    bad[start] ^= 0x01;
    fs.write_file(&path, &bad).unwrap();
    let db = common::open_mem(&fs, dir);
    assert!(matches!(db.get("k015"), Err(Error::Corruption { .. })));
    assert!(db
        .iter()
        .any(|r| matches!(r, Err(Error::Corruption { .. }))));
}
