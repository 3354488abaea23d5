//! SSTables: immutable sorted files of internal entries, each with an in-memory index and
//! filter. See `docs/format.md` for the byte layout.

pub(crate) mod block;
pub(crate) mod block_cache;
pub(crate) mod bounds;
pub(crate) mod builder;
pub mod format;
pub(crate) mod iter;
pub(crate) mod properties;
pub(crate) mod reader;

pub use block_cache::{Admission, BlockCache};
pub(crate) use bounds::{table_bounds, TableBounds};
pub(crate) use builder::{BuildOptions, TableBuilder};
pub use properties::TableProperties;
pub use reader::{BlockInfo, IndexEntry, TableEntries, TableEntry, TableReader};
pub(crate) use reader::{CacheUse, ReadCost, TableCaches, TableLookup};
