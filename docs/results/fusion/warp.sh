#!/bin/bash
# A change at batch 1 (to the dense FP32 and pair kernels: the warp tiles, codegen/dense.py WARP_TILES; sums;
# tf32x3, built with AFTER_BUILD; to the graph: transitions) in ResNet-152's and DenseNet-201's graphs: this checkout
# (after) against BEFORE_TREE (before), in one call. Both sides start from the same calibration
# (TUNING_DIR/NET_tuning.json.gz, re-keyed to each side's cubins by kernel name: rekey.py); after then measures what
# that file lacks (its new kernels: snn-run calibrate) and tries the shared shapes' dense candidates in the graph
# again (REGRAPH=0: the file's graph verdicts kept, the step redone only where a shape to try has none); with
# CALIBRATE=0 it keeps that calibration's choices as they are (a change to kernels that keep their names: both
# sides run the same kernels, each built from its own templates).
# Parts (PARTS, default "checks ab ncu"):
# - checks: the dense kernel's cases (tests/kernel_cases.py; CASES: another pytest -k selection) against float64 and
#   its warp tiles (SANITIZE: another --kernel-name filter) under compute-sanitizer memcheck (kernel_checks.log,
#   memcheck.log);
# - ab: after's calibration (after_NET_calibrate.log, after_NET_tuning.json.gz), then breakdown.py at BATCH in both
#   orders (after, before, before2, after2) and table.py's table (table.md: per kernel kind and conv shape);
# - ncu (after ab): Nsight Compute on DenseNet-201's 14x14 dense kernels in the graph, one at a time, each side on its
#   calibration (isolated.py: isolated_SIDE_densenet201_b1.md, the raw .csv.gz): the stalls the warp tiles address.
#   NCU_NET, NCU_KERNELS (an ncu --kernel-name filter) and NCU_SIDES (default "before after") profile others.
#   bash docs/results/fusion/warp.sh OUT PHOTO_DIR TUNING_DIR BEFORE_TREE
# BEFORE_TREE: git worktree add DIR COMMIT (or a copy of that commit's tree with a file .commit naming it).
# SNN_CACHE_DIR: a compiler cache filled on a CPU machine with the same builds (all hits here).
set -uo pipefail
out=$(realpath -m "${1:?usage: warp.sh OUT PHOTO_DIR TUNING_DIR BEFORE_TREE}"); photos=$(realpath "${2:?PHOTO_DIR}")
tdir=$(realpath "${3:?TUNING_DIR}"); before=$(realpath "${4:?BEFORE_TREE}")
here=$(cd "$(dirname "$0")" && pwd); after=$(cd "$here/../../.." && pwd)
PARTS=${PARTS:-checks ab ncu}; NETS=${NETS:-resnet152 densenet201}; CALIBRATE=${CALIBRATE:-1}; REGRAPH=${REGRAPH:-1}
CASES=${CASES:-dense or concat}   # the checks' kernel cases (pytest -k)
CAL_TIMEOUT=${CAL_TIMEOUT:-300}    # seconds calibrate may take (new kernels to measure, a new graph step)
BATCH=${BATCH:-1}                  # the batch built, calibrated and replayed (ncu: 1 only)
AFTER_BUILD=${AFTER_BUILD:-}       # more snn-codegen build options for the after side (e.g. --tf32x3)
SANITIZE=${SANITIZE-kns=t32s}      # the kernels memcheck looks at (compute-sanitizer --kernel-name; empty: all)
REMEASURE=${REMEASURE:-}           # after's kernels (a regex) calibrate measures again: their code changed (rekey.py)
NCU_NET=${NCU_NET:-densenet201}; NCU_SIDES=${NCU_SIDES:-before after}
NCU_KERNELS=${NCU_KERNELS:-regex:dconv_r1s1.*h14w14|dconv_r3s3.*h14w14}
mkdir -p "$out"
for tree in "$after" "$before"; do (
  cd "$tree" && . docs/results/env.sh
  [ "$tree" = "$after" ] && env_report > "$out/env.txt"
  for net in $NETS; do
    snn-codegen build "$net" --gpu "$GPU" --batch "$BATCH" -j 16 $([ "$tree" = "$after" ] && echo $AFTER_BUILD) 2>&1 | tail -1
    tin="$tdir/${net}_tuning.json.gz"; [ -f "$tin" ] || tin="$tdir/after_${net}_tuning.json.gz"   # a warp.sh output
    python3 "$here/rekey.py" "generated/$net/$GPU/manifest.json" "$tin" \
      "generated/$net/$GPU/tuning.json" $([ "$tree" = "$after" ] && [ "$CALIBRATE$REGRAPH" = 11 ] && echo --drop-graph "$BATCH") \
      ${REMEASURE:+$([ "$tree" = "$after" ] && echo --remeasure "$REMEASURE")}
  done
) done
cd "$after" && . docs/results/env.sh
if [[ " $PARTS " == *" checks "* ]]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py -k "$CASES" 2>&1 | tail -1 \
    | tee "$out/kernel_checks.log"
  compute-sanitizer --tool memcheck ${SANITIZE:+--kernel-name "$SANITIZE"} --report-api-errors no --error-exitcode 9 \
    --target-processes all python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py -k "$CASES" \
    > "$out/memcheck.log" 2>&1
  echo "memcheck exit code: $? (0: no error found)" | tee -a "$out/memcheck.log"
fi
if [[ " $PARTS " == *" ab "* ]]; then
  for net in $NETS; do
    [ "$CALIBRATE" = 1 ] || break
    timeout "$CAL_TIMEOUT" snn-run calibrate --spec "$net" --batch "$BATCH" --levels 0.4:0.9:0.1 --reps 15 --images "$photos" \
      > "$out/after_${net}_calibrate.log" 2>&1
    grep -E "measurement|^in the graph|^  [^ ]|rror" "$out/after_${net}_calibrate.log"
    gzip -c "generated/$net/$GPU/tuning.json" > "$out/after_${net}_tuning.json.gz"
  done
  bd() {  # SIDE TREE NET
    (cd "$2" && . docs/results/env.sh
     timeout 150 python3 "$here/breakdown.py" "$3" "$BATCH" "$photos" "$out/$1_$3_b$BATCH.json" > "$out/$1_$3_b$BATCH.log" 2>&1
     echo "$1 $3 exit $?: $(tail -1 "$out/$1_$3_b$BATCH.log" | cut -c1-160)")
  }
  mine="plus its own new kernels' and a new graph step's"; [ "$REGRAPH" = 1 ] || mine="plus its own new kernels' and shapes'"
  [ "$CALIBRATE" = 1 ] || mine="as it is"
  echo "after: this checkout (${SNN_GIT_COMMIT:-$(tree_commit "$after")})${AFTER_BUILD:+ built with $AFTER_BUILD} on $(basename "$tdir")'s calibration $mine;" \
       "before: $(tree_commit "$before") on $(basename "$tdir")'s." > "$out/sides.txt"
  for net in $NETS; do
    bd after "$after" $net; bd before "$before" $net; bd before2 "$before" $net; bd after2 "$after" $net
  done
  python3 "$here/table.py" "$out" > /dev/null
  gzip -f "$out"/*_b"$BATCH".json
  grep -B2 -A7 "^| network" "$out/table.md"
fi
if [[ " $PARTS " == *" ncu "* ]]; then
  for side in $NCU_SIDES; do (
    tree=$after; [ $side = before ] && tree=$before
    cd "$tree" && . docs/results/env.sh
    iso="$out/isolated_${side}_${NCU_NET}_b1"
    timeout 400 ncu --profile-from-start off --graph-profiling node --cache-control none --clock-control none \
      --kernel-name "$NCU_KERNELS" --metrics "$(python3 "$here/isolated.py" --metrics)" \
      --csv --page raw python3 "$here/breakdown.py" "$NCU_NET" 1 "$photos" --profile-one > "$iso.csv"
    python3 "$here/isolated.py" "$iso.csv" > "$iso.md"
    gzip -f "$iso.csv"
    echo "$side: $(head -1 "$iso.md")"
  ) done
fi
