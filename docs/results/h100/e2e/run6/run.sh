#!/bin/bash
# Device call 6 (session 2): graph GPU tests with the device-launch probe of SWITCH bodies; VGG-19 batch 32 and
# ResNet-152 batch 1 e2e with it; the in-block channel split (groups) check + bench (tools/bench_groups.sh).
set -u
export PYTHONPATH=$PWD SNN_CACHE_DIR=$PWD/.carry/cache2/cubins SNN_PHOTOS=$PWD/.carry/photos PYTHONUNBUFFERED=1
export SNN_GIT_COMMIT=$(cat .carry/commit)
R=$OUT/r; mkdir -p "$R"
P=$PWD/.carry/photos
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  echo "commit $SNN_GIT_COMMIT"; } > "$R/env.txt" 2>&1
T0=$SECONDS
{ for n in resnet152 densenet201 vgg19; do
  timeout 60 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8,32 -j 16 2>&1 | tail -2; done
} > "$R/build.log" 2>&1
cp .carry/side/calibration_sidecar_vgg19_fitted.json generated/vgg19/h100/calibration.json
cp .carry/side/calibration_sidecar_resnet152_fitted.json generated/resnet152/h100/calibration.json
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -X faulthandler -c "import cli; cli.run_main()" "$@"; echo "exit $? at $((SECONDS-T0)) s"; }
{
snn 30 calibrate --spec network_specs/vgg19.yaml --batch 1,8,32 --images "$P"
snn 70 bench e2e --spec network_specs/vgg19.yaml --batch 32 --sparsity-profile 0.7 --images "$P" --out "$R/vgg19_b32"
snn 30 calibrate --spec network_specs/resnet152.yaml --batch 1,8 --images "$P"
snn 50 bench e2e --spec network_specs/resnet152.yaml --batch 1 --sparsity-profile 0.7 --images "$P" --out "$R/resnet152_b1" --no-energy
} > "$R/bench.log" 2>&1
timeout 120 python3 -X faulthandler -m pytest -q tests/gpu/test_graph_gpu.py -p no:cacheprovider -rs > "$R/pytest_graph.log" 2>&1
echo "pytest exit $? at $((SECONDS-T0)) s" >> "$R/pytest_graph.log"
grep -E "^\+ snn-run|^exit|b[0-9]+: snn|Fatal|File \"|Error|dense_layers" "$R/bench.log" | tail -30; tail -4 "$R/pytest_graph.log"
mkdir -p "$OUT/g"; OUT=$OUT/g timeout $((590-SECONDS+T0)) bash tools/bench_groups.sh > "$R/groups.log" 2>&1
echo "groups exit $? at $((SECONDS-T0)) s" >> "$R/groups.log"; tail -45 "$R/groups.log"
cd "$OUT" && mv g r/groups && tar czf r.tgz r && rm -rf r
