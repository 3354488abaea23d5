//! The scenario tests, one scenario per file, built as one test binary: a test binary links
//! siltdb and its dependencies again, and one binary instead of ~60 takes minutes off the
//! release and checked builds of `.ci/run`. A scenario's tests are named after its file:
//! `cargo test --release --test scenarios -- basic_ops::` runs `basic_ops.rs` alone.
//!
//! Scenarios that change process-wide state stay one binary each, beside this directory: the
//! planted-bug switches (`harness_self_check`, `leader_panic`, `fuse_build_fallback`), a test
//! that re-runs its own binary as a child (`crash_kill9`, `rlimit_child`), and the crash,
//! fault-injection and model runs that the README runs by name (`crash_power_loss`,
//! `power_loss_lost_pages`, `error_injection`, `model`). A new scenario that needs a process
//! of its own goes there too.

#[path = "../common/mod.rs"]
mod common;

mod approximate_size;
mod background_failures_do_not_hang;
mod basic_ops;
mod batch_atomicity;
mod block_cache_corruption;
mod block_cache_keys;
mod cli_bad_input;
mod cli_db;
mod cli_db_compact;
mod cli_range_delete;
mod cli_readamp;
mod cli_sst;
mod close_while_busy;
mod closed_handle_opens_no_table;
mod compact_range_scope;
mod compact_reclaims_space;
mod compact_while_a_flush_runs;
mod compaction_failures;
mod compaction_invariants;
mod compaction_shape;
mod concurrency_model;
mod concurrent_readers_writer;
mod concurrent_scans_compaction;
mod corruption_bit_flips;
mod destroy;
mod destroy_crash;
mod error_if_exists;
mod filter_counters;
mod filter_kinds_mixed;
mod filter_policies;
mod footprint_figures;
mod get_counts_what_answered;
mod group_commit_synced;
mod group_commit_takeover;
mod held_scan_keeps_its_view;
mod invalid_arguments;
mod locking;
mod lone_writer_group;
mod manifest_failure_keeps_data;
mod manual_compaction_lets_l0_through;
mod memtable_grown_ahead;
mod not_an_sstable;
mod obsolete_delete_failure;
mod obsolete_files_deleted_in_background;
mod open_checks_existence_under_the_lock;
mod overwrite_delete_across_levels;
mod per_write_durability;
mod power_loss_concurrent_rotation;
mod power_loss_unsealed_wal;
mod range_delete_corruption;
mod range_delete_levels;
mod range_delete_nested_batch;
mod range_delete_scans;
mod read_only;
mod read_only_live_wal;
mod read_only_replaced_tables;
mod read_only_wal_removed;
mod recovery_bounded;
mod regression_crash_during_recovery;
mod reopen_wal_replay;
mod rotation_outside_state_lock;
mod scan_order_tombstones;
mod sequential_load_moves_tables;
mod snapshot_isolation;
mod snapshot_read_counters;
mod sparse_table_block_too_large;
mod table_cache_many_tables;
mod table_opened_by_a_get;
mod torn_wal_tail;
mod wait_for_compactions_after_last_flush;
mod wal_made_ahead;
mod wal_mapped_tail;
mod write_amplification_after_reopen;
mod write_from_thread_exit;
