//! A database whose tables carry several filter kinds (Bloom tables written under one policy,
//! binary fuse or Ribbon tables under another) answers every get exactly as a model does; and
//! so does the same directory read by a build that does not know the fuse or Ribbon kind,
//! simulated by turning each such filter's kind byte into an unknown kind (checksums
//! recomputed): those filters read as "may contain", costing block reads but never an answer.

use crate::common;

use common::{mask_crc, small_options};
use siltdb::inspect::filter::{Filter, KIND_BINARY_FUSE, KIND_RIBBON, TRAILER_LEN};
use siltdb::inspect::table::TableReader;
use siltdb::{Db, FilterPolicy, LevelFilter, Options, TableOutcome};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

fn key(i: u64) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(0x9e37_79b9) % 1_000_000).into_bytes()
}

fn load(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, range: std::ops::Range<u64>, tag: &str) {
    for i in range {
        let (k, v) = (key(i), format!("{tag}{i}").into_bytes());
        db.insert(&k, &v).unwrap();
        model.insert(k, v);
    }
    db.flush().unwrap();
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()), "{k:?}");
    }
    for i in 0..2000u64 {
        let absent = format!("key{:08}-", i * 500).into_bytes();
        assert_eq!(db.get(&absent).unwrap(), None);
    }
}

/// Data blocks read by gets of 2,000 absent keys spread over the key space.
fn absent_key_block_reads(db: &Db) -> u64 {
    let before = db.stats().data_block_reads;
    for i in 0..2000u64 {
        let absent = format!("key{:08}-", i * 500).into_bytes();
        assert_eq!(db.get(&absent).unwrap(), None);
    }
    db.stats().data_block_reads - before
}

/// A table whose filter is of an unknown kind is read as one without a filter: absent keys
/// there are `NotFound`, never a filter verdict, and `filter_probes` counts only the tables
/// with a usable filter.
fn unknown_filters_count_as_none(db: &Db) {
    let unknown: HashSet<u64> = db
        .tables()
        .into_iter()
        .filter(|t| t.filter_kind == "unknown")
        .map(|t| t.table_id)
        .collect();
    let probes_before = db.stats().filter_probes;
    let (mut probed, mut unknown_reads) = (0, 0);
    for i in 0..2000u64 {
        let absent = format!("key{:08}-", i * 500).into_bytes();
        let (v, trace) = db.get_traced(&absent).unwrap();
        assert_eq!(v, None);
        for t in &trace.tables {
            if t.outcome == TableOutcome::OutOfRange {
                continue;
            }
            if unknown.contains(&t.table_id) {
                assert_eq!(t.outcome, TableOutcome::NotFound, "{t:?}");
                unknown_reads += 1;
            } else if matches!(
                t.outcome,
                TableOutcome::FilterNegative | TableOutcome::FalsePositive
            ) {
                probed += 1;
            }
        }
    }
    assert!(unknown_reads > 0);
    assert_eq!(db.stats().filter_probes - probes_before, probed);
}

fn kinds(db: &Db) -> Vec<String> {
    let mut k: Vec<String> = db.tables().into_iter().map(|t| t.filter_kind).collect();
    k.sort();
    k.dedup();
    k
}

/// Rewrites every filter block of kind `kind` of the tables in `dir` to kind 9 (unknown),
/// resealing the filter's own checksum and the block trailer's. Returns how many it changed.
fn hide_filters(dir: &Path, kind: u8) -> usize {
    let mut changed = 0;
    for path in common::files_with_ext(dir, "sst") {
        let t = TableReader::open_file(&path).unwrap();
        match t.filter() {
            Some(Filter::Fuse(_)) if kind == KIND_BINARY_FUSE => {}
            Some(Filter::Ribbon(_)) if kind == KIND_RIBBON => {}
            _ => continue,
        }
        let h = t.footer().filter.unwrap();
        drop(t);
        let mut bytes = std::fs::read(&path).unwrap();
        let (start, end) = (h.offset as usize, (h.offset + h.size) as usize);
        let block = &mut bytes[start..end];
        let n = block.len();
        assert_eq!(block[n - TRAILER_LEN + 1], kind);
        block[n - TRAILER_LEN + 1] = 9;
        let crc = mask_crc(crc32fast::hash(&block[..n - 4]));
        block[n - 4..].copy_from_slice(&crc.to_le_bytes());
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&bytes[start..end]);
        hasher.update(&[bytes[end]]);
        hasher.update(&h.offset.to_le_bytes());
        let crc = mask_crc(hasher.finalize());
        bytes[end + 1..end + 5].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let t = TableReader::open_file(&path).unwrap();
        assert!(matches!(t.filter(), Some(Filter::Unknown(_))), "{path:?}");
        changed += 1;
    }
    changed
}

fn fuse_everywhere(bits: u8) -> Options {
    small_options().filter_policy(FilterPolicy::Levels(vec![LevelFilter::Fuse {
        fingerprint_bits: bits,
    }]))
}

#[test]
fn bloom_and_fuse_tables_answer_alike_and_unknown_kinds_lose_only_filtering() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let bloom = small_options().filter_policy(FilterPolicy::Monkey { bits_per_key: 10.0 });
    {
        let db = Db::open_with(dir.path(), bloom.clone().auto_compaction(false)).unwrap();
        load(&db, &mut model, 0..3000, "a");
        assert_eq!(kinds(&db), vec!["bloom".to_string()]);
    }
    {
        // Tables written now get 8-bit fuse filters; some keys overwrite Bloom-table keys.
        let db = Db::open_with(dir.path(), fuse_everywhere(8).auto_compaction(false)).unwrap();
        load(&db, &mut model, 2000..5000, "b");
        let k = kinds(&db);
        assert!(
            k.contains(&"bloom".to_string()) && k.contains(&"fuse8".to_string()),
            "{k:?}"
        );
        check(&db, &model);
    }
    {
        // 16-bit fuse filters, and compaction of part of the tree.
        let db = Db::open_with(dir.path(), fuse_everywhere(16)).unwrap();
        load(&db, &mut model, 4500..6000, "c");
        db.compact_range(key(0)..key(100)).unwrap();
        check(&db, &model);
        assert!(
            kinds(&db).contains(&"fuse16".to_string()),
            "{:?}",
            kinds(&db)
        );
    }
    // The default policy reopens a mixed tree unchanged.
    {
        let db = Db::open_with(dir.path(), small_options()).unwrap();
        check(&db, &model);
        let s = db.stats();
        assert!(s.filter_negatives > 0);
        assert_eq!(s.filter_fuse_fallbacks, 0);
    }
    // A reader that does not know kind 2: same answers, more block reads.
    let filtered = {
        let db = Db::open_with(dir.path(), small_options().auto_compaction(false)).unwrap();
        absent_key_block_reads(&db)
    };
    let hidden = hide_filters(dir.path(), KIND_BINARY_FUSE);
    assert!(hidden > 0);
    let db = Db::open_with(dir.path(), small_options().auto_compaction(false)).unwrap();
    assert!(kinds(&db).contains(&"unknown".to_string()));
    check(&db, &model);
    unknown_filters_count_as_none(&db);
    let unfiltered = absent_key_block_reads(&db);
    assert!(
        unfiltered > filtered,
        "{unfiltered} block reads, {filtered} with the filters"
    );
}

/// Tables of a few thousand keys: a Ribbon filter beats Bloom only above a few hundred.
fn larger_tables(o: Options) -> Options {
    o.memtable_size(64 << 10)
        .target_table_size(64 << 10)
        .level_base_size(256 << 10)
}

#[test]
fn ribbon_tables_answer_alike_and_unknown_kinds_lose_only_filtering() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    {
        let db = Db::open_with(dir.path(), fuse_everywhere(8).auto_compaction(false)).unwrap();
        load(&db, &mut model, 0..3000, "a");
    }
    let ribbon = larger_tables(small_options()).filter_policy(FilterPolicy::Levels(vec![
        LevelFilter::Ribbon { bits_per_key: 7.5 },
    ]));
    {
        // Ribbon tables over fuse tables, overwriting some of their keys.
        let db = Db::open_with(dir.path(), ribbon.clone().auto_compaction(false)).unwrap();
        load(&db, &mut model, 2000..5000, "b");
        let k = kinds(&db);
        assert!(
            k.contains(&"fuse8".to_string()) && k.contains(&"ribbon".to_string()),
            "{k:?}"
        );
        check(&db, &model);
        let t = db
            .tables()
            .into_iter()
            .find(|t| t.filter_kind == "ribbon")
            .unwrap();
        assert!((t.filter_bits_per_key - 7.5).abs() < 0.3, "{t:?}");
    }
    {
        // Compaction under the Ribbon hybrid policy.
        let opts = larger_tables(small_options()).filter_policy(FilterPolicy::RibbonHybrid {
            bits_per_key: 10.0,
            ribbon_from_level: 1,
        });
        let db = Db::open_with(dir.path(), opts).unwrap();
        load(&db, &mut model, 4500..6000, "c");
        db.compact_range(key(0)..key(1_000_000)).unwrap();
        check(&db, &model);
        assert!(
            kinds(&db).contains(&"ribbon".to_string()),
            "{:?}",
            kinds(&db)
        );
        // `levels()` names the kind of every level that holds Ribbon tables: "ribbon", or
        // "mixed" where the level also holds a table too small for Ribbon (which gets Bloom).
        // Tables without a filter ("empty": range tombstones only) do not count, as in
        // `levels()`. Taken again until no background compaction moved a table in between.
        let (tables, levels) = loop {
            let before = db.tables();
            let levels = db.levels();
            let after = db.tables();
            let ids = |t: &[siltdb::TableInfo]| t.iter().map(|t| t.table_id).collect::<Vec<_>>();
            if ids(&before) == ids(&after) {
                break (after, levels);
            }
        };
        let mut ribbon_levels = 0;
        for l in &levels {
            let here: Vec<&str> = tables
                .iter()
                .filter(|t| t.level == l.level && t.filter_kind != "empty")
                .map(|t| t.filter_kind.as_str())
                .collect();
            if !here.contains(&"ribbon") {
                continue;
            }
            ribbon_levels += 1;
            let all_ribbon = here.iter().all(|k| *k == "ribbon");
            let want = if all_ribbon { "ribbon" } else { "mixed" };
            assert_eq!(l.filter_kind, want, "level {}: {here:?}", l.level);
        }
        assert!(ribbon_levels > 0, "{levels:?}");
        assert_eq!(db.stats().filter_fuse_fallbacks, 0);
    }
    // A reader that does not know kind 3: same answers, more block reads.
    let filtered = {
        let db = Db::open_with(dir.path(), small_options().auto_compaction(false)).unwrap();
        absent_key_block_reads(&db)
    };
    assert!(hide_filters(dir.path(), KIND_RIBBON) > 0);
    let db = Db::open_with(dir.path(), small_options().auto_compaction(false)).unwrap();
    assert!(kinds(&db).contains(&"unknown".to_string()));
    check(&db, &model);
    let unfiltered = absent_key_block_reads(&db);
    assert!(
        unfiltered > filtered,
        "{unfiltered} block reads, {filtered} with the filters"
    );
}

#[test]
fn levels_policy_checks_fingerprint_widths() {
    let dir = tempfile::tempdir().unwrap();
    for bits in [0u8, 3, 17, 32] {
        let e = Db::open_with(dir.path(), fuse_everywhere(bits)).unwrap_err();
        assert!(
            matches!(e, siltdb::Error::InvalidArgument(_)),
            "{bits}: {e:?}"
        );
    }
    let e = Db::open_with(
        dir.path(),
        Options::default().filter_policy(FilterPolicy::Levels(vec![])),
    )
    .unwrap_err();
    assert!(matches!(e, siltdb::Error::InvalidArgument(_)));
    let e = Db::open_with(
        dir.path(),
        Options::default().filter_policy(FilterPolicy::Hybrid {
            bits_per_key: -1.0,
            fuse_from_level: 1,
        }),
    )
    .unwrap_err();
    assert!(matches!(e, siltdb::Error::InvalidArgument(_)));
    for policy in [
        FilterPolicy::RibbonHybrid {
            bits_per_key: 101.0,
            ribbon_from_level: 1,
        },
        FilterPolicy::Levels(vec![LevelFilter::Ribbon {
            bits_per_key: f64::NAN,
        }]),
    ] {
        let e = Db::open_with(dir.path(), Options::default().filter_policy(policy)).unwrap_err();
        assert!(matches!(e, siltdb::Error::InvalidArgument(_)), "{e:?}");
    }
}

#[test]
fn fuse_filters_are_probed_like_bloom_filters() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), fuse_everywhere(8).auto_compaction(false)).unwrap();
    let mut model = BTreeMap::new();
    load(&db, &mut model, 0..4000, "v");
    let before = db.stats();
    // Absent keys inside the tables' key ranges.
    for i in 0..20_000u64 {
        let k = format!("key{:08}-", i * 50);
        assert_eq!(db.get(k.as_bytes()).unwrap(), None);
    }
    let s = db.stats();
    let probes = s.filter_probes - before.filter_probes;
    let fp = s.filter_false_positives - before.filter_false_positives;
    assert!(probes >= 20_000, "{probes}");
    // 2^-8 per probe: about 0.39%; far below what "no filter" would read.
    let rate = fp as f64 / probes as f64;
    assert!(rate < 0.012, "{rate}");
    let t = &db.tables()[0];
    assert_eq!(t.filter_kind, "fuse8");
    assert!((t.predicted_fpr - 1.0 / 256.0).abs() < 1e-12);
    assert_eq!(db.levels()[0].filter_kind, "fuse8");
}
