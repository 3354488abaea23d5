//! Caches between the read path and the files: [`BlockCache`] (parsed data blocks) and
//! [`TableCache`] (open descriptors, bounded by `max_open_files`). Neither knows about the
//! engine; tables reach them through [`TableEnv`](crate::version::TableEnv).

pub(crate) mod block;
pub(crate) mod table;

pub use block::{Admission, BlockCache};
pub(crate) use table::TableCache;
