//! siltdb: an embeddable LSM-tree key-value store that counts, and cuts, read amplification.
//!
//! Writes go to a write-ahead log and a memtable; full memtables flush to immutable SSTables,
//! and leveled compaction merges them down. Every SSTable carries a filter that is kept in
//! memory (by default Bloom filters in L0 and, below it, binary fuse or Bloom filters sized
//! per level by Monkey's allocation), so a point read skips, with zero I/O, every table whose
//! filter says "definitely not". What each read costs is counted exactly ([`Stats`], [`ReadTrace`]).
//!
//! ```
//! use siltdb::{Db, Options, WriteBatch};
//!
//! # fn main() -> siltdb::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let db = Db::open_with(dir.path(), Options::default().bloom_bits_per_key(10.0))?;
//!
//! db.insert("apple", "red")?;
//! db.insert("banana", "yellow")?;
//! assert_eq!(db.get("apple")?.as_deref(), Some(&b"red"[..]));
//!
//! let mut batch = WriteBatch::new();
//! batch.insert("cherry", "dark red");
//! batch.remove("banana");
//! db.write(batch)?; // all or nothing
//!
//! db.flush()?; // memtable -> L0 table, durable
//! let keys: Vec<Vec<u8>> = db.iter().map(|kv| kv.map(|(k, _)| k)).collect::<siltdb::Result<_>>()?;
//! assert_eq!(keys, vec![b"apple".to_vec(), b"cherry".to_vec()]);
//!
//! let (value, trace) = db.get_traced("zebra")?; // past every table's keys: no I/O
//! assert_eq!(value, None);
//! assert_eq!(trace.data_block_reads, 0);
//! println!("{:?}", db.stats());
//! # Ok(()) }
//! ```
//!
//! The on-disk format is specified in `docs/format.md`; the durability contract in
//! `docs/durability.md`.

#![deny(missing_docs)]
// `deny`, not `forbid`: `fs::mapped` (the WAL's memory map) allows it, for the map, four
// system calls and one store, `fs::writeback` for one system call, `fs::placement` for the
// CPU-affinity system calls that keep the WAL's helper off its writer's CPU, `prefetch` for
// the cache hints (CPUID and two prefetch instructions), and `memtable::entry_cell` for the
// skiplist's write-once entry slot (with the one call of its `unsafe` setter in
// `memtable::skiplist`).
#![deny(unsafe_code)]

mod batch;
mod cache;
mod chunk;
mod compaction;
mod db;
mod encoding;
mod engine;
mod error;
mod filename;
mod filter;
pub mod fs;
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzzing;
pub mod inspect;
mod iter;
mod key;
mod memtable;
mod options;
mod prefetch;
mod range_del;
mod read;
mod record;
#[cfg(siltdb_sabotage)]
#[doc(hidden)]
pub mod sabotage;
#[cfg(not(siltdb_sabotage))]
mod sabotage;
mod scan;
mod snapshot;
mod sstable;
mod stats;
mod value;
mod version;
mod wal;
mod write_options;

pub use batch::{WriteBatch, MAX_BATCH_OPS, MAX_BATCH_SIZE, MAX_KEY_SIZE, MAX_VALUE_SIZE};
pub use db::Db;
pub use error::{Error, Result};
pub use options::{FilterPolicy, LevelFilter, LogWrites, Options};
pub use scan::Iter;
pub use snapshot::Snapshot;
pub use sstable::{Admission, BlockCache};
pub use stats::{LevelStats, ReadTrace, Stats, TableInfo, TableOutcome, TableVisit};
pub use value::Value;
pub use write_options::{Durability, WriteOptions};
