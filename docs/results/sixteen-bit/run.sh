#!/bin/bash
# snn in BF16 and FP16 (every conv on cuDNN's tensor cores, bias / residual / ReLU fused into the call) against
# torch.compile and the other dense baselines of each precision, end to end on one GPU: `snn-run bench e2e` on
# the photos with the trained-like sparsity profile (snn FP32 timed beside, uncalibrated), CUDA graphs, with the
# error against float64 over the eager model's in the same precision and the top-5 agreement.
#   bash docs/results/sixteen-bit/run.sh OUT PHOTO_DIR NET [BATCHES]     (one network a call: each fits 10 min)
# BATCHES other than the default 1,8 land in OUT/NET-bBATCHES; PRECISIONS (default all) picks the baselines' precisions.
# SNN_CACHE_DIR: a compiler cache filled on a CPU machine with the same build (all hits here).
set -uo pipefail
out=$(realpath -m "${1:?usage: run.sh OUT PHOTO_DIR NET [BATCHES]}"); photos=$(realpath "${2:?PHOTO_DIR}")
net=${3:?NET}; batches=${4:-1,8}
name=$net; [ "$batches" = 1,8 ] || name=$net-b${batches//,/-}
mkdir -p "$out"; here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." && . docs/results/env.sh
env_report > "$out/env_$name.txt"
{
  snn-codegen build "$net" --gpu "$GPU" --batch "$batches" -j 16 2>&1 | tail -1
  snn-run bench e2e --spec "$net" --batch "$batches" --images "$photos" --sparsity-profile trained --reps 30 \
    --precisions "${PRECISIONS:-fp32,tf32,fp16,bf16}" --out "$out/$name" 2>&1 | grep -v "Warning"
} 2>&1 | tee "$out/log_$name.txt"
gzip -f "$out/$name"/e2e_*.json 2>/dev/null   # the raw times, kept gzipped
# the engine alone (no baselines in the process): replay and call times, OUT/engine_b1.json
[ "$net" = resnet152 ] && python3 "$here/engine.py" "$out/engine_b1.json" --batch 1 2>&1 | grep -v Warning | tee "$out/engine_b1.log"
