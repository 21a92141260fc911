#!/bin/bash
# Device calls of session 8 (2026-11-23): the measured choice among candidate kernels (`snn-codegen build --candidates 3`,
# `snn-run calibrate` keeps the fastest) against the cost model's picks, on photos the calibration did not see:
# photos A (every other file of .carry/photos) calibrate, photos B (the rest) are benchmarked. `bash run.sh NETWORK`.
# Cubins precompiled on the CPU machine (all hits here):
#   SNN_CACHE_DIR=.carry/cache_s8 python3 -m cli build network_specs/NET.yaml --gpu h100 --batch 1,32 --candidates 3 -j 2
#   tar cJf .carry/cache_s8.tar.xz -C .carry cache_s8
# Then tests/gpu/test_manifest_kernels.py on the candidates build (every candidate against float64).
set -u
NET=$1
[ -d .carry/cache_s8 ] || tar xJf .carry/cache_s8.tar.xz -C .carry
rm -rf .carry/pa .carry/pb && mkdir -p .carry/pa .carry/pb
i=0; for f in $(ls .carry/photos | sort); do [ $((i % 2)) = 0 ] && d=pa || d=pb; cp .carry/photos/$f .carry/$d/; i=$((i+1)); done
export SNN_CACHE_DIR=$PWD/.carry/cache_s8 SNN_GIT_COMMIT=$(cat .carry/commit)
mkdir -p $OUT/$NET
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; echo "commit $SNN_GIT_COMMIT";
  echo "photos A: $(ls .carry/pa | tr '\n' ' ')"; echo "photos B: $(ls .carry/pb | tr '\n' ' ')"; } > $OUT/$NET/env.txt 2>&1
case $NET in
resnet152) L="--layer layer1.0.conv2 --layer layer2.1.conv2 --layer layer3.1.conv2 --layer layer4.1.conv2
   --layer layer3.1.conv1 --layer layer3.1.conv3 --layer layer2.1.conv1 --layer layer2.1.conv3
   --layer layer4.1.conv1 --layer layer4.1.conv3";;
densenet201) L="--layer features.denseblock1.denselayer1.conv2 --layer features.denseblock2.denselayer1.conv2
   --layer features.denseblock3.denselayer1.conv2 --layer features.denseblock4.denselayer1.conv2";;
esac
# DenseNet-201 (106 distinct shapes, ~7000 measurements): calibrate with 20 runs a measurement, bench e2e once a side
[ $NET = densenet201 ] && export CAL_REPS=20 E2E_ORDER="model tuned"
bash tools/tune_ab.sh $NET $PWD/.carry/pa $PWD/.carry/pb $L
echo "tune_ab done at $SECONDS s"
mkdir -p $OUT/check
SNN_GENERATED=$PWD/.carry/gen_tune/$NET/tuned SNN_RESULTS=$OUT/check timeout $((590 - SECONDS)) python3 -m pytest -q \
    tests/gpu/test_manifest_kernels.py -p no:cacheprovider > $OUT/check/pytest_kernels_$NET.log 2>&1
echo "pytest exit $? at $SECONDS s"; tail -2 $OUT/check/pytest_kernels_$NET.log
gzip -f $OUT/check/kernel_check_*.json 2>/dev/null
