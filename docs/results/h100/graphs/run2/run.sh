#!/bin/bash
# Device run for issue 8 (graphs): build manifests from the carried cubins, time eager vs graph, GPU tests, infer.
set -u
C=$(cd "$(dirname "$0")" && pwd)
cd "$C/wt"
export PYTHONPATH=$PWD SNN_CACHE_DIR=$C/cubins SNN_PHOTOS=$C/photos PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p "$R"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'torchvision', torchvision.__version__); print('begin_capture_to_if_node', hasattr(torch.cuda.CUDAGraph, 'begin_capture_to_if_node'))"
  python3 -c "import cuda.bindings; print('cuda-bindings', cuda.bindings.__version__)"
  nvcc --version | tail -1; } > "$R/env.txt" 2>&1
for n in resnet152 vgg19 densenet201; do
  timeout 60 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,8 -j 16 2>&1 | tail -2
done > "$R/build.log" 2>&1
timeout 150 python3 tools/bench_graphs.py --spec network_specs/resnet152.yaml --batches 1,8 --photos "$C/photos" \
  --out "$R/bench_resnet152.json" > "$R/bench.log" 2>&1; echo "bench exit $?" >> "$R/bench.log"
timeout 170 python3 -m pytest -q tests/gpu/test_graph_gpu.py -p no:cacheprovider -rs > "$R/pytest_graph.log" 2>&1
echo "pytest exit $?" >> "$R/pytest_graph.log"
timeout 45 python3 -c "import cli; cli.run_main()" infer "$C/photos" --spec network_specs/resnet152.yaml --batch 8 \
  --trace --output "$R/infer_graph.json" > "$R/infer_graph.log" 2>&1; echo "infer exit code: $?" >> "$R/infer_graph.log"
timeout 50 python3 -m pytest -q tests/gpu/test_runtime_gpu.py -p no:cacheprovider -rs -k "not built_cache" \
  > "$R/pytest_runtime.log" 2>&1; echo "pytest exit $?" >> "$R/pytest_runtime.log"
ls -la "$R"
