//! `Options::error_if_exists(true)`: opening an existing database fails with
//! `InvalidArgument` and changes nothing; a new one is created as usual.
use siltdb::{Db, Error, Options};
use std::collections::BTreeMap;
use std::path::Path;

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            let name = e.file_name().into_string().unwrap();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

#[test]
fn an_existing_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = Options::default().error_if_exists(true);
    let db = Db::open_with(dir.path(), fresh.clone()).unwrap();
    db.insert("k", "v").unwrap();
    db.close().unwrap();
    let before = files(dir.path());

    assert!(matches!(
        Db::open_with(dir.path(), fresh.clone()),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(files(dir.path()), before, "the refused open changed files");
    // While it is open elsewhere too: the refusal comes first, without touching the lock.
    let db = Db::open(dir.path()).unwrap();
    assert!(matches!(
        Db::open_with(dir.path(), fresh),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v"[..]));
}
