#!/usr/bin/env bash
# On a GPU machine (after `pip install -e '.[gpu]'`): build the bundles (all cache hits when the cubin cache
# already holds the kernels, e.g. compiled on a CPU machine and copied over), run every GPU test, and
# classify a photo folder with ResNet-152.
#   tools/gpu_validate.sh CUBIN_CACHE PHOTO_DIR RESULTS_DIR       [GPU=auto] [BATCHES=1,8,32]
set -uo pipefail
cache=$1 photos=$2 out=$3
mkdir -p "$out"
export SNN_CACHE_DIR=$cache PYTHONUNBUFFERED=1 SNN_RESULTS=$out SNN_PHOTOS=$photos
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'torchvision', torchvision.__version__)"
  nvcc --version | tail -1; git rev-parse HEAD 2>/dev/null; } > "$out/env.txt" 2>&1
for n in resnet152 densenet201 vgg19 resnet50; do
  snn-codegen build "network_specs/$n.yaml" --gpu "${GPU:-auto}" --batch "${BATCHES:-1,8,32}" 2>&1 | tail -2
done | tee "$out/build.log"
python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -rs 2>&1 | tee "$out/pytest_gpu.log"
snn-run infer "$photos" --spec network_specs/resnet152.yaml --batch 8 --trace \
  --output "$out/infer_resnet152.json" 2>&1 | tee "$out/infer_resnet152.log"
echo "infer exit code: ${PIPESTATUS[0]}" | tee -a "$out/infer_resnet152.log"
