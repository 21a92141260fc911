#!/bin/bash
# `make run`'s GPU path: build ResNet-152's bundle (batch 1, 8), calibrate it on the sample photos,
# classify them with the per-layer trace and one batch timed against the dense path.
#   bash docs/results/quickstart/run.sh OUT
# On a machine that reaches PyPI this is `make run`. The machine this ran on has no network, so `make setup`
# (a venv and pip install from PyPI) is replaced by the machine's own torch and a shim of this checkout
# (docs/results/env.sh), and the run target itself is called: `make run-gpu BIN=... WEIGHTS=` (seeded
# random weights: torchvision's pretrained ones cannot be downloaded there, so the labels mean nothing).
# SNN_CACHE_DIR: a compiler cache filled on a CPU machine with the same build command (all hits here).
set -uo pipefail
out=${1:?usage: run.sh OUT_DIR}; out=$(realpath -m "$out"); mkdir -p "$out"
cd "$(dirname "$0")/../../.."
. docs/results/env.sh
env_report > "$out/env.txt"
bin=$(mktemp -d); printf '#!/bin/sh\nexec python3 "$@"\n' > "$bin/python"; chmod +x "$bin/python"  # a venv's python: not a symlink
for t in snn-codegen snn-run; do ln -s "$(command -v $t)" "$bin/$t"; done
{
  echo "\$ make run's GPU check"
  "$bin/python" -c "import sys; from snn.runtime.cuda import gpu_missing; print(gpu_missing() or 'GPU found: run-gpu'); sys.exit(1 if gpu_missing() else 0)"
  echo "\$ make run-gpu BIN=$bin WEIGHTS="
  make --no-print-directory run-gpu BIN="$bin" WEIGHTS= 2>&1
  echo "exit code $?"
} > "$out/make_run_gpu.log" 2>&1
grep -E "^(GPU found|exit code|resnet152:|batch of)" "$out/make_run_gpu.log"
