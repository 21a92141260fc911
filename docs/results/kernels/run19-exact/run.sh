#!/bin/bash
# Device call 6 of session 5 (2026-11-23): warp-tiled blocks that tile 7 / 14 / 28 exactly (2x7 warp tiles,
# 4x4 tiles in 7-warp blocks, ...) against the 8x8 / 8x16 blocks of run18 (which pad 14 to 16 and 28 to 32),
# batch 32, sparsity 0.7; cubins compiled there (-j 16) where .carry/kcache19 lacks them.
export PYTHONPATH=.; mkdir -p $OUT/bench
tar xJf .carry/kcache19.tar.xz -C .carry
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
timeout 500 python3 tools/check_kernels.py bench --ws-exact --batches 32 --levels 0.7 \
    --reps 20 --cache .carry/kcache19 --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|Error|error|compiled" $OUT/bench/bench.log | head -5
cat $OUT/bench/top_table.md
