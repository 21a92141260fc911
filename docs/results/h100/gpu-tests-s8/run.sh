#!/bin/bash
# Device call 4 of session 8 (2026-11-23): tests/gpu on this session's final code, the three networks built at batch
# 1 / 8 / 32 with the default (one kernel a level; cubins precompiled on the CPU machine, all hits here:
#   SNN_CACHE_DIR=.carry/cache_ab python3 -m cli build network_specs/NET.yaml --gpu h100 --batch 1,8,32 -j 2).
set -u
[ -d .carry/cache_ab ] || tar xJf .carry/cache_ab.tar.xz -C .carry
export PYTHONPATH=$PWD SNN_CACHE_DIR=$PWD/.carry/cache_ab SNN_PHOTOS=$PWD/.carry/photos PYTHONUNBUFFERED=1
export SNN_GIT_COMMIT=$(cat .carry/commit) SNN_RESULTS=$OUT/pytest_results
mkdir -p "$SNN_RESULTS"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; echo "commit $SNN_GIT_COMMIT"; } > $OUT/env.txt 2>&1
for n in resnet152 densenet201 vgg19; do
    timeout 120 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8,32 -j 16 2>&1 | tail -1
done > $OUT/build.log 2>&1
cat $OUT/build.log
timeout $((580 - SECONDS)) python3 -X faulthandler -m pytest -q tests/gpu -p no:cacheprovider -rs > $OUT/pytest_gpu.log 2>&1
echo "pytest exit $? at $SECONDS s"; tail -3 $OUT/pytest_gpu.log
cd $OUT && tar czf pytest_results.tgz pytest_results && rm -rf pytest_results
