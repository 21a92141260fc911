#!/bin/bash
# Device call 9 (session 2): the planner with warp-groups for 1x1 convs. GPU tests (every kernel of the three
# networks vs float64, graph, runtime); ResNet-152 and DenseNet-201 calibrated (new kernels measured) + e2e b1/b8.
set -u
export PYTHONPATH=$PWD SNN_CACHE_DIR=$PWD/.carry/cache2/cubins SNN_PHOTOS=$PWD/.carry/photos PYTHONUNBUFFERED=1
export SNN_GIT_COMMIT=$(cat .carry/commit) SNN_RESULTS=$OUT/r/pytest_results
R=$OUT/r; mkdir -p "$R" "$SNN_RESULTS"
P=$PWD/.carry/photos
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  echo "commit $SNN_GIT_COMMIT"; } > "$R/env.txt" 2>&1
T0=$SECONDS
{ for n in resnet152 densenet201 vgg19; do
  timeout 60 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8 -j 16 2>&1 | tail -2; done
} > "$R/build.log" 2>&1
timeout 150 python3 -X faulthandler -m pytest -q tests/gpu -p no:cacheprovider -rs -x > "$R/pytest_gpu.log" 2>&1
echo "pytest exit $? at $((SECONDS-T0)) s" >> "$R/pytest_gpu.log"
for n in resnet152 densenet201; do cp .carry/side/calibration_sidecar_${n}_fitted.json generated/$n/h100/calibration.json; done
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -X faulthandler -c "import cli; cli.run_main()" "$@"; echo "exit $? at $((SECONDS-T0)) s"; }
{
snn 60 calibrate --spec network_specs/resnet152.yaml --batch 1,8 --images "$P" --out "$R/resnet152"
cp generated/resnet152/h100/calibration.json "$R/resnet152/calibration_sidecar.json"
snn 60 bench e2e --spec network_specs/resnet152.yaml --batch 1,8 --sparsity-profile 0.7 --images "$P" --out "$R/resnet152"
snn 100 calibrate --spec network_specs/densenet201.yaml --batch 1,8 --levels 0.4:0.9:0.1 --images "$P" --out "$R/densenet201"
cp generated/densenet201/h100/calibration.json "$R/densenet201/calibration_sidecar.json"
snn $((570-SECONDS+T0)) bench e2e --spec network_specs/densenet201.yaml --batch 1,8 --sparsity-profile 0.7 --images "$P" --out "$R/densenet201"
} > "$R/bench.log" 2>&1
tail -4 "$R/pytest_gpu.log"; grep -E "^\+ snn-run|^exit|b[0-9]+: snn|Fatal|Error" "$R/bench.log" | tail -20
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/r/*/e2e_*.json")):
    d = json.load(open(f))
    for b, rec in d["runs"].items():
        print(d["network"], b, rec.get("kernel_sum"), rec.get("notes"))
PY
cd "$OUT" && tar czf r.tgz r && rm -rf r
