#!/bin/bash
# Device call 7 of session 5 (2026-11-23): the model with 2x7 / 7x2 warp tiles and 7-row / 7-column blocks
# (after run19-exact), predictions committed before the call by
#   python3 tools/fit_costmodel.py picks --out docs/results/kernels/run20-model/picks.json --batches 8,32 --no-1x1 --levels 0.55,0.75,0.85
# Cubins precompiled here:
#   python3 tools/check_kernels.py compile --candidates docs/results/kernels/run20-model/picks.json --cache .carry/kcache17 -j 2
#   tar cJf .carry/kcache17.tar.xz -C .carry kcache17
# Scored afterwards: python3 tools/fit_costmodel.py scorepicks picks.json bench/bench.json --md picks_table.md
export PYTHONPATH=.; mkdir -p $OUT/bench
tar xJf .carry/kcache17.tar.xz -C .carry
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
timeout 400 python3 tools/check_kernels.py bench --candidates docs/results/kernels/run20-model/picks.json \
    --reps 20 --cache .carry/kcache17 --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|Error|error|compiled" $OUT/bench/bench.log | head -5; tail -1 $OUT/bench/bench.log
