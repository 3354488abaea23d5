#!/bin/sh
# Usage: sh scripts/ratio_rounds.sh KEYS ROUNDS BIN [BIN ...]
# Issue 12's sequential/random ratio for several builds of `write_figures` at once, so that
# they meet the same host: in each of ROUNDS rounds, each BIN in turn runs `fillseq` then
# `fillrandom` with KEYS keys, and that pair's ratio is kept; then each build's median ratio
# and median keys/s. A BIN may carry environment settings, quoted with it:
# `sh scripts/ratio_rounds.sh 1000000 21 ./new "WF_CLOCK=instant ./new" ./base`.
# Quote the medians; compare builds within one call (the host's speed drifts between calls).
set -eu
KEYS=$1
ROUNDS=$2
shift 2
DIR=${TMPDIR:-/tmp}/siltdb-ratio-rounds
OUT=$(mktemp -d)
for r in $(seq "$ROUNDS"); do
    i=0
    for b in "$@"; do
        i=$((i + 1))
        # "ENV=v ENV2=w BIN": the last word is the binary, the words before it its environment.
        bin=${b##* }
        envs=${b% *}
        [ "$envs" = "$b" ] && envs=
        # shellcheck disable=SC2086
        s=$(env $envs "$bin" fillseq "$DIR" "$KEYS" | sed -n 's/.* keys_per_s=\([0-9]*\).*/\1/p')
        f=$(env $envs "$bin" fillrandom "$DIR" "$KEYS" | sed -n 's/.* keys_per_s=\([0-9]*\).*/\1/p')
        echo "$s $f" | awk '{printf "%d %d %.3f\n", $1, $2, $1 / $2}' >> "$OUT/$i"
    done
done
rm -rf "$DIR"
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
i=0
for b in "$@"; do
    i=$((i + 1))
    echo "$b: fillseq/fillrandom median $(awk '{print $3}' "$OUT/$i" | median) (fillseq $(awk '{print $1}' "$OUT/$i" | median), fillrandom $(awk '{print $2}' "$OUT/$i" | median) keys/s; ratios $(awk '{print $3}' "$OUT/$i" | tr '\n' ' '))"
done
rm -rf "$OUT"
