#!/bin/bash
# The graph split (runtime/graph.py: the pass recorded as a head graph and the rest) against one graph: breakdown.py
# on the same bundle with SNN_GRAPH_SPLIT=1 and =0 in turn, in both orders, PAIRS times; a table of each run's replay
# (CUDA events), how long replay() takes to return, a call from an idle GPU (replay() + synchronize) and the call's
# share above the replay, which is what the split is for.
#   bash docs/results/fusion/split.sh OUT PHOTO_DIR NET BATCH [PAIRS]       (PAIRS: default 2)
# The bundle generated/NET/$GPU is built and calibrated first (fusion/run.sh's steps, or snn-codegen build + snn-run
# calibrate). PRECISION=bf16|fp16: the 16-bit engine instead, sixteen-bit/breakdown.py's snn side (it builds its own
# bundle and times random input: PHOTO_DIR is not read).
set -uo pipefail
out=$(realpath -m "${1:?usage: split.sh OUT PHOTO_DIR NET BATCH [PAIRS]}"); photos=$(realpath "${2:?PHOTO_DIR}")
net=${3:?NET}; batch=${4:?BATCH}; pairs=${5:-2}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cd "$here/../../.."
. docs/results/env.sh
env_report > "$out/env.txt"
breakdown=(python3 "$here/breakdown.py" "$net" "$batch" "$photos")   # then the JSON's path
[ -n "${PRECISION:-}" ] && breakdown=(python3 "$here/../sixteen-bit/breakdown.py" --no-compile "$net" "$PRECISION" "$batch")
run() {  # SPLIT TAG
  SNN_GRAPH_SPLIT=$1 "${breakdown[@]}" "$out/$2_${net}_b$batch.json" > "$out/$2_${net}_b$batch.log" 2>&1
  echo "$2 split=$1 exit code $?" | tee -a "$out/log.txt"
  gzip -f "$out/$2_${net}_b$batch.json"   # its timeline and activities: ~40 KB a run as text
}
for i in $(seq "$pairs"); do run 1 on$i; run 0 off$i; run 0 off${i}b; run 1 on${i}b; done
python3 "$here/split_table.py" "$out" "$net" "$batch" | tee "$out/table.md"
