#!/bin/bash
# The tensor-core conv kernel's GPU checks: every case of tests/gpu/test_tensorcore_gpu.py against float64
# (tile shapes, 32- and 64-channel chunks, K split in and out of a cluster, stride 2, ragged M, residual) and the
# 16-bit engine tests (tests/gpu/test_api_gpu.py: the kernel forced onto a ResNet block's layers), then the
# kernel cases under compute-sanitizer memcheck and racecheck.
#   bash docs/results/h100/sixteen-bit/tensorcore_checks.sh OUT_DIR
set -uo pipefail
out=${1:?usage: tensorcore_checks.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/../../../.."
. docs/results/h100/env.sh
env_report > "$out/env_tensorcore_checks.txt"
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_tensorcore_gpu.py tests/gpu/test_api_gpu.py -k "tensorcore or sixteen" \
  2>&1 | tail -4 | tee "$out/tensorcore_gpu_tests.log"
# --report-api-errors no: cuda-python probes optional driver entry points; those host-side answers are not kernel errors
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 --target-processes all \
    python3 -m pytest -q -p no:cacheprovider tests/gpu/test_tensorcore_gpu.py > "$out/tensorcore_$tool.log" 2>&1
  echo "$tool exit code: $? (0: no error found)" | tee -a "$out/tensorcore_$tool.log"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$out/tensorcore_$tool.log" | tail -3
done
