//! [`OsFs`]: the real file system through `std::fs`.

use super::{FileIdentity, FileLock, FileSystem, RandomAccessFile, WritableFile};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

/// The operating system's file system. Appends are `write(2)` calls with no user-space
/// buffering, syncs are `fdatasync`, directory syncs `fsync` the directory, locks are `flock`.
/// On Linux, a log ([`FileSystem::create_log`], the WAL) on ext2/3/4, XFS or tmpfs is allocated
/// ahead in 1 MiB windows and written through a shared memory map instead: an append is a
/// memory copy into the page cache, with no system call (other file systems keep `write(2)`).
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFs;

#[derive(Debug)]
struct OsWritable {
    file: File,
    len: u64,
    /// Bytes whose writeback has been started (see [`WritableFile::start_writeback`]).
    #[cfg(target_os = "linux")]
    written_back: u64,
}

impl OsWritable {
    fn new(file: File) -> OsWritable {
        OsWritable {
            file,
            len: 0,
            #[cfg(target_os = "linux")]
            written_back: 0,
        }
    }
}

impl WritableFile for OsWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)?;
        self.len += data.len() as u64;
        Ok(())
    }

    /// Whole pages only: the last, partly written page is left for the next call (a page
    /// under writeback that is written again may make that write wait for the disk).
    fn start_writeback(&mut self) {
        #[cfg(target_os = "linux")]
        {
            let to = self.len / super::PAGE * super::PAGE;
            if to > self.written_back {
                super::writeback::start_writeback(&self.file, self.written_back, to);
                self.written_back = to;
            }
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }
}

#[derive(Debug)]
struct OsReadable {
    file: File,
    len: u64,
    identity: Option<FileIdentity>,
}

/// A file's [`FileIdentity`] from its metadata: device, inode, modification time.
fn identity(meta: &fs::Metadata) -> Option<FileIdentity> {
    Some(FileIdentity {
        device: meta.dev(),
        inode: meta.ino(),
        modified_nanos: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    })
}

impl RandomAccessFile for OsReadable {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn identity(&self) -> Option<FileIdentity> {
        self.identity
    }
}

#[derive(Debug)]
struct OsLock {
    // Held for its lock (`flock`, owned by the open file description).
    file: File,
}

impl Drop for OsLock {
    /// Unlocks explicitly instead of relying on the close: an `flock` lock belongs to the
    /// open file description, which a child process forked by another thread shares until
    /// its `exec` closes the (close-on-exec) descriptor. Closing our descriptor in that
    /// window would leave the lock held, and a reopen right after `Db::close` would fail
    /// with `Locked`. `LOCK_UN` releases the description's lock for every holder at once.
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

impl FileLock for OsLock {}

impl FileSystem for OsFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(OsWritable::new(file)))
    }

    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        #[cfg(target_os = "linux")]
        {
            let file = super::mapped::create_file(path)?;
            if super::mapped::maps_safely(&file) {
                return Ok(Box::new(super::mapped::MappedLog::new(file)));
            }
            Ok(Box::new(OsWritable::new(file)))
        }
        #[cfg(not(target_os = "linux"))]
        {
            self.create(path)
        }
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        Ok(Arc::new(OsReadable {
            file,
            len: meta.len(),
            identity: identity(&meta),
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        lock_path(path, || {})
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}

/// How many times [`lock_path`] takes a lock on a `LOCK` that was replaced under it before it
/// gives up (each time, another process removed the file between our open and our lock).
const LOCK_ATTEMPTS: usize = 8;

/// Opens (creating) `path` and takes its `flock`, then checks that `path` still names the
/// file locked: `Db::destroy` removes `LOCK` while holding it, and a process that opened the
/// old file just before would otherwise lock that unlinked file once destroy lets go, while
/// an open after it creates and locks a new `LOCK`: two holders. A lock on a file `path` no
/// longer names is dropped and taken again. `between` runs between the open and the lock
/// (a test's hook; nothing in the engine).
fn lock_path(path: &Path, between: impl Fn()) -> io::Result<Box<dyn FileLock>> {
    use std::os::unix::fs::MetadataExt;
    for _ in 0..LOCK_ATTEMPTS {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        between();
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "lock held elsewhere",
                ))
            }
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
        let lock = OsLock { file };
        let held = lock.file.metadata()?;
        match fs::metadata(path) {
            Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                return Ok(Box::new(lock))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // `lock` unlocks as it drops: the file was replaced or removed; try the new one.
    }
    Err(io::Error::new(
        io::ErrorKind::WouldBlock,
        format!(
            "{}: replaced while being locked, {LOCK_ATTEMPTS} times",
            path.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock file is removed (as `Db::destroy` does while holding it) between our open
    /// and our lock: the lock taken must be on the file the path names afterwards, so that a
    /// later opener is refused rather than given a second lock on a new file.
    #[test]
    fn a_lock_file_removed_between_open_and_lock_is_locked_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let first = std::cell::Cell::new(true);
        let held = lock_path(&path, || {
            if first.replace(false) {
                fs::remove_file(&path).unwrap();
            }
        })
        .unwrap();
        assert!(path.exists());
        let err = OsFs.lock(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(held);
        OsFs.lock(&path).unwrap();
    }

    #[test]
    fn append_read_rename_list_remove() {
        let dir = tempfile::tempdir().unwrap();
        let fs = OsFs;
        let a = dir.path().join("a");
        let mut w = fs.create(&a).unwrap();
        w.append(b"hello ").unwrap();
        w.append(b"world").unwrap();
        w.sync().unwrap();
        assert_eq!(w.len(), 11);
        let r = fs.open(&a).unwrap();
        let mut buf = [0u8; 5];
        r.read_exact_at(&mut buf, 6).unwrap();
        assert_eq!(&buf, b"world");
        let mut big = [0u8; 20];
        assert_eq!(
            r.read_exact_at(&mut big, 0).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        fs.rename(&a, &dir.path().join("b")).unwrap();
        fs.sync_dir(dir.path()).unwrap();
        assert_eq!(fs.list(dir.path()).unwrap(), vec!["b".to_string()]);
        fs.remove(&dir.path().join("b")).unwrap();
        assert!(fs.list(dir.path()).unwrap().is_empty());
    }

    /// Asked after each piece, a file starts the writeback of the whole pages written since
    /// the last time (never its partly written last page), and reads back whole after its
    /// sync.
    #[cfg(target_os = "linux")]
    #[test]
    fn writeback_starts_over_the_whole_pages_not_started_yet() {
        use super::super::PAGE;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let mut w = OsWritable::new(file);
        let piece: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut expected = Vec::new();
        let mut starts = Vec::new();
        for _ in 0..4 {
            w.append(&piece).unwrap();
            expected.extend_from_slice(&piece);
            w.start_writeback();
            starts.push(w.written_back);
            assert_eq!(w.written_back % PAGE, 0);
            assert!(w.len() - w.written_back < PAGE);
        }
        // 300,000 bytes a piece: 73 whole pages (299,008 bytes), then 146, 219, 292.
        assert_eq!(starts, vec![299_008, 598_016, 897_024, 1_196_032]);
        // Nothing new: nothing more to start.
        w.start_writeback();
        assert_eq!(w.written_back, 1_196_032);
        w.sync().unwrap();
        assert_eq!(fs::read(&path).unwrap(), expected);
    }

    #[test]
    fn second_lock_on_same_file_would_block() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("LOCK");
        let first = OsFs.lock(&p).unwrap();
        let err = OsFs.lock(&p).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(first);
        OsFs.lock(&p).unwrap();
    }

    #[test]
    fn dropping_the_lock_releases_it_even_if_the_descriptor_is_shared() {
        // A duplicate descriptor stands in for the copy a child process holds between a
        // fork on another thread and its exec: same open file description, same `flock`.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("LOCK");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&p)
            .unwrap();
        file.try_lock().unwrap();
        let inherited = file.try_clone().unwrap();
        drop(OsLock { file });
        let again = OsFs.lock(&p);
        assert!(
            again.is_ok(),
            "lock still held through the shared description: {again:?}"
        );
        drop(inherited);
    }
}
