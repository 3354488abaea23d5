//! What the database occupies: bytes on disk of the files it lives in
//! ([`Db::disk_size`](crate::Db::disk_size)), and memory pinned by its filters, indexes and
//! memtables (the memory fields of [`Stats`]).

use super::Core;
use crate::error::{io_context, Result};
use crate::filename::{self, FileKind};
use crate::stats::Stats;
use crate::version::set as vset;
use std::io;

impl Core {
    /// Bytes of the files the database needs now: the tables of the current tree, the WALs not
    /// yet flushed (with the WAL made ahead for the next rotation, if any: up to its first
    /// 1 MiB window, allocated ahead), the live manifest and `CURRENT`. Files waiting for
    /// deletion (compaction inputs a reader still holds, or not yet purged) are not counted.
    pub(crate) fn disk_size(&self) -> Result<u64> {
        let (manifest, log_number) = {
            let vs = self.versions.lock();
            (vs.manifest_number(), vs.log_number())
        };
        // A read-only open writes no manifest of its own: it reads the one `CURRENT` names.
        let manifest = match manifest {
            Some(n) => Some(n),
            None => vset::read_current(self.fs.as_ref(), &self.dir)?,
        };
        let version = self.read.load().version.clone();
        let mut total = version.table_bytes();
        let names = self
            .fs
            .list(&self.dir)
            .map_err(|e| io_context("list", &self.dir, e))?;
        for name in names {
            // Tables count by their manifest size, above.
            let counted = match filename::parse(&name) {
                Some(FileKind::Table(_)) => false,
                Some(FileKind::Wal(n)) => n >= log_number,
                Some(FileKind::Manifest(n)) => Some(n) == manifest,
                Some(FileKind::Current) => true,
                Some(FileKind::Lock | FileKind::Temp(_)) | None => false,
            };
            if !counted {
                continue;
            }
            let path = self.dir.join(&name);
            match self.fs.open(&path) {
                Ok(f) => total = total.saturating_add(f.len()),
                // Gone since the listing (a flushed WAL): it no longer counts.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_context("open", &path, e)),
            }
        }
        Ok(total)
    }

    /// Fills the memory fields of `stats`: filters and indexes of the current tree's tables,
    /// the memtables (the active one and those waiting for flush, with their filters), and
    /// the block cache.
    pub(crate) fn memory_use(&self, stats: &mut Stats) {
        let rs = self.read.load();
        let (filters, indexes) = rs.version.pinned_bytes();
        stats.filter_memory_bytes = filters;
        stats.index_memory_bytes = indexes;
        stats.memtable_memory_bytes = std::iter::once(&rs.mem)
            .chain(&rs.imms)
            .map(|m| m.memory_bytes() as u64)
            .sum();
        stats.block_cache_bytes = self.env.caches.blocks.as_ref().map_or(0, |c| c.usage());
    }
}
