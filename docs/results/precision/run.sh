#!/bin/bash
# 16-bit sparse kernels on one GPU: the kernel checks against float64 (tests/gpu/test_kernels.py, 16-bit cases
# included: OUT/kernel_checks.log), then bench16.py (per ResNet-152 conv shape at batch 1 and 8: the same config in
# FP32, BF16 and FP16 against cuDNN FP32, TF32, BF16 and FP16: OUT/bench16.json, OUT/log.txt), then dense16.py
# (ResNet-152 dense in BF16 / FP16 with cuDNN fused conv+bias(+add)+ReLU against torch.compile: OUT/dense16.*).
#   bash docs/results/precision/run.sh OUT
# SNN_CACHE_DIR: a compiler cache filled on a CPU machine (bench16.py --compile-only, the GPU tests' kernels).
set -uo pipefail
out=$(realpath -m "${1:?usage: run.sh OUT}"); mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." && . docs/results/env.sh
env_report > "$out/env.txt"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py 2>&1 | tail -3 > "$out/kernel_checks.log"
python3 "$here/bench16.py" "$out/bench16.json" > "$out/log.txt" 2>&1
echo "exit $?" >> "$out/log.txt"
python3 "$here/dense16.py" "$out/dense16.json" > "$out/dense16.log" 2>&1
echo "exit $?" >> "$out/dense16.log"
