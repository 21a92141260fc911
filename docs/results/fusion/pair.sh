#!/bin/bash
# Two 1x1 convs in one launch (codegen/pair.py, runtime/pairs.py) in ResNet-152's graph at batch 1. Parts (PARTS,
# default "checks probe phases ncu ab"):
# - checks: the pair kernels against float64 (the template's cases and every kernel of the bundle) and under
#   compute-sanitizer memcheck;
# - probe: pair_probe.py (each pair config against the two dense kernels, batch 1 and 8, ten pairs back to back in a
#   CUDA graph);
# - phases: pair_phases.py (layer 3's chain of a 3x3 and a pair kernel: each of its configs' time and its phases'
#   cycles);
# - ncu: Nsight Compute's counts of the same kernels (shared-memory wavefronts, instructions: ncu.csv);
# - loop: pair_phases.py's variants (the network's layer-3 pair with parts of its first conv's loop left out: what the
#   loop's time is made of; variants.log, variants.json);
# - ab: breakdown.py in both orders (after, before, before2, after2), pair_table.py's table (table.md) and table.py's
#   (breakdown.md: the replay's time per kernel kind and conv shape). after: this checkout
#   with its pair kernels; before: BEFORE_TREE's (a checkout of an earlier commit, built here, on the same
#   calibration), or without BEFORE_TREE this bundle with SNN_PAIRS=0 (each conv on its own kernel); with
#   BEFORE_TREE also one run of this bundle with SNN_PAIRS=0 (nopairs).
#   bash docs/results/fusion/pair.sh OUT PHOTO_DIR R152_TUNING [BEFORE_TREE]
# BEFORE_TREE: git worktree add DIR COMMIT (or a copy of that commit's tree with a file .commit naming it).
# R152_TUNING: a tuning.json (or .json.gz) for the bundle. SNN_CACHE_DIR: a compiler cache filled on a CPU machine
# with the same builds (all hits here).
set -uo pipefail
out=$(realpath -m "${1:?usage: pair.sh OUT PHOTO_DIR R152_TUNING [BEFORE_TREE]}"); photos=$(realpath "${2:?PHOTO_DIR}")
tuning=$(realpath "${3:?R152_TUNING}"); before=${4:+$(realpath "$4")}
here=$(cd "$(dirname "$0")" && pwd); after=$(cd "$here/../../.." && pwd)
PARTS=${PARTS:-checks probe phases ncu ab}
mkdir -p "$out"
for tree in "$after" $before; do (
  cd "$tree" && . docs/results/env.sh
  [ "$tree" = "$after" ] && env_report > "$out/env.txt"
  snn-codegen build resnet152 --gpu "$GPU" --batch 1 -j 16 2>&1 | tail -1
  case $tuning in *.gz) gunzip -c "$tuning";; *) cat "$tuning";; esac > generated/resnet152/$GPU/tuning.json
) done
cd "$after" && . docs/results/env.sh
if [[ " $PARTS " == *" checks "* ]]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py -k pair 2>&1 | tail -1 | tee "$out/kernel_checks.log"
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_manifest_kernels.py -k resnet152 2>&1 | tail -1 \
    | tee -a "$out/kernel_checks.log"
  compute-sanitizer --tool memcheck --kernel-name kns=dpair_ --report-api-errors no --error-exitcode 9 \
    --target-processes all python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py -k pair > "$out/memcheck.log" 2>&1
  echo "memcheck exit code: $? (0: no error found)" | tee -a "$out/memcheck.log"
fi
if [[ " $PARTS " == *" probe "* ]]; then
  timeout 300 python3 "$here/pair_probe.py" "$out/probe.json" > "$out/probe.log" 2>&1; echo "probe exit code: $?"
fi
if [[ " $PARTS " == *" phases "* ]]; then
  timeout 200 python3 "$here/pair_phases.py" "$out" > "$out/phases.log" 2>&1; echo "phases exit code: $?"
  tail -10 "$out/phases.log"
fi
if [[ " $PARTS " == *" ncu "* ]]; then
  metrics=l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,sm__sass_inst_executed_op_shared_ld.sum,smsp__inst_executed.sum,gpu__time_duration.sum
  rm -f "$out/ncu.csv"
  for tag in $(python3 -c "import sys; sys.path.insert(0, '$here'); import pair_phases as p; print(*[c.tag() for c in p.CONFIGS])"); do
    timeout 100 ncu --kernel-name regex:dpair_ --launch-skip 3 --launch-count 1 --metrics $metrics --csv \
      python3 "$here/pair_phases.py" "$out" ncu $tag 2>/dev/null | grep '^"' | grep -v '"ID"' >> "$out/ncu.csv"
  done
  echo "ncu rows: $(wc -l < "$out/ncu.csv")"
fi
if [[ " $PARTS " == *" loop "* ]]; then
  timeout 200 python3 "$here/pair_phases.py" "$out" variants > "$out/variants.log" 2>&1; echo "variants exit code: $?"
  tail -10 "$out/variants.log"
fi
if [[ " $PARTS " == *" ab "* ]]; then
  bd() {  # TAG TREE [VAR=VALUE]
    (cd "$2" && . docs/results/env.sh && export ${3:-SNN_PAIRS=1}
     timeout 120 python3 "$here/breakdown.py" resnet152 1 "$photos" "$out/$1_resnet152_b1.json" > "$out/$1_resnet152_b1.log" 2>&1
     echo "$1 exit $?: $(tail -1 "$out/$1_resnet152_b1.log" | cut -c1-200)")
  }
  if [ -n "$before" ]; then
    echo "after: this checkout (${SNN_GIT_COMMIT:-$(tree_commit "$after")}) with its pair kernels; before: $(tree_commit "$before")'s;" \
         "nopairs: this checkout with SNN_PAIRS=0. Same calibration." > "$out/sides.txt"
    bd after "$after"; bd before "$before"; bd before2 "$before"; bd after2 "$after"; bd nopairs "$after" SNN_PAIRS=0
  else
    echo "after: pair kernels where they measured faster at load; before: SNN_PAIRS=0 (each conv on its own kernel). Same bundle, same calibration." > "$out/sides.txt"
    bd after "$after"; bd before "$after" SNN_PAIRS=0; bd before2 "$after" SNN_PAIRS=0; bd after2 "$after"
  fi
  python3 "$here/table.py" "$out" > /dev/null && mv "$out/table.md" "$out/breakdown.md"   # per kind and conv shape
  gzip -f "$out"/*_b1.json
  python3 "$here/pair_table.py" "$out" | tee "$out/table.md"
fi
