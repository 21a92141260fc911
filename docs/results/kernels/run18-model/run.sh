#!/bin/bash
# Device call 5 of session 5 (2026-11-23): a fresh check of the revised model (warp-tiled weight term from the
# SASS, 4x7 / 7x4 warp tiles out of the space; both decided on run17-model): picks.json written and committed
# before this call by
#   python3 tools/fit_costmodel.py picks --out docs/results/kernels/run18-model/picks.json --batches 8,32 --no-1x1 --levels 0.5,0.7,0.9
# (levels run17 did not measure), then the end-to-end A/B of docs/results/h100/e2e/run17 in the same call.
#   python3 tools/check_kernels.py compile --candidates docs/results/kernels/run18-model/picks.json --cache .carry/kcache17 -j 2
#   tar cJf .carry/kcache17.tar.xz -C .carry kcache17
export PYTHONPATH=.; mkdir -p $OUT/bench
tar xJf .carry/kcache17.tar.xz -C .carry
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
timeout 150 python3 tools/check_kernels.py bench --candidates docs/results/kernels/run18-model/picks.json \
    --reps 20 --cache .carry/kcache17 --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|Error|error" $OUT/bench/bench.log | head -5; tail -1 $OUT/bench/bench.log
BATCHES=8 bash docs/results/h100/e2e/run17/run.sh
