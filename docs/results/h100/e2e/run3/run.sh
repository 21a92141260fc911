#!/bin/bash
# Device call 3 (session 2): new cost model's kernels. ResNet-152 calibrate (+ exhaustive) + e2e, VGG-19 calibrate + e2e
# (b32: the BodyUnsupported fallback), GPU tests of the graph and runtime.
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
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -X faulthandler -c "import cli; cli.run_main()" "$@"; echo "exit $? at $((SECONDS-T0)) s"; }
{
snn 150 calibrate --spec network_specs/resnet152.yaml --batch 1,8,32 --images "$P" --out "$R/resnet152" --exhaustive
cp generated/resnet152/h100/calibration.json "$R/resnet152/calibration_sidecar.json"
snn 90 bench e2e --spec network_specs/resnet152.yaml --batch 1,8,32 --sparsity-profile 0.7 --images "$P" --out "$R/resnet152"
snn 45 calibrate --spec network_specs/vgg19.yaml --batch 1,8,32 --images "$P" --out "$R/vgg19"
cp generated/vgg19/h100/calibration.json "$R/vgg19/calibration_sidecar.json"
snn 90 bench e2e --spec network_specs/vgg19.yaml --batch 1,8,32 --sparsity-profile 0.7 --images "$P" --out "$R/vgg19"
} > "$R/bench.log" 2>&1
echo "pytest start $((SECONDS-T0)) s" >> "$R/bench.log"
timeout $((570-SECONDS+T0)) python3 -X faulthandler -m pytest -q tests/gpu/test_graph_gpu.py tests/gpu/test_runtime_gpu.py -p no:cacheprovider -rs -x > "$R/pytest_gpu.log" 2>&1
echo "pytest exit $? at $((SECONDS-T0)) s" >> "$R/pytest_gpu.log"
grep -E "^\+ snn-run|^exit|b[0-9]+: snn|Fatal|File \"|Error|pytest" "$R/bench.log" | tail -40; tail -8 "$R/pytest_gpu.log"
cd "$OUT" && tar czf r.tgz r && rm -rf r
