//! Removing a database ([`Db::destroy`](crate::Db::destroy)): under the directory lock, so
//! never while a handle has it open, every file whose name siltdb uses goes, and nothing else.
//!
//! `CURRENT` goes first: from then on the directory holds no database, and a crash half way
//! leaves leftovers that a second `destroy` removes (an open refuses them with
//! [`Error::Corruption`], since `CURRENT` is missing but tables or WALs are there). `LOCK` goes
//! last, while it is still held.

use crate::error::{io_context, Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::FileSystem;
use std::io;
use std::path::Path;

/// Removes the database in `dir`; see the module documentation. A directory that does not
/// exist holds nothing to remove.
pub(crate) fn destroy(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    if !fs.exists(dir) {
        return Ok(());
    }
    let lock_path = dir.join(filename::LOCK);
    let lock = match fs.lock(&lock_path) {
        Ok(lock) => lock,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(Error::Locked),
        Err(e) => return Err(io_context("lock", &lock_path, e)),
    };
    let names = fs.list(dir).map_err(|e| io_context("list", dir, e))?;
    let mut ours: Vec<(u8, String)> = names
        .into_iter()
        .filter_map(|name| {
            let order = match filename::parse(&name)? {
                FileKind::Current => 0,
                FileKind::Manifest(_) => 1,
                FileKind::Wal(_) | FileKind::Table(_) | FileKind::Temp(_) => 2,
                FileKind::Lock => return None,
            };
            Some((order, name))
        })
        .collect();
    ours.sort();
    for (order, name) in &ours {
        let path = dir.join(name);
        match fs.remove(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_context("remove", &path, e)),
        }
        // `CURRENT`'s removal is made durable before any other: a file system that does not
        // keep unlinks in order across a power loss could otherwise keep `CURRENT` and lose
        // WALs or tables, and the directory would open as part of the database.
        if *order == 0 {
            fs.sync_dir(dir)
                .map_err(|e| io_context("sync directory", dir, e))?;
        }
    }
    // Taking the lock created `LOCK` if it was missing: it goes either way.
    let removed = fs.remove(&lock_path);
    drop(lock);
    match removed {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(io_context("remove", &lock_path, e))
        }
        _ => {}
    }
    fs.sync_dir(dir)
        .map_err(|e| io_context("sync directory", dir, e))?;
    if !ours.is_empty() {
        log::info!("destroyed the database in {}", dir.display());
    }
    Ok(())
}
