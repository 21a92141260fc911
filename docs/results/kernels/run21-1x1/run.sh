#!/bin/bash
# Device call 11 of session 5 (2026-11-23): warp-tiled blocks on the six ResNet-152 1x1 layers, never measured
# before: the cost model's picks were written and committed before this call by
#   python3 tools/fit_costmodel.py picks --out docs/results/kernels/run21-1x1/picks.json --batches 8,32 --only-1x1 --levels 0.6,0.8
# (ws_space opened to 1x1 stride-1 convs with one-row warp tiles, WS_TILES_1X1; no constant changed), and the
# grid (classic 1x1 configs incl. nt 8 1x7 tc 128, the session-4 winners, + warp-tiled ones) timed with them.
#   cp -r .carry/kcache13 .carry/kcache21
#   python3 tools/check_kernels.py compile --candidates docs/results/kernels/run21-1x1/picks.json --cache .carry/kcache21 -j 2 --prune
#   tar cJf .carry/kcache21.tar.xz -C .carry kcache21
export PYTHONPATH=.; mkdir -p $OUT/bench
tar xJf .carry/kcache21.tar.xz -C .carry
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
timeout 240 python3 tools/check_kernels.py bench --candidates docs/results/kernels/run21-1x1/picks.json \
    --reps 20 --cache .carry/kcache21 --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|Error|error|compiled" $OUT/bench/bench.log | head -5; tail -1 $OUT/bench/bench.log
