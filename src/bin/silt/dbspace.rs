//! `silt db compact|size`: reclaiming a database's space and measuring it.
//!
//! `compact` is the one `silt` command that writes to a database: it opens it, which takes
//! the directory lock, so a database open in another process is refused (one line, status
//! 2) rather than compacted under its writer; it says on stderr that it holds the lock.
//! `size` reads the table indexes through a read-only open (no lock), like `db get`, so it
//! is safe beside a running writer.

use crate::output::{line, parse_key, print_json, show, CliError};
use clap::Args;
use serde::Serialize;
use siltdb::{Db, Error, Options};
use std::ops::Bound;
use std::path::{Path, PathBuf};

/// A database directory and a key range.
#[derive(Args, Debug)]
pub struct RangeArgs {
    /// The database directory.
    dir: PathBuf,
    /// First key of the range (inclusive). Default: the smallest key.
    #[arg(long, value_name = "KEY")]
    from: Option<String>,
    /// End of the range (exclusive). Default: past the largest key.
    #[arg(long, value_name = "KEY")]
    to: Option<String>,
    /// KEYs are hex (else text where `\xHH` escapes a byte).
    #[arg(long)]
    hex: bool,
}

/// Arguments of `silt db compact`.
#[derive(Args, Debug)]
pub struct CompactArgs {
    #[command(flatten)]
    range: RangeArgs,
    /// Size at which output tables are cut. Default: siltdb's default (8 MiB); the options
    /// the database's own application uses are not stored, so pass its value here.
    #[arg(long, value_name = "BYTES")]
    target_table_size: Option<u64>,
    /// Bloom filter bits per key of the tables written (uniform). Default: siltdb's default
    /// (the hybrid policy: Bloom in L0, binary fuse or Bloom below, 10 bits per key on average).
    #[arg(long, value_name = "BITS")]
    bloom_bits_per_key: Option<f64>,
}

type KeyBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

impl RangeArgs {
    fn bounds(&self) -> Result<KeyBounds, CliError> {
        let from = match &self.from {
            Some(k) => Bound::Included(parse_key(k, self.hex)?),
            None => Bound::Unbounded,
        };
        let to = match &self.to {
            Some(k) => Bound::Excluded(parse_key(k, self.hex)?),
            None => Bound::Unbounded,
        };
        // No key is below the empty one.
        if matches!(&to, Bound::Excluded(hi) if hi.is_empty()) {
            return Err(CliError::input(
                "the range below --to '' holds no key (the empty key is the smallest)",
            ));
        }
        if let (Bound::Included(lo), Bound::Excluded(hi)) = (&from, &to) {
            if lo >= hi {
                return Err(CliError::input(format!(
                    "the range [{}, {}) holds no key: --from must be below --to",
                    show(lo, self.hex),
                    show(hi, self.hex)
                )));
            }
        }
        Ok((from, to))
    }

    /// `keys [from, to)` for people (`..` for an open end), or `every key`.
    fn describe(&self, (lo, hi): &KeyBounds) -> String {
        if matches!((lo, hi), (Bound::Unbounded, Bound::Unbounded)) {
            return "every key".into();
        }
        let end = |b: &Bound<Vec<u8>>| match b {
            Bound::Included(k) | Bound::Excluded(k) => show(k, self.hex),
            Bound::Unbounded => "..".into(),
        };
        format!("keys [{}, {})", end(lo), end(hi))
    }

    fn check_dir(&self) -> Result<(), CliError> {
        if !self.dir.is_dir() {
            return Err(CliError::input(format!(
                "{} is not a database directory",
                self.dir.display()
            )));
        }
        Ok(())
    }
}

/// Tables and bytes on disk at one moment.
#[derive(Serialize)]
struct Footprint {
    tables: usize,
    disk_bytes: u64,
}

fn footprint(db: &Db) -> Result<Footprint, CliError> {
    Ok(Footprint {
        tables: db.tables().len(),
        disk_bytes: db.disk_size()?,
    })
}

#[derive(Serialize)]
struct CompactJson {
    dir: String,
    range: String,
    before: Footprint,
    after: Footprint,
    compactions: u64,
    bytes_read: u64,
    bytes_written: u64,
}

/// Opens `dir` for writing; a database open elsewhere is one clear line.
fn open_for_writing(dir: &Path, opts: Options) -> Result<Db, CliError> {
    match Db::open_with(dir, opts) {
        Ok(db) => Ok(db),
        Err(Error::Locked) => Err(CliError::input(format!(
            "{} is open in another process (its LOCK is held); close it there, then compact",
            dir.display()
        ))),
        Err(e) => Err(e.into()),
    }
}

/// `silt db compact DIR [--from K] [--to K]`.
pub fn compact(args: &CompactArgs, json: bool) -> Result<(), CliError> {
    let r = &args.range;
    r.check_dir()?;
    let bounds = r.bounds()?;
    // No background compaction: it would race the "before" measurement (a table count from
    // one version, disk bytes from the next) and do nothing `compact_range` does not.
    let mut opts = Options::default()
        .create_if_missing(false)
        .auto_compaction(false);
    if let Some(bytes) = args.target_table_size {
        opts = opts.target_table_size(bytes);
    }
    if let Some(bits) = args.bloom_bits_per_key {
        opts = opts.bloom_bits_per_key(bits);
    }
    let db = open_for_writing(&r.dir, opts)?;
    eprintln!(
        "silt: holding the lock of {} (no other process can open it until this ends)",
        r.dir.display()
    );
    let before = footprint(&db)?;
    db.compact_range(bounds.clone())?;
    let after = footprint(&db)?;
    let s = db.stats();
    db.close()?;
    let doc = CompactJson {
        dir: r.dir.display().to_string(),
        range: r.describe(&bounds),
        before,
        after,
        compactions: s.compactions,
        bytes_read: s.bytes_compacted_read,
        bytes_written: s.bytes_compacted_written,
    };
    if json {
        return print_json(&doc);
    }
    let mut out = std::io::stdout().lock();
    line(&mut out, &format!("compacted {} of {}", doc.range, doc.dir))?;
    line(
        &mut out,
        &format!(
            "before: {} tables, {} bytes on disk",
            doc.before.tables, doc.before.disk_bytes
        ),
    )?;
    line(
        &mut out,
        &format!(
            "after:  {} tables, {} bytes on disk ({} compactions read {} bytes, wrote {})",
            doc.after.tables,
            doc.after.disk_bytes,
            doc.compactions,
            doc.bytes_read,
            doc.bytes_written
        ),
    )?;
    Ok(())
}

#[derive(Serialize)]
struct SizeJson {
    dir: String,
    range: String,
    approximate_bytes: u64,
    disk_bytes: u64,
}

/// `silt db size DIR [--from K] [--to K]`: a read-only open, safe beside a running writer.
pub fn size(args: &RangeArgs, json: bool) -> Result<(), CliError> {
    args.check_dir()?;
    let bounds = args.bounds()?;
    let db = Db::open_read_only(&args.dir)?;
    let doc = SizeJson {
        dir: args.dir.display().to_string(),
        range: args.describe(&bounds),
        approximate_bytes: db.approximate_size(bounds.clone()),
        disk_bytes: db.disk_size()?,
    };
    if json {
        return print_json(&doc);
    }
    let mut out = std::io::stdout().lock();
    line(
        &mut out,
        &format!(
            "{}: about {} bytes in tables (from the table indexes; writes not yet flushed are not counted)",
            doc.range, doc.approximate_bytes
        ),
    )?;
    line(
        &mut out,
        &format!(
            "live files: {} bytes (tables, unflushed WALs, manifest)",
            doc.disk_bytes
        ),
    )?;
    Ok(())
}
