#!/bin/bash
# Device call 1 (session 2): graph overhead microbench, calibration + e2e (graph path) for ResNet-152 and VGG-19.
set -u
export PYTHONPATH=$PWD SNN_CACHE_DIR=$PWD/.carry/cache/cubins SNN_PHOTOS=$PWD/.carry/photos PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p "$R"
P=$PWD/.carry/photos
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'torchvision', torchvision.__version__)"
  python3 -c "import cuda.bindings; print('cuda-bindings', cuda.bindings.__version__)"
  echo "commit $(git rev-parse HEAD 2>/dev/null || cat .carry/commit)"; } > "$R/env.txt" 2>&1
T0=$SECONDS
for n in resnet152 vgg19 densenet201; do
  timeout 60 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8,32 -j 16 2>&1 | tail -2
done > "$R/build.log" 2>&1
echo "build $((SECONDS-T0)) s" >> "$R/times.txt"
sel=$(python3 -c "import json;print(json.load(open('generated/resnet152/h100/manifest.json'))['selector']['cubin'])")
timeout 90 python3 tools/bench_graph_overhead.py --selector "$sel" --out "$R/overhead.json" > "$R/overhead.log" 2>&1
echo "overhead exit $? $((SECONDS-T0)) s" >> "$R/times.txt"
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -c "import cli; cli.run_main()" "$@"; echo "exit $? at $((SECONDS-T0)) s"; }
{
snn 150 calibrate --spec network_specs/resnet152.yaml --batch 1,8,32 --images "$P" --out "$R"
cp generated/resnet152/h100/calibration.json "$R/calibration_sidecar_resnet152.json"
snn 130 bench e2e --spec network_specs/resnet152.yaml --batch 1,8,32 --sparsity-profile 0.7 --images "$P" --out "$R"
snn 60 calibrate --spec network_specs/vgg19.yaml --batch 1,8,32 --images "$P" --out "$R"
cp generated/vgg19/h100/calibration.json "$R/calibration_sidecar_vgg19.json"
snn 90 bench e2e --spec network_specs/vgg19.yaml --batch 1,8,32 --sparsity-profile 0.7 --images "$P" --out "$R"
} > "$R/bench.log" 2>&1
grep -E "^\+ snn-run|^exit|: snn |b[0-9]+: snn" "$R/bench.log" | tail -30; cat "$R/times.txt"
cd "$OUT" && tar czf r.tgz r && rm -rf r
python3 - <<'PY'
import json, tarfile, io, os
t = tarfile.open(os.environ["OUT"] + "/r.tgz")
for m in t.getmembers():
    if m.name.endswith(("overhead.json",)) :
        print(t.extractfile(m).read().decode()[-900:])
PY
