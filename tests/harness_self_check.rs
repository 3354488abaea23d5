//! Issue 7, test 8: the harness checks itself. Three bugs are planted in turn: skipping the WAL
//! fsync, deleting a WAL before the manifest edit that retires it is synced, and ignoring block
//! checksums. Each must be caught by the crash or corruption harness that the real tests use; a
//! harness that stays green with a planted bug would prove nothing.
//!
//! The switches exist only in a build with `RUSTFLAGS="--cfg siltdb_sabotage"` (a compiler
//! flag, so no dependency can turn them on in a user's build); `.ci/run` runs this test in
//! that build. Elsewhere this file compiles to nothing.
#![cfg(siltdb_sabotage)]
mod common;

use siltdb::sabotage::{self, Bug};

fn with_bug<T>(bug: Bug, f: impl FnOnce() -> T) -> T {
    sabotage::clear();
    sabotage::plant(bug);
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    sabotage::clear();
    out.unwrap_or_else(|p| std::panic::resume_unwind(p))
}

#[test]
fn planted_bugs_are_caught() {
    let mut caught = Vec::new();

    // 1. No WAL fsync: a power loss after `sync()` returned loses synced writes (D1).
    let r = with_bug(Bug::SkipWalFsync, || common::crash::run(21, 400, 4));
    println!("skip WAL fsync: {}", r.card("power loss"));
    assert!(r.lost > 0, "skipping the WAL fsync went unnoticed: {r:?}");
    caught.push(format!(
        "no_wal_fsync: lost={} open_failures={} of {} checks",
        r.lost, r.open_failures, r.checks
    ));

    // 2. WAL deleted before the manifest edit is durable: a crash in between loses the flushed
    //    writes (they are neither in a replayable WAL nor in a listed table).
    let r = with_bug(Bug::DeleteWalBeforeManifestSync, || {
        common::crash::run(22, 400, 2)
    });
    println!("early WAL delete: {}", r.card("power loss"));
    // The engine's own sequence-continuity check at open reports most of these as corruption.
    assert!(
        r.problems() > 0,
        "deleting the WAL early went unnoticed: {r:?}"
    );
    caught.push(format!(
        "early_wal_delete: lost={} open_failures={} of {} checks",
        r.lost, r.open_failures, r.checks
    ));

    // 3. Block checksums ignored: bit flips in a data block give wrong answers or go unnoticed.
    let rows = with_bug(Bug::IgnoreBlockChecksum, || {
        let base = common::flips::base();
        let regions: Vec<_> = common::flips::regions(&base)
            .into_iter()
            .filter(|r| r.name == "SST data block")
            .collect();
        common::flips::flip_matrix(&base, &regions, 400)
    });
    let row = &rows[0].1;
    println!(
        "ignore block checksum: flips={} detected={} undetected={} wrong={}",
        row.flips, row.detected, row.undetected, row.wrong
    );
    assert!(
        row.undetected + row.wrong > 0,
        "ignoring block checksums went unnoticed: {row:?}"
    );
    caught.push(format!(
        "ignore_block_checksum: undetected={} wrong={} of {} flips",
        row.undetected, row.wrong, row.flips
    ));

    println!(
        "harness self-check: sabotage_caught={}/3 [{}]",
        caught.len(),
        caught.join("; ")
    );
}
