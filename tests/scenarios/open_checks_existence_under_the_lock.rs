//! `error_if_exists` and `create_if_missing(false)` are checked before the directory lock (a
//! refused open touches nothing) and again once it is held: another process may create or
//! destroy the database between the two. Review finding (session 24): the second check was
//! missing, so an open that asked for a fresh database opened one another process had just
//! created, and an open that asked for an existing one created a new one after a destroy.
use crate::common;

use common::hooked_fs::HookedFs;
use siltdb::fs::{FileSystem, MemFs};
use siltdb::{Db, Error, Options};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A file system over `inner` whose first `lock` first runs `meanwhile` (another process's
/// work between the open's first check and its lock).
fn racing(inner: &MemFs, meanwhile: impl Fn() + Send + Sync + 'static) -> Arc<dyn FileSystem> {
    let once = AtomicBool::new(false);
    Arc::new(HookedFs {
        on_lock: Some(Arc::new(move |_: &Path| {
            if !once.swap(true, Ordering::SeqCst) {
                meanwhile();
            }
        })),
        ..HookedFs::new(inner.clone())
    })
}

#[test]
fn a_database_created_before_the_lock_is_refused_by_error_if_exists() {
    let inner = MemFs::new();
    let other = inner.clone();
    let fs = racing(&inner, move || {
        let db = Db::open_with("/db", common::mem_options(&other)).unwrap();
        db.insert("k", "theirs").unwrap();
        db.close().unwrap();
    });
    let opts = Options::default().error_if_exists(true).file_system(fs);
    assert!(matches!(
        Db::open_with("/db", opts),
        Err(Error::InvalidArgument(_))
    ));
    // The other database is there, untouched.
    let db = Db::open_with("/db", common::mem_options(&inner)).unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"theirs"[..]));
}

#[test]
fn a_database_destroyed_before_the_lock_is_not_created_again() {
    let inner = MemFs::new();
    {
        let db = Db::open_with("/db", common::mem_options(&inner)).unwrap();
        db.insert("k", "v").unwrap();
        db.close().unwrap();
    }
    let other = inner.clone();
    let fs = racing(&inner, move || {
        Db::destroy_with("/db", common::mem_options(&other)).unwrap();
    });
    let opts = Options::default().create_if_missing(false).file_system(fs);
    assert!(matches!(
        Db::open_with("/db", opts),
        Err(Error::InvalidArgument(_))
    ));
    assert!(!inner.exists(&Path::new("/db").join("CURRENT")));
}
