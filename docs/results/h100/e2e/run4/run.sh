#!/bin/bash
# Device call 4 (session 2): ResNet-152 e2e, fitted ('snn') vs 'pipes' stage-3 plans, with the static rule;
# DenseNet-201 calibrate + e2e (fitted plans).
set -u
export PYTHONPATH=$PWD SNN_CACHE_DIR=$PWD/.carry/cache/cubins SNN_PHOTOS=$PWD/.carry/photos PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p "$R"
P=$PWD/.carry/photos
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'torchvision', torchvision.__version__)"
  echo "commit $(cat .carry/commit)"; } > "$R/env.txt" 2>&1
T0=$SECONDS
{ for n in resnet152 densenet201; do
  timeout 60 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8,32 -j 16 2>&1 | tail -2; done
  timeout 60 python3 -m cli build network_specs/resnet152.yaml --gpu h100 --batch 1,8 --model pipes --out generated_pipes -j 16 2>&1 | tail -2
} > "$R/build.log" 2>&1
cp .carry/side/calibration_sidecar_resnet152_fitted.json generated/resnet152/h100/calibration.json
cp .carry/side/calibration_sidecar_resnet152.json generated_pipes/resnet152/h100/calibration.json
cp .carry/side/calibration_sidecar_densenet201.json generated/densenet201/h100/calibration.json
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -X faulthandler -c "import cli; cli.run_main()" "$@"; echo "exit $? at $((SECONDS-T0)) s"; }
{
snn 40 calibrate --spec network_specs/resnet152.yaml --batch 1,8 --images "$P" --out "$R/resnet152_snn"
snn 70 bench e2e --spec network_specs/resnet152.yaml --batch 1,8 --sparsity-profile 0.7 --images "$P" --out "$R/resnet152_snn"
snn 60 calibrate --spec network_specs/resnet152.yaml --cache generated_pipes --batch 1,8 --images "$P" --out "$R/resnet152_pipes"
cp generated_pipes/resnet152/h100/calibration.json "$R/resnet152_pipes/calibration_sidecar.json"
snn 70 bench e2e --spec network_specs/resnet152.yaml --cache generated_pipes --batch 1,8 --sparsity-profile 0.7 --images "$P" --out "$R/resnet152_pipes"
snn 100 calibrate --spec network_specs/densenet201.yaml --batch 1,8 --levels 0.4:0.9:0.1 --images "$P" --out "$R/densenet201"
cp generated/densenet201/h100/calibration.json "$R/densenet201/calibration_sidecar.json"
snn 75 bench e2e --spec network_specs/densenet201.yaml --batch 1,8 --sparsity-profile 0.7 --images "$P" --out "$R/densenet201"
snn 80 calibrate --spec network_specs/densenet201.yaml --batch 32 --levels 0.4:0.9:0.1 --images "$P" --out "$R/densenet201_b32"
cp generated/densenet201/h100/calibration.json "$R/densenet201/calibration_sidecar.json"
snn $((585-SECONDS+T0)) bench e2e --spec network_specs/densenet201.yaml --batch 32 --sparsity-profile 0.7 --images "$P" --out "$R/densenet201_b32"
} > "$R/bench.log" 2>&1
grep -E "^\+ snn-run|^exit|b[0-9]+: snn|Fatal|File \"|Error" "$R/bench.log" | tail -40
cd "$OUT" && tar czf r.tgz r && rm -rf r
