#!/bin/bash
# The pair kernel's resident configs (codegen/pair.py PairConfig.resident: the W1 share requested before the
# programmatic wait, the input tile whole, no copy or barrier a chunk) in ResNet-152's batch-1 graph, one call:
# pair.sh's checks (the pair kernels' cases and every kernel of the bundle against float64, memcheck) and phases
# (layer 3's chain, each config's time and phases' cycles), then warp.sh's A/B against BEFORE_TREE (a tree without
# them; FFMA bundles both) on stem/'s calibration as it is, so that only the pair kernels timed at load differ.
#   bash docs/results/fusion/resident.sh OUT PHOTO_DIR BEFORE_TREE
set -uo pipefail
out=$(realpath -m "${1:?usage: resident.sh OUT PHOTO_DIR BEFORE_TREE}"); photos=${2:?PHOTO_DIR}; before=${3:?BEFORE_TREE}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
PARTS="checks phases" bash "$here/pair.sh" "$out" "$photos" "$here/h200/stem/resnet152_tuning.json.gz" 2>&1 | tail -12
NETS=resnet152 BATCH=1 CALIBRATE=0 PARTS=ab bash "$here/warp.sh" "$out/ab" "$photos" "$here/h200/stem" "$before" 2>&1 \
  | grep -v _warn_once > "$out/ab.log"
grep -A6 '^| network' "$out/ab/table.md"
