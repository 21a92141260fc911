#!/bin/bash
# Two 1x1 convs in one launch (codegen/pair.py, runtime/pairs.py) in ResNet-152's graph at batch 1, against the same
# bundle and calibration with SNN_PAIRS=0 (each conv on its own kernel): breakdown.py in both orders (after, before,
# before2, after2), pair_table.py's table; before them the pair kernels against float64 (the template's cases and
# every kernel of the bundle) and under compute-sanitizer memcheck, and pair_probe.py (each pair config against the
# two dense kernels, batch 1 and 8, ten pairs back to back in a CUDA graph).
#   bash docs/results/fusion/pair.sh OUT PHOTO_DIR R152_TUNING
# R152_TUNING: a tuning.json (or .json.gz) for the bundle. SNN_CACHE_DIR: a compiler cache filled on a CPU machine
# with the same build (all hits here).
set -uo pipefail
out=$(realpath -m "${1:?usage: pair.sh OUT PHOTO_DIR R152_TUNING}"); photos=$(realpath "${2:?PHOTO_DIR}")
tuning=$(realpath "${3:?R152_TUNING}")
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cd "$here/../../.." && . docs/results/env.sh
env_report > "$out/env.txt"
snn-codegen build resnet152 --gpu "$GPU" --batch 1 -j 16 2>&1 | tail -1
case $tuning in *.gz) gunzip -c "$tuning";; *) cat "$tuning";; esac > generated/resnet152/$GPU/tuning.json
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py -k pair 2>&1 | tail -1 | tee "$out/kernel_checks.log"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_manifest_kernels.py 2>&1 | tail -1 | tee -a "$out/kernel_checks.log"
compute-sanitizer --tool memcheck --kernel-name kns=dpair_ --report-api-errors no --error-exitcode 9 \
  --target-processes all python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py -k pair > "$out/memcheck.log" 2>&1
echo "memcheck exit code: $? (0: no error found)" | tee -a "$out/memcheck.log"
timeout 300 python3 "$here/pair_probe.py" "$out/probe.json" > "$out/probe.log" 2>&1; echo "probe exit code: $?"
bd() {  # TAG [VAR=VALUE]
  (export $2; timeout 120 python3 "$here/breakdown.py" resnet152 1 "$photos" "$out/$1_resnet152_b1.json" \
    > "$out/$1_resnet152_b1.log" 2>&1; echo "$1 exit $?: $(tail -1 "$out/$1_resnet152_b1.log" | cut -c1-200)")
}
bd after SNN_PAIRS=1; bd before SNN_PAIRS=0; bd before2 SNN_PAIRS=0; bd after2 SNN_PAIRS=1
gzip -f "$out"/*_b1.json
python3 "$here/pair_table.py" "$out" | tee "$out/table.md"
