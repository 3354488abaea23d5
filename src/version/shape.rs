//! The shape of a version as users see it: per level its tables, bytes, filter memory, bits
//! per key and expected false-positive cost ([`LevelStats`]), and per table the same
//! ([`TableInfo`]).

use super::{TableHandle, Version};
use crate::stats::{LevelStats, TableInfo};
use std::sync::Arc;

impl Version {
    /// Per-level figures, L0 first.
    pub(crate) fn level_stats(&self) -> Vec<LevelStats> {
        self.levels
            .iter()
            .enumerate()
            .map(|(level, tables)| level_stats(level, tables))
            .collect()
    }

    /// Every table, L0 newest first, deeper levels by key.
    pub(crate) fn table_infos(&self) -> Vec<TableInfo> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(l, ts)| ts.iter().map(move |t| (l, t)))
            .map(|(level, t)| {
                let reader = t.reader().ok();
                let filter = reader.and_then(|r| r.filter().cloned());
                TableInfo {
                    level,
                    table_id: t.number(),
                    bytes: t.meta.size,
                    entries: t.meta.entries,
                    range_deletions: reader.map_or(0, |r| r.properties().range_deletions),
                    smallest: t.meta.smallest_user().to_vec(),
                    largest: t.meta.largest_user().to_vec(),
                    filter_bytes: filter.as_ref().map_or(0, |f| f.memory_bytes() as u64),
                    filter_bits_per_key: filter.as_ref().map_or(0.0, |f| f.bits_per_key()),
                    filter_kind: filter
                        .as_ref()
                        .map_or("none", |f| f.kind_name())
                        .to_string(),
                    predicted_fpr: filter.as_ref().map_or(1.0, |f| f.predicted_fpr()),
                }
            })
            .collect()
    }

    /// Tables that could not be opened.
    pub(crate) fn broken_tables(&self) -> u64 {
        self.levels
            .iter()
            .flatten()
            .filter(|t| t.is_broken())
            .count() as u64
    }
}

fn level_stats(level: usize, tables: &[Arc<TableHandle>]) -> LevelStats {
    let mut s = LevelStats {
        level,
        tables: tables.len(),
        ..LevelStats::default()
    };
    let mut fpr_sum = 0.0;
    for t in tables {
        // Sums saturate (docs/format.md section 4): the sizes come from the manifest.
        s.bytes = s.bytes.saturating_add(t.meta.size);
        s.entries = s.entries.saturating_add(t.meta.entries);
        s.filter_bytes = s.filter_bytes.saturating_add(t.filter_bytes() as u64);
        if let Ok(r) = t.reader() {
            s.filter_keys = s.filter_keys.saturating_add(r.properties().user_keys);
            fpr_sum += r.filter().map_or(1.0, |f| f.predicted_fpr());
            let kind = r.filter().map_or("none", |f| f.kind_name());
            if kind != "empty" {
                if s.filter_kind.is_empty() {
                    s.filter_kind = kind.to_string();
                } else if s.filter_kind != kind {
                    s.filter_kind = "mixed".to_string();
                }
            }
        }
    }
    if s.filter_keys > 0 {
        s.bits_per_key = s.filter_bytes as f64 * 8.0 / s.filter_keys as f64;
    }
    // An absent key meets every L0 table, and one table of a deeper level (the average
    // table, weighted by keys, is what a uniform absent key meets).
    s.expected_fpr = if level == 0 {
        fpr_sum
    } else if tables.is_empty() {
        0.0
    } else {
        weighted_level_fpr(tables)
    };
    s
}

fn weighted_level_fpr(tables: &[Arc<TableHandle>]) -> f64 {
    let mut num = 0.0;
    let mut den = 0.0;
    for t in tables {
        let w = t.meta.entries.max(1) as f64;
        let fpr = t
            .reader()
            .ok()
            .and_then(|r| r.filter().map(|f| f.predicted_fpr()))
            .unwrap_or(1.0);
        num += w * fpr;
        den += w;
    }
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;
    use crate::key::{self, ValueKind};
    use crate::version::{FileMeta, TableEnv};
    use bytes::Bytes;
    use std::path::Path;

    /// Review finding (session 22): a level's byte and entry sums overflowed (a panic with
    /// overflow checks, a wrapped figure without) for tables whose manifest sizes add up past
    /// 2^64; format.md section 4 promises that such sums saturate.
    #[test]
    fn level_sums_saturate() {
        let env = TableEnv::new(Arc::new(MemFs::new()), Path::new("/none"), 10, None);
        let table = |number: u64| {
            let enc =
                |k: &str| Bytes::from(key::encode(k.as_bytes(), key::trailer(1, ValueKind::Put)));
            TableHandle::open(
                &env,
                FileMeta {
                    number,
                    size: u64::MAX / 2 + 1,
                    smallest: enc("a"),
                    largest: enc("b"),
                    min_seq: 1,
                    max_seq: 1,
                    entries: u64::MAX / 2 + 1,
                },
            )
        };
        let s = level_stats(1, &[table(1), table(2)]);
        assert_eq!(s.bytes, u64::MAX);
        assert_eq!(s.entries, u64::MAX);
        assert_eq!(s.tables, 2);
    }
}
