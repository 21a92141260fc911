#!/bin/bash
# Device call 7 of session 5 (2026-11-23): the GPU tests (tests/gpu) with warp-tiled kernels planned at batch 8 and 32, with the three
# networks built at batch 1/8/32 from the cache precompiled on the CPU machine (.carry/cache_gpu.tar.xz:
#   SNN_CACHE_DIR=.carry/cache_gpu python3 -m cli build network_specs/NET.yaml --gpu h100 --batch 1,8,32 -j 2).
set -u
tar xJf .carry/cache_gpu.tar.xz -C .carry
export PYTHONPATH=$PWD SNN_CACHE_DIR=$PWD/.carry/cache_gpu SNN_PHOTOS=$PWD/.carry/photos PYTHONUNBUFFERED=1
export SNN_GIT_COMMIT=$(cat .carry/commit) SNN_RESULTS=$OUT/pytest_results
mkdir -p "$SNN_RESULTS"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/env.txt 2>&1
echo "commit $SNN_GIT_COMMIT" >> $OUT/env.txt
for n in resnet152 densenet201 vgg19; do
    timeout 120 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8,32 -j 16 2>&1 | tail -1
done > $OUT/build.log 2>&1
cat $OUT/build.log
timeout 330 python3 -X faulthandler -m pytest -q tests/gpu -p no:cacheprovider -rs > $OUT/pytest_gpu.log 2>&1
echo "pytest exit $?"; tail -4 $OUT/pytest_gpu.log
# Call 10, after tests/gpu/test_kernels.py's checks were folded into one helper (same checks):
#   PYTHONPATH=. python3 -m pytest -q tests/gpu/test_kernels.py -p no:cacheprovider   -> pytest_kernels_after_refactor.log (6 passed)
