#!/bin/bash
# The dense kernel's 3xTF32 tiles (snn-codegen build --tf32x3) against this tree's FFMA-only bundle (BEFORE_TREE, the
# same commit or an earlier one). Parts (PARTS, default "checks ab"):
# - checks: warp.sh's checks on the tiles' cases (float64; memcheck on the x3 kernels: OUT/checks);
# - ab: warp.sh's A/B per RUNS entry NET:BATCH (OUT/NET_bBATCH), both sides from the calibration in TUNING_ROOT/NET's
#   folder (resnet152: stem/, densenet201: transitions/), the after side measuring its new kernels and redoing the
#   in-graph step.
#   bash docs/results/fusion/tf32x3.sh OUT PHOTO_DIR BEFORE_TREE
# RUNS (default "resnet152:8 resnet152:1 densenet201:1"); TUNING_ROOT (default docs/results/fusion/h200).
# AGAIN="NET:BATCH ...": then those A/Bs once more on the calibration just made, as it is (CALIBRATE=0:
# OUT/NET_bBATCH_again), e.g. after a change to how the runtime chooses from it (runtime/tuning.py).
set -uo pipefail
out=$(realpath -m "${1:?usage: tf32x3.sh OUT PHOTO_DIR BEFORE_TREE}"); photos=${2:?PHOTO_DIR}; before=${3:?BEFORE_TREE}
here=$(cd "$(dirname "$0")" && pwd); warp="$here/warp.sh"
RUNS=${RUNS:-resnet152:8 resnet152:1 densenet201:1}; PARTS=${PARTS:-checks ab}
root=${TUNING_ROOT:-$here/h200}
declare -A tuning=([resnet152]=stem [densenet201]=transitions)
export AFTER_BUILD=--tf32x3
mkdir -p "$out"
if [[ " $PARTS " == *" checks "* ]]; then
  NETS=resnet152 PARTS=checks CASES="dense or concat" SANITIZE=kns=x3 bash "$warp" "$out/checks" \
    "$photos" "$root/stem" "$before" 2>&1 | tail -3
fi
ab() {  # NET BATCH DIR TUNING_DIR CALIBRATE: warp.sh's A/B into DIR (its output in DIR.log)
  NETS=$1 BATCH=$2 CALIBRATE=$5 CAL_TIMEOUT=250 PARTS=ab bash "$warp" "$3" "$photos" "$4" "$before" 2>&1 \
    | grep -v _warn_once > "$3.log"
  grep -A6 '^| network' "$3/table.md"
}
if [[ " $PARTS " == *" ab "* ]]; then
  for run in $RUNS; do net=${run%:*}; b=${run#*:}; ab "$net" "$b" "$out/${net}_b$b" "$root/${tuning[$net]}" 1; done
fi
for run in ${AGAIN:-}; do net=${run%:*}; b=${run#*:}; ab "$net" "$b" "$out/${net}_b${b}_again" "$out/${net}_b$b" 0; done
