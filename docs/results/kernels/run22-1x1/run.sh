#!/bin/bash
# Device call 1 of session 6 (2026-11-23): the model with warp-tiled 1x1 convs planned (tc <= 128), predictions
# committed before the call by
#   python3 tools/fit_costmodel.py picks --out docs/results/kernels/run22-1x1/picks.json --batches 8,32 --only-1x1 --levels 0.7,0.9
# (levels no earlier 1x1 bench used; "previous" = 9118a6e, session 5's final model: classic kernels for 1x1)
# Cubins precompiled here:
#   python3 tools/check_kernels.py compile --candidates docs/results/kernels/run22-1x1/picks.json --cache .carry/kcache22 -j 2
# Scored afterwards: python3 tools/fit_costmodel.py scorepicks picks.json bench/bench.json --md picks_table.md
export PYTHONPATH=.; mkdir -p $OUT/bench
[ -d .carry/kcache22 ] || tar xJf .carry/kcache22.tar.xz -C .carry
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
timeout 240 python3 tools/check_kernels.py bench --candidates docs/results/kernels/run22-1x1/picks.json \
    --reps 20 --cache .carry/kcache22 --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|Error|error|compiled" $OUT/bench/bench.log | head -5; tail -1 $OUT/bench/bench.log
