#!/bin/sh
# Usage: sh scripts/sync_pairs.sh [PAIRS] [BIN]
# Issue 12's synced-writers figure: PAIRS back-to-back pairs (default 10) of one synced writer
# and eight, 8,000 writes each (`write_figures sync`), and the ratio of each pair. BIN is a
# built `write_figures` (default target/release/examples/write_figures; build it with
# `cargo build --release --example write_figures`). Quote the median of the ratios: the host's
# fsync time moves between runs by as much as a tenth.
set -eu
PAIRS=${1:-10}
BIN=${2:-target/release/examples/write_figures}
DIR=${TMPDIR:-/tmp}/siltdb-sync-pairs
for _ in $(seq "$PAIRS"); do
    one=$("$BIN" sync "$DIR" 8000 1 | sed 's/.*writes_per_s=\([0-9]*\).*/\1/')
    eight=$("$BIN" sync "$DIR" 8000 8 | sed 's/.*writes_per_s=\([0-9]*\).*wal_syncs=\([0-9]*\)/\1 \2/')
    echo "$one $eight" | awk '{printf "1 thread %d/s  8 threads %d/s  fsyncs %d  ratio %.2f\n", $1, $2, $3, $2 / $1}'
done
rm -rf "$DIR"
