//! Background jobs that write tables: flushing a sealed memtable to L0, and leveled
//! compaction (choosing inputs, automatically or for a manual compaction, merging them,
//! writing split outputs with fresh filters).
//!
//! A job writes and syncs its output tables and syncs the directory, then returns a
//! [`VersionEdit`] for the caller to commit to the manifest. Inputs are deleted only after that
//! edit is durable, and only once no reader holds them.

pub(crate) mod bits;
mod job;
pub(crate) mod manual;
pub(crate) mod picker;
mod syncer;

pub(crate) use job::{compact, flush_memtable, JobContext, JobOutput};
pub(crate) use picker::Plan;
