//! A partial last WAL record is cut off and counted; a bad record in the middle is an error.
use siltdb::fs::{FileSystem, MemFs};
use siltdb::{Db, Error, Options};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn opts(fs: &MemFs) -> Options {
    Options::default().file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
}

fn wal_of(fs: &MemFs, dir: &Path) -> PathBuf {
    let name = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".wal"))
        .expect("a WAL");
    dir.join(name)
}

/// Writes three records and returns a crash image, the WAL path, its bytes and the offset of
/// the third record.
fn three_writes(fs: &MemFs, dir: &Path) -> (MemFs, PathBuf, Vec<u8>, usize) {
    let db = Db::open_with(dir, opts(fs)).unwrap();
    db.insert("one", "1").unwrap();
    db.insert("two", "2").unwrap();
    let wal = wal_of(fs, dir);
    let before_third = fs.read_file(&wal).unwrap().len();
    db.insert("three", "3").unwrap();
    // Simulate a crash: take a process-crash image, no close.
    let image = fs.crash_image(siltdb::fs::CrashImageOptions::PROCESS_CRASH);
    drop(db);
    let bytes = image.read_file(&wal).unwrap();
    (image, wal, bytes, before_third)
}

#[test]
fn torn_tail_is_cut_and_counted() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let (image, wal, bytes, third) = three_writes(&fs, dir);
    for cut in [1, 5, 12] {
        let img = image.crash_image(siltdb::fs::CrashImageOptions::PROCESS_CRASH);
        img.write_file(&wal, &bytes[..bytes.len() - cut]).unwrap();
        let db = Db::open_with(dir, opts(&img)).unwrap();
        assert_eq!(db.get("one").unwrap().map(Vec::from), Some(b"1".to_vec()));
        assert_eq!(db.get("two").unwrap().map(Vec::from), Some(b"2".to_vec()));
        assert_eq!(db.get("three").unwrap(), None, "the torn record is dropped");
        let s = db.stats();
        assert_eq!(s.wal_torn_tails, 1);
        assert_eq!(s.wal_torn_bytes, (bytes.len() - cut - third) as u64);
        drop(db);
        // The tail is gone for good: the next open finds no torn tail.
        let db = Db::open_with(dir, opts(&img)).unwrap();
        assert_eq!(db.stats().wal_torn_tails, 0);
        assert_eq!(db.get("two").unwrap().map(Vec::from), Some(b"2".to_vec()));
    }
}

#[test]
fn corruption_in_the_middle_is_an_error_naming_file_and_offset() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let (img, wal, mut bytes, _) = three_writes(&fs, dir);
    // Flip a bit in the payload of the first record (past its 16-byte header: the payload's
    // checksum fails while the header's holds).
    bytes[20] ^= 0x10;
    img.write_file(&wal, &bytes).unwrap();
    match Db::open_with(dir, opts(&img)) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, wal);
            assert_eq!(offset, 0);
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}
