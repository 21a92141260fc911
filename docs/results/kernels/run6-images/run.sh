#!/bin/bash
# Device call 1 of 2026-11-23 (session 3), commit fd82121 (the IB emitter; reverted afterwards: images.diff
# is its change). Cubins precompiled here: python3 tools/check_kernels.py compile --images --batches 8,32
# --cache .carry/kcache -j 2 (carried as .carry/kcache).
export OUT=$OUT SNN_GIT_COMMIT=$(cat .carry/commit); export PYTHONPATH=.
SNN_CACHE_DIR=.carry/kcache timeout 150 python3 -m pytest -q tests/gpu/test_kernels.py -k image -p no:cacheprovider > $OUT/pytest_images.log 2>&1
bash tools/bench_images.sh    # check --images, bench --images --batches 8,32 --levels 0.5,0.7,0.9,0.99 --reps 25, memcheck, racecheck
