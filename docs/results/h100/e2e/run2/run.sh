#!/bin/bash
# Device call 2 (session 2): VGG-19 b32 crash with faulthandler; ResNet-152 e2e with static layers; DenseNet-201 calibrate + e2e.
set -u
export PYTHONPATH=$PWD SNN_CACHE_DIR=$PWD/.carry/cache/cubins SNN_PHOTOS=$PWD/.carry/photos PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p "$R"
P=$PWD/.carry/photos
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'torchvision', torchvision.__version__)"
  echo "commit $(cat .carry/commit)"; } > "$R/env.txt" 2>&1
T0=$SECONDS
for n in resnet152 vgg19 densenet201; do
  timeout 60 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8,32 -j 16 2>&1 | tail -2
done > "$R/build.log" 2>&1
for n in resnet152 vgg19; do cp .carry/side/calibration_sidecar_$n.json generated/$n/h100/calibration.json; done
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -X faulthandler -c "import cli; cli.run_main()" "$@"; echo "exit $? at $((SECONDS-T0)) s"; }
{
snn 40 calibrate --spec network_specs/vgg19.yaml --batch 1,8,32 --images "$P"
snn 60 bench e2e --spec network_specs/vgg19.yaml --batch 32 --sparsity-profile 0.7 --images "$P" --out "$R/vgg19_b32"
snn 40 calibrate --spec network_specs/resnet152.yaml --batch 1,8,32 --images "$P" --out "$R/resnet152"
snn 80 bench e2e --spec network_specs/resnet152.yaml --batch 1,8,32 --sparsity-profile 0.7 --images "$P" --out "$R/resnet152"
snn 130 calibrate --spec network_specs/densenet201.yaml --batch 1,8 --levels 0.4:0.9:0.1 --images "$P" --out "$R/densenet201"
cp generated/densenet201/h100/calibration.json "$R/calibration_sidecar_densenet201.json"
snn 80 bench e2e --spec network_specs/densenet201.yaml --batch 1,8 --sparsity-profile 0.7 --images "$P" --out "$R/densenet201"
snn 70 calibrate --spec network_specs/densenet201.yaml --batch 32 --levels 0.4:0.9:0.1 --images "$P" --out "$R/densenet201_b32"
cp generated/densenet201/h100/calibration.json "$R/calibration_sidecar_densenet201.json"
snn 50 bench e2e --spec network_specs/densenet201.yaml --batch 32 --sparsity-profile 0.7 --images "$P" --out "$R/densenet201_b32"
} > "$R/bench.log" 2>&1
grep -E "^\+ snn-run|^exit|b[0-9]+: snn|Fatal|Segmentation|File \"|Error" "$R/bench.log" | tail -60
cd "$OUT" && tar czf r.tgz r && rm -rf r
