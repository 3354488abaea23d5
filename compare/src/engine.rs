//! The engines under comparison behind one small trait, each opened with the same settings:
//! no compression, 10 bits per key Bloom filters, the same block cache budget, WAL on and not
//! synced, the same memtable size where the engine has one.

use std::path::Path;

/// What a workload needs from an engine.
pub trait Engine: Send + Sync {
    /// Inserts or replaces `key`.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String>;
    /// The value of `key`, if any.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String>;
    /// Seeks to the first key at or after `key` and reads up to `n` entries; returns how many.
    fn seek_scan(&self, key: &[u8], n: usize) -> Result<usize, String>;
    /// Waits until background work (flushes, compactions) is done, for an engine that can
    /// say; the others return at once.
    fn wait_quiet(&self) -> Result<(), String> {
        Ok(())
    }
    /// Data blocks read so far, if the engine counts them.
    fn blocks_read(&self) -> Option<u64> {
        None
    }
}

/// The settings every engine gets.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Block cache budget in bytes.
    pub cache_bytes: u64,
    /// Memtable size in bytes (where the engine has one).
    pub memtable_bytes: u64,
    /// Bloom filter bits per key.
    pub bits_per_key: u8,
}

/// The engine names this build knows.
pub fn available() -> Vec<&'static str> {
    let mut v = vec!["siltdb", "siltdb-uniform"];
    if cfg!(feature = "fjall") {
        v.push("fjall");
    }
    if cfg!(feature = "sled") {
        v.push("sled");
    }
    v
}

/// Opens engine `name` in the empty directory `dir`.
pub fn open(name: &str, dir: &Path, s: Settings) -> Result<Box<dyn Engine>, String> {
    match name {
        "siltdb" => Silt::open(
            dir,
            s,
            siltdb::FilterPolicy::Hybrid {
                bits_per_key: f64::from(s.bits_per_key),
                fuse_from_level: 1,
            },
        ),
        "siltdb-uniform" => Silt::open(
            dir,
            s,
            siltdb::FilterPolicy::Uniform {
                bits_per_key: f64::from(s.bits_per_key),
            },
        ),
        #[cfg(feature = "fjall")]
        "fjall" => fjall_engine::open(dir, s),
        #[cfg(feature = "sled")]
        "sled" => sled_engine::open(dir, s),
        other => Err(format!(
            "unknown or not built engine {other}; this build has {}",
            available().join(", ")
        )),
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Reads up to `n` items of a scan, failing on the first error; returns how many it read.
fn count<T, E: std::fmt::Display>(
    n: usize,
    items: impl Iterator<Item = Result<T, E>>,
) -> Result<usize, String> {
    let mut seen = 0;
    for item in items.take(n) {
        item.map_err(err)?;
        seen += 1;
    }
    Ok(seen)
}

struct Silt(siltdb::Db);

impl Silt {
    fn open(
        dir: &Path,
        s: Settings,
        policy: siltdb::FilterPolicy,
    ) -> Result<Box<dyn Engine>, String> {
        let opts = siltdb::Options::default()
            .filter_policy(policy)
            .block_cache_size(s.cache_bytes)
            .memtable_size(s.memtable_bytes as usize);
        Ok(Box::new(Silt(
            siltdb::Db::open_with(dir, opts).map_err(err)?,
        )))
    }
}

impl Engine for Silt {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.0.insert(key, value).map_err(err)
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Ok(self.0.get(key).map_err(err)?.map(|v| v.to_vec()))
    }
    fn seek_scan(&self, key: &[u8], n: usize) -> Result<usize, String> {
        count(n, self.0.range(key..))
    }
    fn wait_quiet(&self) -> Result<(), String> {
        self.0.wait_for_compactions().map_err(err)
    }
    fn blocks_read(&self) -> Option<u64> {
        Some(self.0.stats().data_block_reads)
    }
}

#[cfg(feature = "fjall")]
mod fjall_engine {
    use super::{count, err, Engine, Settings};
    use fjall::{CompressionType, Config, Keyspace, PartitionCreateOptions, PartitionHandle};
    use std::path::Path;

    struct Fjall {
        _keyspace: Keyspace,
        part: PartitionHandle,
    }

    pub(super) fn open(dir: &Path, s: Settings) -> Result<Box<dyn Engine>, String> {
        let keyspace = Config::new(dir)
            .cache_size(s.cache_bytes)
            .open()
            .map_err(err)?;
        let opts = PartitionCreateOptions::default()
            .compression(CompressionType::None)
            .max_memtable_size(u32::try_from(s.memtable_bytes).map_err(err)?)
            .bloom_filter_bits(Some(s.bits_per_key));
        let part = keyspace.open_partition("bench", opts).map_err(err)?;
        Ok(Box::new(Fjall {
            _keyspace: keyspace,
            part,
        }))
    }

    impl Engine for Fjall {
        fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
            self.part.insert(key, value).map_err(err)
        }
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
            Ok(self.part.get(key).map_err(err)?.map(|v| v.to_vec()))
        }
        fn seek_scan(&self, key: &[u8], n: usize) -> Result<usize, String> {
            count(n, self.part.range(key.to_vec()..))
        }
    }
}

#[cfg(feature = "sled")]
mod sled_engine {
    use super::{count, err, Engine, Settings};
    use std::path::Path;

    struct Sled(sled::Db);

    pub(super) fn open(dir: &Path, s: Settings) -> Result<Box<dyn Engine>, String> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(s.cache_bytes)
            .open()
            .map_err(err)?;
        Ok(Box::new(Sled(db)))
    }

    impl Engine for Sled {
        fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
            self.0.insert(key, value).map(|_| ()).map_err(err)
        }
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
            Ok(self.0.get(key).map_err(err)?.map(|v| v.to_vec()))
        }
        fn seek_scan(&self, key: &[u8], n: usize) -> Result<usize, String> {
            count(n, self.0.range(key..))
        }
    }
}
