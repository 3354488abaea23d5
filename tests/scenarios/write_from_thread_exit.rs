//! A read and a write made while their thread exits (from another thread-local value's
//! destructor, as a logger that flushes into the database when its thread ends would) work
//! like any other: the engine's own per-thread state (the write queue's waiter) may already be
//! gone by then, and neither may panic (a panic in a thread-local destructor aborts the
//! process) nor lose the write. Before the write queue fell back to a waiter of its own, the
//! write here aborted the test process.

use siltdb::{Db, Options};
use std::cell::RefCell;
use std::sync::Arc;

/// When the thread that holds it ends: reads `in-table` (from an SSTable: a block seek) and
/// inserts what it read under `key`.
struct FlushOnExit(Option<(Arc<Db>, String)>);

impl Drop for FlushOnExit {
    fn drop(&mut self) {
        if let Some((db, key)) = self.0.take() {
            let read = db.get("in-table").unwrap().unwrap();
            db.insert(key, read).unwrap();
        }
    }
}

thread_local! {
    static ON_EXIT: RefCell<FlushOnExit> = const { RefCell::new(FlushOnExit(None)) };
}

#[test]
fn a_write_from_a_thread_local_destructor_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open_with(dir.path(), Options::default()).unwrap());
    db.insert("in-table", "read at thread exit").unwrap();
    db.flush().unwrap();
    for sync in [false, true] {
        let db2 = db.clone();
        std::thread::spawn(move || {
            // This thread-local is set up before the write path's own (made by the first
            // write below), so on most platforms it is destroyed after them.
            ON_EXIT.with(|e| e.borrow_mut().0 = Some((db2.clone(), format!("exit-{sync}"))));
            let opts = siltdb::WriteOptions::new().sync(sync);
            db2.insert_with(format!("before-{sync}"), "x", opts)
                .unwrap();
        })
        .join()
        .unwrap();
        assert_eq!(
            db.get(format!("before-{sync}")).unwrap().as_deref(),
            Some(&b"x"[..])
        );
        assert_eq!(
            db.get(format!("exit-{sync}")).unwrap().as_deref(),
            Some(&b"read at thread exit"[..])
        );
    }
}
