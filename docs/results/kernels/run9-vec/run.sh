#!/bin/bash
# Device call 7 of 2026-11-23 (session 3): thread-contiguous output channels (emit.render_sparse(vec=True)).
# Cubins precompiled here: python3 tools/check_kernels.py compile --vec --candidates
#   docs/results/kernels/run8-model/predictions.json --cache .carry/kcache -j 2 --prune
export PYTHONPATH=.; mkdir -p $OUT/bench
SNN_CACHE_DIR=.carry/kcache timeout 200 python3 -m pytest -q tests/gpu/test_kernels.py -k vec -p no:cacheprovider > $OUT/pytest_vec.log 2>&1
echo "pytest rc=$?"; tail -2 $OUT/pytest_vec.log
timeout 300 python3 tools/check_kernels.py bench --vec --candidates docs/results/kernels/run8-model/predictions.json \
    --reps 25 --cache .carry/kcache --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|spills" $OUT/bench/bench.log | head -5; tail -40 $OUT/bench/vec_table.md
