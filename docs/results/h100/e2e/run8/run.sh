#!/bin/bash
# Device call 8 (session 2): final rules (static + unpaid decisions), e2e at batch 1 and 8 for the three networks,
# calibrations re-applied from the carried measurements (runs 4 and 5; no new measurement).
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
for n in resnet152 densenet201 vgg19; do cp .carry/side/calibration_sidecar_${n}_fitted.json generated/$n/h100/calibration.json; done
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -X faulthandler -c "import cli; cli.run_main()" "$@"; echo "exit $? at $((SECONDS-T0)) s"; }
{
snn 30 calibrate --spec network_specs/resnet152.yaml --batch 1,8 --images "$P" --out "$R/resnet152"
snn 60 bench e2e --spec network_specs/resnet152.yaml --batch 1,8 --sparsity-profile 0.7 --images "$P" --out "$R/resnet152"
snn 40 calibrate --spec network_specs/densenet201.yaml --batch 1,8 --levels 0.4:0.9:0.1 --images "$P" --out "$R/densenet201"
snn 70 bench e2e --spec network_specs/densenet201.yaml --batch 1,8 --sparsity-profile 0.7 --images "$P" --out "$R/densenet201"
snn 30 calibrate --spec network_specs/vgg19.yaml --batch 1,8 --images "$P" --out "$R/vgg19"
snn 50 bench e2e --spec network_specs/vgg19.yaml --batch 1,8 --sparsity-profile 0.7 --images "$P" --out "$R/vgg19"
} > "$R/bench.log" 2>&1
grep -E "^\+ snn-run|^exit|b[0-9]+: snn|Fatal|Error" "$R/bench.log" | tail -30
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/r/*/e2e_*.json")):
    d = json.load(open(f))
    for b, rec in d["runs"].items():
        print(d["network"], b, rec.get("kernel_sum"), rec.get("notes"))
PY
cd "$OUT" && tar czf r.tgz r && rm -rf r
