//! Names of the files in a database directory.
//!
//! `NNNNNN.sst` tables, `NNNNNN.wal` write-ahead logs, `MANIFEST-NNNNNN`, `CURRENT` (the name
//! of the live manifest and a newline), `LOCK`, and `NNNNNN.dbtmp` temporaries. One increasing
//! file number is shared by all numbered kinds.
//!
//! File numbers are at most [`MAX_FILE_NUMBER`]: a name with a larger number is not one of
//! ours, and a manifest that records one is corrupt. The bound is far beyond what a counter
//! bumped once per file can reach, and leaves room to add one to any number without overflow.
//! Only damage (a file or a manifest naming a number near the bound) brings the counter there,
//! and then writers refuse to hand out a number past it ([`check_new_number`]) rather than
//! create a file that the next open would not recognise.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// What a file in a database directory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// `NNNNNN.sst`
    Table(u64),
    /// `NNNNNN.wal`
    Wal(u64),
    /// `MANIFEST-NNNNNN`
    Manifest(u64),
    /// `NNNNNN.dbtmp`
    Temp(u64),
    /// `CURRENT`
    Current,
    /// `LOCK`
    Lock,
}

/// The largest file number (2^56 - 1, like the largest sequence number).
pub const MAX_FILE_NUMBER: u64 = (1 << 56) - 1;

/// Passes a number just handed out for a new file in `dir`, or refuses one past
/// [`MAX_FILE_NUMBER`]: the numbers are used up, which only a damaged directory or manifest
/// (a number near the bound) can bring about.
pub(crate) fn check_new_number(dir: &Path, n: u64) -> Result<u64> {
    if n <= MAX_FILE_NUMBER {
        return Ok(n);
    }
    Err(Error::corruption(
        dir,
        0,
        format!(
            "file number {n} is past the largest, {MAX_FILE_NUMBER}: the numbers are used up \
             (a file or the manifest holds a number near the largest)"
        ),
    ))
}

pub(crate) const CURRENT: &str = "CURRENT";
pub(crate) const LOCK: &str = "LOCK";

/// `NNNNNN.sst`
pub fn table_name(n: u64) -> String {
    format!("{n:06}.sst")
}

/// `NNNNNN.wal`
pub fn wal_name(n: u64) -> String {
    format!("{n:06}.wal")
}

/// `MANIFEST-NNNNNN`
pub fn manifest_name(n: u64) -> String {
    format!("MANIFEST-{n:06}")
}

pub(crate) fn temp_name(n: u64) -> String {
    format!("{n:06}.dbtmp")
}

pub(crate) fn table_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(table_name(n))
}

pub(crate) fn wal_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(wal_name(n))
}

/// The number in a file name, written as siltdb writes it: zero-padded to six digits, with
/// no other leading zero (`000007`, `1234567`). Any other spelling (`7`, `0000007`) is not
/// siltdb's: such a file is left alone, and two names never stand for one number.
fn number(s: &str) -> Option<u64> {
    if s.len() < 6 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = s.parse().ok().filter(|&n| n <= MAX_FILE_NUMBER)?;
    (s.len() == 6 || !s.starts_with('0')).then_some(n)
}

/// Classifies a file name; `None` for names siltdb does not use.
pub fn parse(name: &str) -> Option<FileKind> {
    match name {
        CURRENT => return Some(FileKind::Current),
        LOCK => return Some(FileKind::Lock),
        _ => {}
    }
    if let Some(n) = name.strip_prefix("MANIFEST-") {
        return number(n).map(FileKind::Manifest);
    }
    let (stem, ext) = name.rsplit_once('.')?;
    let n = number(stem)?;
    match ext {
        "sst" => Some(FileKind::Table(n)),
        "wal" => Some(FileKind::Wal(n)),
        "dbtmp" => Some(FileKind::Temp(n)),
        _ => None,
    }
}

/// Parses the contents of `CURRENT`: a manifest name and a newline.
pub(crate) fn parse_current(contents: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(contents).ok()?;
    let name = s.strip_suffix('\n')?;
    match parse(name)? {
        FileKind::Manifest(n) => Some(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        assert_eq!(parse(&table_name(5)), Some(FileKind::Table(5)));
        assert_eq!(parse(&wal_name(1234567)), Some(FileKind::Wal(1234567)));
        assert_eq!(parse(&manifest_name(9)), Some(FileKind::Manifest(9)));
        assert_eq!(parse(&temp_name(3)), Some(FileKind::Temp(3)));
        assert_eq!(parse("CURRENT"), Some(FileKind::Current));
        assert_eq!(parse("LOCK"), Some(FileKind::Lock));
        assert_eq!(parse("x.sst"), None);
        assert_eq!(parse("12.txt"), None);
        assert_eq!(parse("MANIFEST-"), None);
        assert_eq!(parse("+1.sst"), None);
        // Only the spelling siltdb writes: six digits at least, no extra leading zero.
        assert_eq!(parse("000007.wal"), Some(FileKind::Wal(7)));
        assert_eq!(parse("1234567.sst"), Some(FileKind::Table(1234567)));
        for foreign in [
            "7.wal",
            "00007.sst",
            "0000007.wal",
            "01234567.sst",
            "MANIFEST-7",
        ] {
            assert_eq!(parse(foreign), None, "{foreign}");
        }
        assert_eq!(
            parse(&table_name(MAX_FILE_NUMBER)),
            Some(FileKind::Table(MAX_FILE_NUMBER))
        );
        assert_eq!(parse(&table_name(MAX_FILE_NUMBER + 1)), None);
        assert_eq!(parse(&wal_name(u64::MAX)), None);
        assert_eq!(parse("99999999999999999999999.wal"), None);
    }

    #[test]
    fn new_numbers_stop_at_the_largest() {
        let dir = Path::new("/db");
        assert_eq!(check_new_number(dir, 7).unwrap(), 7);
        assert_eq!(
            check_new_number(dir, MAX_FILE_NUMBER).unwrap(),
            MAX_FILE_NUMBER
        );
        for n in [MAX_FILE_NUMBER + 1, u64::MAX] {
            assert!(check_new_number(dir, n).unwrap_err().is_corruption());
        }
    }

    #[test]
    fn current_contents() {
        assert_eq!(parse_current(b"MANIFEST-000007\n"), Some(7));
        assert_eq!(parse_current(b"MANIFEST-000007"), None);
        assert_eq!(parse_current(b""), None);
        assert_eq!(parse_current(b"000007.sst\n"), None);
        assert_eq!(parse_current(&[0xff, b'\n']), None);
    }
}
