//! A table file whose footer claims an index block of about 1 TiB (a sparse file: the claim
//! is within the file's size, which is all an index handle is checked against before its
//! block is read) is an error when opened, not an abort in the allocator.
use crate::common;

use siltdb::fs::OsFs;
use siltdb::inspect::table::TableReader;
use siltdb::Error;
use std::os::unix::fs::FileExt;

#[test]
fn a_block_larger_than_memory_is_an_error_not_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let table = std::fs::read(common::build_tables(dir.path(), 100, 10.0)).unwrap();

    // The same blocks, then a hole, then the footer 1 TiB into the file, its index handle
    // stretched to end where the data ends.
    const SIZE: u64 = 1 << 40;
    let mut footer = table[table.len() - 64..].to_vec();
    let index_offset = u64::from_le_bytes(footer[0..8].try_into().unwrap());
    let stretched = SIZE - 64 - 5 - index_offset;
    common::forge_footer(&mut footer, |f| {
        f[8..16].copy_from_slice(&stretched.to_le_bytes())
    });
    let path = dir.path().join("stretched.sst");
    let file = std::fs::File::create(&path).unwrap();
    file.write_all_at(&table[..table.len() - 64], 0).unwrap();
    file.set_len(SIZE).unwrap();
    file.write_all_at(&footer, SIZE - 64).unwrap();
    drop(file);

    // (Linux's default overcommit heuristic refuses one allocation larger than memory and
    // swap together; the allocator used to abort the process on that refusal.)
    match TableReader::open(&OsFs, &path) {
        Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::OutOfMemory, "{e}"),
        other => panic!("expected an error, got {:?}", other.map(|_| "a reader")),
    }
}
