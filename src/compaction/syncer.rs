//! Syncing a compaction's finished output tables on a thread of their own, so that the merge
//! goes on writing the next table while the disk takes the last one.
//!
//! A compaction of a random load writes an 8 MiB table every few tens of milliseconds and
//! synced each before starting the next: `strace` of an 8M-key `fillrandom` counted 4.2 s of
//! the compaction thread's 20 s in `fdatasync`, time in which it merged nothing. A [`Syncer`]
//! takes each finished file and syncs it in the background; [`Syncer::wait`] returns once
//! every file handed to it is synced (or the first failure), and the job calls it before the
//! directory sync and before its edit can reach the manifest, so no table is named there
//! before it is durable.

use crate::error::{io_context, Result};
use crate::fs::WritableFile;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

type Work = (PathBuf, Box<dyn WritableFile>);

/// Finished tables that may wait for their sync: a compaction that outruns the disk blocks
/// on the next one instead of piling up dirty tables and open files.
const QUEUE: usize = 4;

/// Syncs files in order on a background thread started with the first one.
pub(crate) struct Syncer {
    running: Option<(mpsc::SyncSender<Work>, JoinHandle<Result<()>>)>,
    /// Set when the job is dropped without [`wait`](Self::wait) (it failed): the files
    /// still queued are about to be deleted, so they are not synced.
    cancelled: Arc<AtomicBool>,
}

impl Syncer {
    pub(crate) fn new() -> Syncer {
        Syncer {
            running: None,
            cancelled: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Hands `file` (finished, not yet synced) over to be synced. If no thread can be started,
    /// syncs it here.
    pub(crate) fn submit(&mut self, path: PathBuf, mut file: Box<dyn WritableFile>) -> Result<()> {
        if self.running.is_none() {
            let (tx, rx) = mpsc::sync_channel::<Work>(QUEUE);
            let cancelled = self.cancelled.clone();
            let spawned = std::thread::Builder::new()
                .name("siltdb-sync".into())
                .spawn(move || sync_all(rx, &cancelled));
            if let Ok(handle) = spawned {
                self.running = Some((tx, handle));
            }
        }
        match &self.running {
            Some((tx, _)) => match tx.send((path, file)) {
                Ok(()) => Ok(()),
                // The thread is gone (it panicked): sync here.
                Err(mpsc::SendError((path, mut file))) => sync(&path, file.as_mut()),
            },
            None => sync(&path, file.as_mut()),
        }
    }

    /// Waits until every file handed over is synced; the first failure, if any.
    pub(crate) fn wait(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        let Some((tx, handle)) = self.running.take() else {
            return Ok(());
        };
        drop(tx);
        handle.join().unwrap_or_else(|_| {
            Err(crate::error::Error::other(
                "the table sync thread panicked".to_string(),
            ))
        })
    }
}

impl Drop for Syncer {
    /// A job that fails still waits for the sync in flight, so that no file operation of its
    /// outlives it; the files still queued are not synced.
    fn drop(&mut self) {
        self.cancelled.store(true, Ordering::Relaxed);
        let _ = self.stop();
    }
}

fn sync(path: &Path, file: &mut dyn WritableFile) -> Result<()> {
    file.sync().map_err(|e| io_context("sync", path, e))
}

/// Syncs every file received; after a failure or a cancel, syncs no more (the job fails
/// anyway) and returns the failure once the sender is gone.
fn sync_all(rx: mpsc::Receiver<Work>, cancelled: &AtomicBool) -> Result<()> {
    let mut outcome = Ok(());
    for (path, mut file) in rx {
        if outcome.is_ok() && !cancelled.load(Ordering::Relaxed) {
            outcome = sync(&path, file.as_mut());
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::fs::{FaultPlan, FileSystem, MemFs, OpKind};
    use std::path::Path;

    fn written(fs: &MemFs, name: &str) -> (PathBuf, Box<dyn WritableFile>) {
        let path = Path::new("/d").join(name);
        let mut f = fs.create(&path).unwrap();
        f.append(name.as_bytes()).unwrap();
        (path, f)
    }

    #[test]
    fn every_file_handed_over_is_synced_by_the_time_wait_returns() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let mut s = Syncer::new();
        for name in ["a", "b", "c"] {
            let (p, f) = written(&fs, name);
            s.submit(p, f).unwrap();
        }
        s.wait().unwrap();
        // With their names made durable (the job syncs the directory next), a power loss now
        // keeps every byte of the three files.
        fs.sync_dir(Path::new("/d")).unwrap();
        let image = fs.crash_image(crate::fs::CrashImageOptions::POWER_LOSS);
        for name in ["a", "b", "c"] {
            let got = image.read_file(&Path::new("/d").join(name)).unwrap();
            assert_eq!(got, name.as_bytes());
        }
    }

    #[test]
    fn a_failed_sync_is_returned_by_wait() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let mut s = Syncer::new();
        let (p, f) = written(&fs, "a");
        fs.set_fault(Some(FaultPlan::nth(OpKind::Sync, 0)));
        s.submit(p, f).unwrap();
        let (p, f) = written(&fs, "b");
        s.submit(p, f).unwrap();
        assert!(matches!(s.wait(), Err(Error::Io(_))));
    }

    #[test]
    fn nothing_handed_over_waits_for_nothing() {
        assert!(Syncer::new().wait().is_ok());
    }
}
