#!/bin/bash
# Device call 3 of 2026-11-23 (session 3), commit 60dcfca. predictions.json was written and committed first:
#   python3 tools/fit_costmodel.py picks --out docs/results/kernels/run8-model/predictions.json
# cubins precompiled here: python3 tools/check_kernels.py compile --candidates docs/results/kernels/run8-model/predictions.json --cache .carry/kcache -j 2 --prune
export PYTHONPATH=.; mkdir -p $OUT/bench
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt 2>&1
timeout 540 python3 tools/check_kernels.py bench --candidates docs/results/kernels/run8-model/predictions.json --reps 25 \
    --cache .carry/kcache --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
python3 tools/fit_costmodel.py scorepicks docs/results/kernels/run8-model/predictions.json $OUT/bench/bench.json --md $OUT/scorepicks.md
# here, afterwards: python3 tools/plot_model_picks.py docs/results/kernels/run8-model/scorepicks.md docs/results/kernels/run8-model/picks.png
