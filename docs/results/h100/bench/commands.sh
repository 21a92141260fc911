#!/usr/bin/env bash
# The exact commands behind docs/results/h100/bench/ (one device call, H100, from a copy of the
# repository with the cubin cache carried in cubins/ and the photos in photos/):
#   SNN_GIT_COMMIT=<commit> docs/results/h100/bench/commands.sh cubins photos $OUT/results
# then, on a machine with matplotlib:  snn-run bench report docs/results/h100/bench
set -uo pipefail
cache=$1 photos=$2 out=$3
mkdir -p "$out"
export PYTHONPATH=$PWD SNN_CACHE_DIR=$cache PYTHONUNBUFFERED=1
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -c "import cli; cli.run_main()" "$@"; echo "exit $?"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'torchvision', torchvision.__version__)"
  python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)" 2>&1 | tail -1
  python3 -c "import pynvml; print('pynvml ok')" 2>&1 | tail -1
  echo "commit ${SNN_GIT_COMMIT:-?}"; } > "$out/env.txt" 2>&1
for n in resnet152 densenet201 vgg19; do
  python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8,32 -j 16 2>&1 | tail -2
done > "$out/build.log"
{
# 1. per-layer speedups (Figs. 10-11): every distinct shape of ResNet-152 and VGG-19; DenseNet-201's
#    4 distinct 3x3 shapes plus 1x1 shapes evenly spaced, 16 in all
snn 100 bench layers --spec network_specs/resnet152.yaml --batch 1,8,32 --levels 0.5,0.7,0.9 --images "$photos" --out "$out"
snn 80 bench layers --spec network_specs/densenet201.yaml --batch 1,8,32 --levels 0.5,0.7,0.9 --images "$photos" --max-shapes 16 --out "$out"
snn 80 bench layers --spec network_specs/vgg19.yaml --batch 1,8,32 --levels 0.5,0.7,0.9 --images "$photos" --out "$out"
# 2. whole network (Figs. 12-13) with every ReLU feeding a conv set to 0.7 sparsity
snn 60 bench e2e --spec network_specs/resnet152.yaml --batch 1,8,32 --sparsity-profile 0.7 --images "$photos" --out "$out"
snn 80 bench e2e --spec network_specs/densenet201.yaml --batch 1,8,32 --sparsity-profile 0.7 --images "$photos" --out "$out"
snn 45 bench e2e --spec network_specs/vgg19.yaml --batch 1,8,32 --sparsity-profile 0.7 --images "$photos" --out "$out"
# 3. calibration of the ResNet-152 manifest, batch 1, every built level, and the sampled exhaustive
#    comparison (4 layers x 24 configs at 0.7; the cubins were built ahead into the carried cache)
snn 60 calibrate --spec network_specs/resnet152.yaml --batch 1 --images "$photos" --out "$out" --exhaustive
cp generated/resnet152/h100/calibration.json "$out/calibration_sidecar_resnet152.json" 2>/dev/null
gzip -c generated/resnet152/h100/manifest.json > "$out/manifest_resnet152_calibrated.json.gz" 2>/dev/null
} 2>&1 | tee "$out/bench.log"
