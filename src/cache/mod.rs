//! [`TableCache`]: the open descriptors of tables, bounded by `max_open_files`. It knows only
//! the file system; tables reach it through [`TableEnv`](crate::version::TableEnv). (The block
//! cache holds parsed blocks, so it lives with the table format: `sstable::block_cache`.)

pub(crate) mod table;

pub(crate) use table::TableCache;
