# Sourced by the result scripts (docs/results/*/run.sh): snn importable from this checkout (installed, or through a symlink when
# nothing may be installed, as on a lent GPU machine), snn-codegen / snn-run on PATH, and env_report.
export PYTHONUNBUFFERED=1
# snn must be this checkout's, also where another one is importable (an A/B sources this for each side)
if [ "$(python3 -c 'import os, snn.cli; print(os.path.realpath(snn.__path__[0]))' 2>/dev/null)" != "$(realpath "$PWD")" ]; then
  _site=$(mktemp -d); ln -s "$PWD" "$_site/snn"; export PYTHONPATH="$_site${PYTHONPATH:+:$PYTHONPATH}"
  _bin=$_site/bin; mkdir -p "$_bin"
  printf '#!/bin/sh\nexec python3 -c "import sys; from snn.cli import codegen_main; sys.argv[0] = \\"snn-codegen\\"; codegen_main()" "$@"\n' > "$_bin/snn-codegen"
  printf '#!/bin/sh\nexec python3 -c "import sys; from snn.cli import run_main; sys.argv[0] = \\"snn-run\\"; run_main()" "$@"\n' > "$_bin/snn-run"
  chmod +x "$_bin"/*; export PATH="$_bin:$PATH"
fi
# GPU: the --gpu name of the installed GPU (h100, h200, ...): bundles go to generated/NET/$GPU, results to
# docs/results/TOPIC/$GPU. Set it to override.
if [ -z "${GPU:-}" ]; then
  GPU=$(python3 -c "import sys; from snn.runtime.manifest import guess_gpu_name; print(guess_gpu_name(sys.argv[1]))" \
        "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)")
fi
export GPU
env_report() {
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv 2>&1
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'torchvision', torchvision.__version__)" 2>&1
  nvcc --version | tail -1
  echo "snn commit: ${SNN_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
}
# tree_commit DIR: the short commit of a checkout, or of a copy of one whose file .commit names it (an A/B's BEFORE_TREE)
tree_commit() { if [ -f "$1/.commit" ]; then cut -c1-7 "$1/.commit"; else git -C "$1" rev-parse --short HEAD; fi; }
