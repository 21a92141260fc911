#!/bin/bash
# The dense kernel's 3xTF32 tiles (snn-codegen build --tf32x3) against this tree's FFMA-only bundle (BEFORE_TREE, the
# same commit or an earlier one), ResNet-152 at batch 8 and 1, in one call: warp.sh's checks on the tiles' cases
# (float64, memcheck on the x3 kernels: OUT/checks), then its A/B at each batch (OUT/b8, OUT/b1), both sides from
# TUNING_DIR's calibration, the after side measuring its new kernels and redoing the in-graph step.
#   bash docs/results/fusion/tf32x3.sh OUT PHOTO_DIR TUNING_DIR BEFORE_TREE
set -uo pipefail
out=${1:?usage: tf32x3.sh OUT PHOTO_DIR TUNING_DIR BEFORE_TREE}; photos=${2:?PHOTO_DIR}; tdir=${3:?TUNING_DIR}
before=${4:?BEFORE_TREE}; warp="$(cd "$(dirname "$0")" && pwd)/warp.sh"
export AFTER_BUILD=--tf32x3 NETS=resnet152
mkdir -p "$out"
PARTS=checks CASES="dense or concat" SANITIZE=kns=x3 bash "$warp" "$out/checks" "$photos" "$tdir" "$before" 2>&1 | tail -3
for b in 8 1; do
  BATCH=$b CAL_TIMEOUT=250 PARTS=ab bash "$warp" "$out/b$b" "$photos" "$tdir" "$before" 2>&1 | grep -v _warn_once \
    > "$out/log_b$b.txt"
  grep -A6 '^| network' "$out/b$b/table.md"
done
