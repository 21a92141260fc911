#!/bin/bash
# Side branches (runtime/branches.py: ResNet's downsample beside conv2 in the CUDA graph) off and on, one bundle and
# one calibration: NET (default resnet152) built for BATCHES (default "1 8") and given TUNING, its graph checked
# against eager and torchvision (tests/gpu/test_graph_gpu.py), then breakdown.py with KNOB=0 (before) and =1
# (after), batch 1 in both orders (after, before, before2, after2), batch 8 once a side; table.py's table of the
# runs. KNOB (default SNN_BRANCHES): the runtime switch compared, e.g. SNN_PRIORITIES (the main chain's stream
# priority above the side branches', runtime/graph.py).
#   bash docs/results/fusion/branches.sh OUT PHOTO_DIR TUNING [NET]
# TUNING: a tuning.json (or .json.gz) for the bundle. SNN_CACHE_DIR: a compiler cache filled on a CPU machine with
# the same build (all hits here).
set -uo pipefail
out=$(realpath -m "${1:?usage: branches.sh OUT PHOTO_DIR TUNING [NET]}"); photos=$(realpath "${2:?PHOTO_DIR}")
tuning=$(realpath "${3:?TUNING}"); net=${4:-resnet152}
KNOB=${KNOB:-SNN_BRANCHES}; BATCHES=${BATCHES:-1 8}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" && cd "$here/../../.." && . docs/results/env.sh
env_report > "$out/env.txt"
snn-codegen build "$net" --gpu "$GPU" --batch "${BATCHES// /,}" -j 16 2>&1 | tail -1
case $tuning in *.gz) gunzip -c "$tuning";; *) cat "$tuning";; esac > "generated/$net/$GPU/tuning.json"
SNN_PHOTOS=$photos timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_graph_gpu.py -k "$net" 2>&1 \
  | tail -1 | tee "$out/graph_checks.log"
bd() {  # KNOB's value, BATCH, SIDE
  env "$KNOB=$1" timeout 90 python3 "$here/breakdown.py" "$net" $2 "$photos" "$out/$3_${net}_b$2.json" \
    > "$out/$3_${net}_b$2.log" 2>&1
  echo "$3 b$2 exit $?: $(tail -1 "$out/$3_${net}_b$2.log" | cut -c1-200)"
}
bd 1 1 after; bd 0 1 before; bd 0 1 before2; bd 1 1 after2
[[ " $BATCHES " == *" 8 "* ]] && { bd 1 8 after; bd 0 8 before; }
{ echo "before: $KNOB=0; after: $KNOB=1. Same bundle, same calibration."
  echo; python3 "$here/table.py" "$out"; } > "$out/table.md"
gzip -f "$out"/*.json
head -20 "$out/table.md"
