#!/bin/sh
# Usage: sh scripts/seq_random_pairs.sh [BIN] [KEYS] [PAIRS]
# Issue 12's sequential-against-random figure for one build: PAIRS (default 7) back-to-back
# runs of `BIN fillseq DIR KEYS` and `BIN fillrandom DIR KEYS` in turn (BIN a built
# `write_figures`, default target/release/examples/write_figures; KEYS default 1000000), each
# pair's keys/s and fillseq/fillrandom ratio, then the medians. Quote the median ratio: the
# host's speed drifts between runs, a pair's two runs are close in time.
set -eu
BIN=${1:-target/release/examples/write_figures}
KEYS=${2:-1000000}
PAIRS=${3:-7}
DIR=${TMPDIR:-/tmp}/siltdb-seq-random-pairs
OUT=$(mktemp)
rate() { "$BIN" "$1" "$DIR" "$KEYS" | sed -n 's/.* keys_per_s=\([0-9]*\).*/\1/p'; }
for _ in $(seq "$PAIRS"); do
    s=$(rate fillseq)
    r=$(rate fillrandom)
    echo "$s $r" | awk '{printf "fillseq %d keys/s  fillrandom %d keys/s  ratio %.2f\n", $1, $2, $1 / $2}' | tee -a "$OUT"
done
rm -rf "$DIR"
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "medians: fillseq $(awk '{print $2}' "$OUT" | median) keys/s, fillrandom $(awk '{print $5}' "$OUT" | median) keys/s, ratio $(awk '{print $8}' "$OUT" | median)"
rm -f "$OUT"
