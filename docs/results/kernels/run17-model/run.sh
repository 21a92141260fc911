#!/bin/bash
# Device call 4 of session 5 (2026-11-23): the warp-tiled kernels against float64 (ragged shapes included),
# then the pre-registered cost-model check: picks.json (written and committed before this call by
#   python3 tools/fit_costmodel.py picks --out docs/results/kernels/run17-model/picks.json --batches 8,32 --no-1x1
# ) timed: every grid config and both models' picks, eight 3x3 layers, batch 8 and 32, sparsity 0.6 / 0.8.
# Cubins precompiled here:
#   python3 tools/check_kernels.py compile --candidates docs/results/kernels/run17-model/picks.json --cache .carry/kcache17 -j 2
#   tar cJf .carry/kcache17.tar.xz -C .carry kcache17
# Scored afterwards on the CPU machine:
#   python3 tools/fit_costmodel.py scorepicks docs/results/kernels/run17-model/picks.json \
#       docs/results/kernels/run17-model/bench/bench.json --md docs/results/kernels/run17-model/picks_table.md
export PYTHONPATH=.; mkdir -p $OUT/bench
tar xJf .carry/kcache17.tar.xz -C .carry
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
SNN_CACHE_DIR=.carry/kcache17 timeout 150 python3 -m pytest -q tests/gpu/test_kernels.py -k warp_tiled -p no:cacheprovider \
    > $OUT/pytest_ws.log 2>&1
echo "pytest rc=$?"; tail -2 $OUT/pytest_ws.log
timeout 380 python3 tools/check_kernels.py bench --candidates docs/results/kernels/run17-model/picks.json \
    --reps 20 --cache .carry/kcache17 --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|Error|error" $OUT/bench/bench.log | head -5; tail -3 $OUT/bench/bench.log
