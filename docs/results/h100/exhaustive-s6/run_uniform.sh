#!/bin/bash
# Device call 5 of session 6: the same 192 (layer, config) pairs as calibrate --exhaustive measured on real
# activations (calibrate_*.json.gz), timed on uniform random zeros at 0.7 by check_kernels (as run17-run22 were),
# to tell a real-input effect from a cost-model error. uniform_candidates.json was written from those files;
# cubins precompiled: python3 tools/check_kernels.py compile --candidates docs/results/h100/exhaustive-s6/uniform_candidates.json --cache .carry/kcache22 -j 2
export PYTHONPATH=.; mkdir -p $OUT/uniform
[ -d .carry/kcache22 ] || tar xJf .carry/kcache22.tar.xz -C .carry
timeout 300 python3 tools/check_kernels.py bench --candidates docs/results/h100/exhaustive-s6/uniform_candidates.json \
    --reps 20 --cache .carry/kcache22 --out $OUT/uniform -j 16 > $OUT/uniform/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|Error|error|compiled" $OUT/uniform/bench.log | head -5; tail -1 $OUT/uniform/bench.log
