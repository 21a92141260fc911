#!/bin/bash
# The GPU test suite, then ResNet-152 classifying a folder of photos end to end.
#   bash docs/results/gpu-tests/run.sh OUT_DIR [PHOTO_DIR]
# Builds the bundles the GPU tests read (generated/{resnet152,densenet201,vgg19}/$GPU, batch 1 and 8): with
# SNN_CACHE_DIR pointing at a compiler cache filled on a CPU machine by the same commands, nvcc runs for nothing.
# PHOTO_DIR: real photos (their activations drive the sparsity checks; a non-image in it must be skipped).
set -uo pipefail
out=${1:?usage: run.sh OUT_DIR [PHOTO_DIR]}; photos=${2:-}
mkdir -p "$out"
cd "$(dirname "$0")/../../.."
. docs/results/env.sh
export SNN_RESULTS=$out ${photos:+SNN_PHOTOS=$photos}
env_report > "$out/env.txt"
for n in ${NETS:-resnet152 densenet201 vgg19}; do   # NETS: fewer bundles (the tests of the others skip)
  snn-codegen build network_specs/$n.yaml --gpu "$GPU" --batch 1,8 -j 16 2>&1 | tail -2
done | tee "$out/build.log"
python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -rs 2>&1 | tee "$out/pytest_gpu.log"
if [ -n "$photos" ]; then
  snn-run infer "$photos" --spec network_specs/resnet152.yaml --batch 8 --trace --output "$out/infer_resnet152.json" \
    2>&1 | tee "$out/infer_resnet152.log"
  echo "infer exit code: ${PIPESTATUS[0]} (3: some files skipped)" | tee -a "$out/infer_resnet152.log"
fi
tail -1 "$out/pytest_gpu.log"
