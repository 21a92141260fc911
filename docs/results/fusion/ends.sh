#!/bin/bash
# The two ends of the pass of this checkout against another's: the stem (the image's conv, its epilogue, the max
# pool) and the tail (past the last conv: pooling, the classifier, the fills left). Both trees built (batch 1,8) and
# given the same calibration, then breakdown.py per network, batch 1 in both orders (after, before, before2, after2),
# batch 8 once a side, after the float64 checks of this checkout's direct kernels (the image's conv,
# codegen/direct.py: tests/gpu/test_kernels.py), its bundles' kernels, memcheck on the direct kernels and its graphs
# against eager and torchvision (tests/gpu/test_graph_gpu.py); ends_table.py's table of each run's replay, its GPU
# activities and both ends' spans on the replay's timeline.
#   bash docs/results/fusion/ends.sh OUT PHOTO_DIR BEFORE_TREE R152_TUNING D201_TUNING
# BEFORE_TREE: a checkout of the commit to compare with (git worktree add DIR COMMIT; a file .commit names it where
# git cannot). *_TUNING: a tuning.json (or .json.gz) for each network's bundle, the same kernels on both sides.
# SNN_CACHE_DIR: a compiler cache filled on a CPU machine with the same builds (all hits here). NETS: the networks
# (default "resnet152 densenet201"; one a call where a call's time is short: the table reads every run in OUT);
# CHECKS=0 leaves the checks out (a call that only times).
set -uo pipefail
out=$(realpath -m "${1:?usage: ends.sh OUT PHOTO_DIR BEFORE_TREE R152_TUNING D201_TUNING}"); photos=$(realpath "${2:?PHOTO_DIR}")
before=$(realpath "${3:?BEFORE_TREE}"); r152=$(realpath "${4:?R152_TUNING}"); d201=$(realpath "${5:?D201_TUNING}")
here=$(cd "$(dirname "$0")" && pwd); after=$(cd "$here/../../.." && pwd)
mkdir -p "$out"
NETS=${NETS:-resnet152 densenet201}
tuning() { case $1 in *.gz) gunzip -c "$1";; *) cat "$1";; esac; }
for tree in "$after" "$before"; do (
  cd "$tree" && . docs/results/env.sh
  [ "$tree" = "$after" ] && env_report > "$out/env.txt"
  for n in $NETS; do
    snn-codegen build $n --gpu "$GPU" --batch 1,8 -j 16 2>&1 | tail -1
    tuning "$([ $n = resnet152 ] && echo "$r152" || echo "$d201")" > generated/$n/$GPU/tuning.json
  done
) done
[ "${CHECKS:-1}" = 0 ] || (cd "$after" && . docs/results/env.sh
 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py -k direct 2>&1 | tail -1 | tee "$out/kernel_checks.log"
 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_manifest_kernels.py -k "${NETS// / or }" 2>&1 | tail -1 | tee -a "$out/kernel_checks.log"
 compute-sanitizer --tool memcheck --kernel-name kns=dirconv_ --report-api-errors no --error-exitcode 9 \
   --target-processes all python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py -k direct > "$out/memcheck.log" 2>&1
 echo "memcheck exit code: $? (0: no error found)" | tee -a "$out/memcheck.log"
 SNN_PHOTOS=$photos timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_graph_gpu.py -k "${NETS// / or }" 2>&1 | tail -1 \
   | tee "$out/graph_checks.log")
bd() {  # TREE NET BATCH TAG
  (cd "$1" && . docs/results/env.sh && timeout 90 python3 docs/results/fusion/breakdown.py $2 $3 "$photos" "$out/$4_$2_b$3.json" \
    > "$out/$4_$2_b$3.log" 2>&1; echo "$4 $2 b$3 exit $?: $(tail -1 "$out/$4_$2_b$3.log" | cut -c1-200)")
}
for n in $NETS; do bd "$after" $n 1 after; bd "$before" $n 1 before; bd "$before" $n 1 before2; bd "$after" $n 1 after2; done
for n in $NETS; do bd "$after" $n 8 after; bd "$before" $n 8 before; done
gzip -f "$out"/*.json
python3 "$here/ends_table.py" "$out" | tee "$out/table.md"
