#!/bin/sh
# Usage: sh scripts/load_pairs.sh BIN_A BIN_B [MODE] [KEYS] [PAIRS]
# Issue 12's A/B comparison of two builds of `write_figures` (build each with
# `cargo build --release --example write_figures` and copy the binary aside): PAIRS (default
# 7) back-to-back runs of `BIN_A MODE DIR KEYS` and `BIN_B MODE DIR KEYS` in turn (MODE
# fillseq or fillrandom, default fillseq; KEYS default 1000000), each pair's keys/s and
# ratio A/B, then the medians. MODE_A/MODE_B gives each side its own mode: with one build,
# `sh scripts/load_pairs.sh BIN BIN fillseq/fillrandom` is the sequential load against the
# random one. Quote the median ratio: the host's speed drifts between runs, a pair's two
# runs are close in time.
set -eu
A=$1
B=$2
MODE=${3:-fillseq}
KEYS=${4:-1000000}
PAIRS=${5:-7}
DIR=${TMPDIR:-/tmp}/siltdb-load-pairs
OUT=$(mktemp)
MODE_A=${MODE%/*}
MODE_B=${MODE#*/}
rate() { "$1" "$2" "$DIR" "$KEYS" | sed -n 's/.* keys_per_s=\([0-9]*\).*/\1/p'; }
for _ in $(seq "$PAIRS"); do
    a=$(rate "$A" "$MODE_A")
    b=$(rate "$B" "$MODE_B")
    echo "$a $b" | awk '{printf "A %d keys/s  B %d keys/s  A/B %.3f\n", $1, $2, $1 / $2}' | tee -a "$OUT"
done
rm -rf "$DIR"
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "medians: A $(awk '{print $2}' "$OUT" | median) keys/s, B $(awk '{print $5}' "$OUT" | median) keys/s, A/B $(awk '{print $8}' "$OUT" | median)"
rm -f "$OUT"
