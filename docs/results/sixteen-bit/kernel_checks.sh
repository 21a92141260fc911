#!/bin/bash
# The GPU checks of the kernels the 16-bit engine runs besides cuDNN: the tensor-core conv (every case of
# tests/gpu/test_tensorcore_gpu.py against float64: tile shapes, 32- and 64-channel chunks, K split in and out of a
# cluster, stride 2, ragged M, residual), the max pool (tests/gpu/test_maxpool_gpu.py against torch, FP32 too) and
# the 16-bit engine tests (tests/gpu/test_api_gpu.py: the tensor-core kernel forced onto a ResNet block's layers),
# then the kernel cases under compute-sanitizer memcheck and racecheck.
#   bash docs/results/sixteen-bit/kernel_checks.sh OUT_DIR
set -uo pipefail
out=${1:?usage: kernel_checks.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/../../.."
. docs/results/env.sh
env_report > "$out/env_kernel_checks.txt"
kernels=(tests/gpu/test_tensorcore_gpu.py tests/gpu/test_maxpool_gpu.py)
python3 -m pytest -q -p no:cacheprovider "${kernels[@]}" tests/gpu/test_api_gpu.py 2>&1 | tail -4 \
  | tee "$out/kernel_checks_gpu_tests.log"
# --report-api-errors no: cuda-python probes optional driver entry points; those host-side answers are not kernel errors
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 --target-processes all \
    python3 -m pytest -q -p no:cacheprovider "${kernels[@]}" > "$out/kernel_checks_$tool.log" 2>&1
  echo "$tool exit code: $? (0: no error found)" | tee -a "$out/kernel_checks_$tool.log"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$out/kernel_checks_$tool.log" | tail -3
done
