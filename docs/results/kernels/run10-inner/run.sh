#!/bin/bash
# Device call 1 of session 4 (2026-11-23): nt 8 (two float4 a tap / pixel) and hoisted value loads.
# Cubins precompiled here: python3 tools/check_kernels.py compile --inner --vec --batches 1,32 --cache .carry/kcache -j 2
export PYTHONPATH=.; mkdir -p $OUT/bench
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
SNN_CACHE_DIR=.carry/kcache timeout 200 python3 -m pytest -q tests/gpu/test_kernels.py -k vec -p no:cacheprovider > $OUT/pytest_vec.log 2>&1
echo "pytest rc=$?"; tail -2 $OUT/pytest_vec.log
timeout 330 python3 tools/check_kernels.py bench --inner --batches 1,32 --levels 0.5,0.7,0.9 \
    --reps 20 --cache .carry/kcache --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|spills" $OUT/bench/bench.log | head -5
grep -E "^batch|geomean" $OUT/bench/inner_table.md
awk -F'|' 'NR>2 && $4+0==0.7 {print $2,$3,$4,$5,$6,$7,$8,$9,$11,$13}' $OUT/bench/inner_table.md
