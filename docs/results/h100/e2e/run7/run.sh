#!/bin/bash
# Device call 7 (session 2): final main. GPU tests; ResNet-152 e2e b1/b8 (calibrated); VGG-19 b8/b32 with the
# captured graph written as DOT (the b32 crash); snn-run infer on the photos (graph path).
set -u
export PYTHONPATH=$PWD SNN_CACHE_DIR=$PWD/.carry/cache2/cubins SNN_PHOTOS=$PWD/.carry/photos PYTHONUNBUFFERED=1
export SNN_GIT_COMMIT=$(cat .carry/commit) SNN_RESULTS=$OUT/r/pytest_results
R=$OUT/r; mkdir -p "$R" "$SNN_RESULTS"
P=$PWD/.carry/photos
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'torchvision', torchvision.__version__)"
  echo "commit $SNN_GIT_COMMIT"; } > "$R/env.txt" 2>&1
T0=$SECONDS
{ for n in resnet152 densenet201 vgg19; do
  timeout 60 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8,32 -j 16 2>&1 | tail -2; done
} > "$R/build.log" 2>&1
timeout 230 python3 -X faulthandler -m pytest -q tests/gpu -p no:cacheprovider -rs > "$R/pytest_gpu.log" 2>&1
echo "pytest exit $? at $((SECONDS-T0)) s" >> "$R/pytest_gpu.log"
cp .carry/side/calibration_sidecar_resnet152_fitted.json generated/resnet152/h100/calibration.json
cp .carry/side/calibration_sidecar_vgg19_fitted.json generated/vgg19/h100/calibration.json
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -X faulthandler -c "import cli; cli.run_main()" "$@"; echo "exit $? at $((SECONDS-T0)) s"; }
{
snn 30 calibrate --spec network_specs/resnet152.yaml --batch 1,8 --images "$P"
snn 60 bench e2e --spec network_specs/resnet152.yaml --batch 1,8 --sparsity-profile 0.7 --images "$P" --out "$R/resnet152"
snn 40 infer "$P" --spec network_specs/resnet152.yaml --batch 8 --output "$R/infer_resnet152.json"
snn 30 calibrate --spec network_specs/vgg19.yaml --batch 8,32 --images "$P"
SNN_GRAPH_DOT=$R/vgg19_graph snn $((560-SECONDS+T0)) bench e2e --spec network_specs/vgg19.yaml --batch 8,32 --sparsity-profile 0.7 --images "$P" --out "$R/vgg19_dot" --no-energy
} > "$R/bench.log" 2>&1
tail -5 "$R/pytest_gpu.log"; grep -E "^\+ snn-run|^exit|b[0-9]+: snn|Fatal|File \"|Error|written|skipped|sparse" "$R/bench.log" | tail -30
ls -la "$R" | head -30
cd "$OUT" && tar czf r.tgz r && rm -rf r
