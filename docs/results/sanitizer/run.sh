#!/bin/bash
# Every kernel of a bundle with odd shapes (odd_shapes.yaml: 5x5 and 7x7 kernels, stride 2 on odd sizes, channel
# counts no tile divides; batch 1 and 3, every level of the sweep), the epilogue kernel's cases in FP32, BF16 and
# FP16 (runtime/check.py's EPILOGUE_CASES: in place, residual, a channel prefix read at a wider pitch), the
# kernels that write a concat's channel slice and those that stage a pre-activation read in place
# (tests/kernel_cases.py's concat_slice_cases, pre_activation_cases) against float64, then the same checks under
# compute-sanitizer memcheck and racecheck.
#   bash docs/results/sanitizer/run.sh OUT_DIR
set -uo pipefail
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
. docs/results/env.sh
env_report > "$out/env.txt"
gen=$(mktemp -d)
snn-codegen build "$here/odd_shapes.yaml" --gpu "$GPU" --batch 1,3 --out "$gen" -j 16 2>&1 | tail -2 | tee "$out/build.log"
export SNN_GENERATED=$gen SNN_RESULTS=$out
check=(python3 -m pytest -q -p no:cacheprovider tests/gpu/test_manifest_kernels.py
       tests/gpu/test_kernels.py::test_epilogue_matches_float64 tests/gpu/test_kernels.py::test_kernels_write_a_concat_slice
       tests/gpu/test_kernels.py::test_kernels_apply_a_pre_activation)
"${check[@]}" 2>&1 | tail -3 | tee "$out/float64.log"
# --report-api-errors no: cuda-python probes optional driver entry points (cuGetProcAddress answers
# "invalid argument" for the ones this driver lacks); those host-side answers are not kernel errors.
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 --target-processes all "${check[@]}" \
    > "$out/$tool.log" 2>&1
  echo "$tool exit code: $? (0: no error found)" | tee -a "$out/$tool.log"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$out/$tool.log" | tail -3
done
