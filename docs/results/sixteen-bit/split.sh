#!/bin/bash
# The graph split in 16 bits (runtime/graph.py: the pass recorded as a head graph and the rest) against one graph:
# breakdown.py (snn's side only) on the same 16-bit bundle with SNN_GRAPH_SPLIT=1 and =0 in turn, in both orders,
# PAIRS times; fusion/split_table.py's table of each run's replay, replay() from an idle GPU and its share above the
# replay.
#   bash docs/results/sixteen-bit/split.sh OUT NET PRECISION BATCH [PAIRS]       (PAIRS: default 2)
set -uo pipefail
out=$(realpath -m "${1:?usage: split.sh OUT NET PRECISION BATCH [PAIRS]}")
net=${2:?NET}; prec=${3:?PRECISION}; batch=${4:?BATCH}; pairs=${5:-2}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cd "$here/../../.."
. docs/results/env.sh
env_report > "$out/env.txt"
run() {  # SPLIT TAG
  SNN_GRAPH_SPLIT=$1 python3 "$here/breakdown.py" "$net" "$prec" "$batch" "$out/$2_${net}_b$batch.json" --no-compile \
    > "$out/$2_${net}_b$batch.log" 2>&1
  echo "$2 split=$1 exit code $?" | tee -a "$out/log.txt"
  gzip -f "$out/$2_${net}_b$batch.json"
}
for i in $(seq "$pairs"); do run 1 on$i; run 0 off$i; run 0 off${i}b; run 1 on${i}b; done
python3 "$here/../fusion/split_table.py" "$out" "$net" "$batch" | tee "$out/table.md"
