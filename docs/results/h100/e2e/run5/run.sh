#!/bin/bash
# Device call 5 (session 2): final kernels (fitted cost model). VGG-19 calibrate + e2e b1/8/32; bench layers for
# ResNet-152, DenseNet-201 (16 shapes), VGG-19 at batch 1/8/32, sparsity 0.5/0.7/0.9.
set -u
export PYTHONPATH=$PWD SNN_CACHE_DIR=$PWD/.carry/cache/cubins SNN_PHOTOS=$PWD/.carry/photos PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p "$R"
P=$PWD/.carry/photos
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'torchvision', torchvision.__version__)"
  echo "commit $(cat .carry/commit)"; } > "$R/env.txt" 2>&1
T0=$SECONDS
{ for n in resnet152 densenet201 vgg19; do
  timeout 60 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8,32 -j 16 2>&1 | tail -2; done
} > "$R/build.log" 2>&1
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -X faulthandler -c "import cli; cli.run_main()" "$@"; echo "exit $? at $((SECONDS-T0)) s"; }
{
snn 80 calibrate --spec network_specs/vgg19.yaml --batch 1,8,32 --images "$P" --out "$R/vgg19"
cp generated/vgg19/h100/calibration.json "$R/vgg19/calibration_sidecar.json"
snn 100 bench e2e --spec network_specs/vgg19.yaml --batch 1,8,32 --sparsity-profile 0.7 --images "$P" --out "$R/vgg19"
snn 110 bench layers --spec network_specs/resnet152.yaml --batch 1,8,32 --levels 0.5,0.7,0.9 --images "$P" --out "$R/layers"
snn 90 bench layers --spec network_specs/densenet201.yaml --batch 1,8,32 --levels 0.5,0.7,0.9 --images "$P" --max-shapes 16 --out "$R/layers"
snn $((585-SECONDS+T0)) bench layers --spec network_specs/vgg19.yaml --batch 1,8,32 --levels 0.5,0.7,0.9 --images "$P" --out "$R/layers"
} > "$R/bench.log" 2>&1
grep -E "^\+ snn-run|^exit|b[0-9]+: snn|Fatal|File \"|Error" "$R/bench.log" | tail -40
cd "$OUT" && tar czf r.tgz r && rm -rf r
