#!/bin/bash
# Device call 7 of session 7 (2026-11-23): bench-s7 again (same kernels; the spread of cuDNN's algorithm picks between runs
# moved bench-s6/s6b/s6c's batch-1 geomean 3.24 / 3.10 / 2.78 with the same kernels), `bench layers` only, no tests/gpu:
# issue 7's eight 3x3 layers (ResNet-152 and DenseNet-201) and the six ResNet-152 1x1 shapes, batch 1 and 32, levels
# 0.5 / 0.7 / 0.9 / 0.99, useful TFLOP/s against an FP32 peak measured in the same run; then tests/gpu with the
# three networks built at batch 1 / 8 / 32 (every planned kernel against float64). Cubins precompiled on the CPU
# machine (all hits here):
#   SNN_CACHE_DIR=.carry/cache_ab python3 -m cli build network_specs/NET.yaml --gpu h100 --batch 1,8,32 -j 2
#   tar cJf .carry/cache_ab.tar.xz -C .carry cache_ab
# then, on a machine with matplotlib:  snn-run bench report docs/results/h100/bench-s7b
set -u
[ -d .carry/cache_ab ] || tar xJf .carry/cache_ab.tar.xz -C .carry
export PYTHONPATH=$PWD SNN_CACHE_DIR=$PWD/.carry/cache_ab SNN_PHOTOS=$PWD/.carry/photos PYTHONUNBUFFERED=1
export SNN_GIT_COMMIT=$(cat .carry/commit) SNN_RESULTS=$OUT/pytest_results
mkdir -p "$SNN_RESULTS" $OUT/layers
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; echo "commit $SNN_GIT_COMMIT"; } > $OUT/env.txt 2>&1
for n in resnet152 densenet201 vgg19; do
    timeout 120 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8,32 -j 16 2>&1 | tail -1
done > $OUT/build.log 2>&1
cat $OUT/build.log
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -c "import cli; cli.run_main()" "$@"; echo "exit $?"; }
{
snn 200 bench layers --spec network_specs/resnet152.yaml --batch 1,32 --levels 0.5,0.7,0.9,0.99 --images .carry/photos \
    --layer layer1.0.conv2 --layer layer2.1.conv2 --layer layer3.1.conv2 --layer layer4.1.conv2 \
    --layer layer3.1.conv1 --layer layer3.1.conv3 --layer layer2.1.conv1 --layer layer2.1.conv3 \
    --layer layer4.1.conv1 --layer layer4.1.conv3 --out $OUT/layers
snn 120 bench layers --spec network_specs/densenet201.yaml --batch 1,32 --levels 0.5,0.7,0.9,0.99 --images .carry/photos \
    --layer features.denseblock1.denselayer1.conv2 --layer features.denseblock2.denselayer1.conv2 \
    --layer features.denseblock3.denselayer1.conv2 --layer features.denseblock4.denselayer1.conv2 --out $OUT/layers
} > $OUT/layers/bench.log 2>&1
grep -E "^\+|^exit|speedup" $OUT/layers/bench.log
echo "bench layers done at $SECONDS s"
rm -f $OUT/layers/*.png; rm -rf "$SNN_RESULTS"
