#!/bin/sh
# Usage: sh scripts/sync_pairs.sh [PAIRS] [BIN]
# Issue 12's synced-writers figure: PAIRS back-to-back pairs (default 10) of one synced writer
# and eight, 8,000 writes each (`write_figures sync`), and the ratio of each pair. BIN is a
# built `write_figures` (default target/release/examples/write_figures; build it with
# `cargo build --release --example write_figures`). Quote the median of the ratios: the host's
# fsync time moves between runs by as much as a tenth. Each line also splits a write's (one
# thread) or a group's (eight) time into its mean fsync and the rest ("outside"): waking the
# writers, queueing them again, the WAL record and the memtable inserts.
set -eu
PAIRS=${1:-10}
BIN=${2:-target/release/examples/write_figures}
DIR=${TMPDIR:-/tmp}/siltdb-sync-pairs
for _ in $(seq "$PAIRS"); do
    one=$("$BIN" sync "$DIR" 8000 1 | sed 's/.*writes_per_s=\([0-9]*\).*wal_syncs=\([0-9]*\).*wal_sync_mean_us=\([0-9]*\).*/\1 \2 \3/')
    eight=$("$BIN" sync "$DIR" 8000 8 | sed 's/.*writes_per_s=\([0-9]*\).*wal_syncs=\([0-9]*\).*wal_sync_mean_us=\([0-9]*\).*/\1 \2 \3/')
    echo "$one $eight" | awk '{
        group_us = 8000 / $5 * 1e6 / $4;
        printf "1 thread %d/s (fsync %d us, outside %d us)  8 threads %d/s  fsyncs %d (fsync %d us, outside %d us a group)  ratio %.2f\n",
            $1, $3, 1e6 / $1 - $3, $4, $5, $6, group_us - $6, $4 / $1 }'
done
rm -rf "$DIR"
