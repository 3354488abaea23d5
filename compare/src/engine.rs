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
    /// Tables considered and filter probes by gets so far, if the engine counts them.
    fn read_path(&self) -> Option<ReadPath> {
        None
    }
    /// The tree's shape and the memory its filters and indexes hold, if the engine says.
    fn tree(&self) -> Option<Tree> {
        None
    }
}

/// Read-path counters (siltdb's `Stats`).
#[derive(Clone, Copy, Debug)]
pub struct ReadPath {
    /// Tables gets looked at (whose key range holds the key).
    pub tables_considered: u64,
    /// Filters gets probed.
    pub filter_probes: u64,
}

/// The shape of an LSM tree.
#[derive(Clone, Debug)]
pub struct Tree {
    /// Tables per level, e.g. `L0:2 L1:8 L2:61`.
    pub levels: String,
    /// Bytes of filters in memory.
    pub filter_bytes: u64,
    /// Bytes of table indexes in memory.
    pub index_bytes: u64,
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
    if cfg!(feature = "rocksdb") {
        v.push("rocksdb");
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
        #[cfg(feature = "rocksdb")]
        "rocksdb" => rocksdb_engine::open(dir, s),
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
        // Flush the memtable, then wait for the compactions, as RocksDB's does: the load's
        // user bytes include the last memtable's, so its table belongs to the load.
        self.0.flush().map_err(err)?;
        self.0.wait_for_compactions().map_err(err)
    }
    fn blocks_read(&self) -> Option<u64> {
        Some(self.0.stats().data_block_reads)
    }
    fn read_path(&self) -> Option<ReadPath> {
        let s = self.0.stats();
        Some(ReadPath {
            tables_considered: s.tables_considered,
            filter_probes: s.filter_probes,
        })
    }
    fn tree(&self) -> Option<Tree> {
        let s = self.0.stats();
        let levels = self
            .0
            .levels()
            .iter()
            .filter(|l| l.tables > 0)
            .map(|l| format!("L{}:{}", l.level, l.tables))
            .collect::<Vec<_>>()
            .join(" ");
        Some(Tree {
            levels,
            filter_bytes: s.filter_memory_bytes,
            index_bytes: s.index_memory_bytes,
        })
    }
}

#[cfg(feature = "fjall")]
mod fjall_engine {
    use super::{count, err, Engine, Settings};
    use fjall::{CompressionType, Config, Keyspace, PartitionCreateOptions, PartitionHandle};
    use std::path::Path;

    struct Fjall {
        keyspace: Keyspace,
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
        Ok(Box::new(Fjall { keyspace, part }))
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
        fn wait_quiet(&self) -> Result<(), String> {
            // Flush the memtable, then wait for the compactions the flushes started. fjall 2
            // runs one compaction per flush it is told of and says what runs and what is done
            // (`active_compactions`, `compactions_completed`), not what is queued: the tree
            // is taken as quiet once no compaction ran or ended over three polls 20 ms apart
            // (so up to ~60 ms of idle time is inside fjall's timer).
            self.part.rotate_memtable_and_wait().map_err(err)?;
            let mut done = self.keyspace.compactions_completed();
            let mut quiet_polls = 0;
            // fjall leaves a failed compaction counted as running: give up after 10 minutes.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
            while quiet_polls < 3 {
                if std::time::Instant::now() > deadline {
                    return Err("fjall's compactions did not settle in 10 minutes".into());
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
                let now = self.keyspace.compactions_completed();
                if self.keyspace.active_compactions() == 0 && now == done {
                    quiet_polls += 1;
                } else {
                    quiet_polls = 0;
                    done = now;
                }
            }
            Ok(())
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

#[cfg(feature = "rocksdb")]
mod rocksdb_engine {
    use super::{err, Engine, Settings};
    use rocksdb::statistics::StatsLevel;
    use rocksdb::{
        BlockBasedOptions, Cache, DBCompressionType, Direction, IteratorMode, Options, ReadOptions,
        WriteOptions, DB,
    };
    use std::path::Path;

    /// RocksDB with the common settings: no compression, a 10 bits/key (full, format 5)
    /// Bloom filter per table, an LRU block cache of the budget, the memtable size as
    /// `write_buffer_size`, WAL on and not synced (RocksDB's default write options). Its
    /// other options are its defaults (leveled compaction, a 256 MiB L1 with dynamic level
    /// sizing, 64 MiB tables, 4 KiB blocks), with two background jobs for this machine's two
    /// cores. Statistics are on, at the level that keeps only the counters (no histograms, no
    /// timers), so that data blocks read per get can be reported (block cache data misses +
    /// hits). One `WriteOptions` and one `ReadOptions` serve every call, as an application
    /// would keep them. Build with `RUSTFLAGS="-C target-cpu=native"`: without SSE 4.2 in the
    /// target features, `librocksdb-sys` compiles RocksDB's CRC32C (every WAL record, every
    /// block) in software.
    struct Rocks {
        db: DB,
        opts: Options,
        write: WriteOptions,
        read: ReadOptions,
    }

    pub(super) fn open(dir: &Path, s: Settings) -> Result<Box<dyn Engine>, String> {
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(f64::from(s.bits_per_key), false);
        let cache = Cache::new_lru_cache(usize::try_from(s.cache_bytes).map_err(err)?);
        table.set_block_cache(&cache);
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(DBCompressionType::None);
        opts.set_bottommost_compression_type(DBCompressionType::None);
        opts.set_write_buffer_size(usize::try_from(s.memtable_bytes).map_err(err)?);
        opts.set_max_background_jobs(2);
        opts.set_block_based_table_factory(&table);
        opts.enable_statistics();
        opts.set_statistics_level(StatsLevel::ExceptHistogramOrTimers);
        let db = DB::open(&opts, dir).map_err(err)?;
        Ok(Box::new(Rocks {
            db,
            opts,
            write: WriteOptions::default(),
            read: ReadOptions::default(),
        }))
    }

    impl Engine for Rocks {
        fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
            self.db.put_opt(key, value, &self.write).map_err(err)
        }
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
            self.db.get_opt(key, &self.read).map_err(err)
        }
        fn seek_scan(&self, key: &[u8], n: usize) -> Result<usize, String> {
            let it = self.db.iterator_opt(
                IteratorMode::From(key, Direction::Forward),
                ReadOptions::default(),
            );
            let mut seen = 0;
            for item in it.take(n) {
                item.map_err(err)?;
                seen += 1;
            }
            Ok(seen)
        }
        fn wait_quiet(&self) -> Result<(), String> {
            // Flush the memtable, then wait until no compaction is pending or running.
            self.db.flush().map_err(err)?;
            loop {
                let pending = self
                    .db
                    .property_int_value("rocksdb.compaction-pending")
                    .map_err(err)?
                    .unwrap_or(0);
                let running = self
                    .db
                    .property_int_value("rocksdb.num-running-compactions")
                    .map_err(err)?
                    .unwrap_or(0);
                if pending == 0 && running == 0 {
                    return Ok(());
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        fn blocks_read(&self) -> Option<u64> {
            use rocksdb::statistics::Ticker;
            Some(
                self.opts.get_ticker_count(Ticker::BlockCacheDataMiss)
                    + self.opts.get_ticker_count(Ticker::BlockCacheDataHit),
            )
        }
    }
}
