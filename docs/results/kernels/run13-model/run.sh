#!/bin/bash
# Device call 6 of session 4 (2026-11-23): the fresh held-out bench of the revised cost model (nt 8 for
# 1x1, predicated-body term, stage 2 keeping half, L2 7000 GB/s) against session 3's (77428b3).
# predictions.json was written and committed before this ran:
#   python3 tools/fit_costmodel.py picks --out docs/results/kernels/run13-model/predictions.json
# Cubins precompiled here: python3 tools/check_kernels.py compile --candidates <that> --cache .carry/kcache13 -j 2
# Scored afterwards, on the CPU: python3 tools/fit_costmodel.py scorepicks predictions.json bench.json --md scorepicks.md
export PYTHONPATH=.; mkdir -p $OUT/bench
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
timeout 420 python3 tools/check_kernels.py bench --candidates docs/results/kernels/run13-model/predictions.json \
    --reps 20 --cache .carry/kcache13 --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|spills" $OUT/bench/bench.log | head -5; tail -3 $OUT/bench/bench.log
