#!/bin/bash
# ResNet-152 end to end on an H100 at batch 1 and 8: snn (bundle + tuning from `snn-run calibrate`, CUDA graph
# with device-side dispatch) against the dense baselines `snn-run bench e2e` measures in the same run on the same
# inputs (torchvision eager and CUDA-graph, snn's executor with every conv on cuDNN; FP32 with TF32 off, and TF32).
# Sparsity profile: every ReLU that feeds a conv shifted to 0.7 zeros on the photos (uniform 0.7).
#   bash docs/results/h100/e2e/run.sh OUT_DIR PHOTO_DIR [OTHER_TREE]
# OTHER_TREE: another checkout of snn (e.g. `git archive <commit> | tar -x -C DIR`) measured the same way in the
# same call, runs interleaved (this, other, other, this), to compare two versions of the code.
# SNN_CACHE_DIR: a compiler cache filled on a CPU machine with the same build commands (all hits here).
set -uo pipefail
out=${1:?usage: run.sh OUT_DIR PHOTO_DIR [OTHER_TREE]}; photos=${2:?PHOTO_DIR}; other=${3:-}
NET=resnet152; B=1,8
mkdir -p "$out"
cd "$(dirname "$0")/../../../.."
ROOT=$PWD
. docs/results/h100/env.sh
env_report > "$out/env.txt"
snn_this() { (cd "$ROOT" && "$@"); }
snn_other() {  # the other tree, in its own layout: `python3 -m cli` where cli.py is top level, else like this one
  local cmd=$1; shift
  local SNN_GIT_COMMIT; SNN_GIT_COMMIT=$(cat "$other/COMMIT" 2>/dev/null || echo other); export SNN_GIT_COMMIT
  if [ -f "$other/cli.py" ] && [ ! -f "$other/__init__.py" ]; then
    (cd "$other" && PYTHONPATH=$other python3 -c "import sys, cli; sys.exit(cli.${cmd}_main())" "$@")
  else
    local site; site=$(mktemp -d); ln -s "$other" "$site/snn"
    (cd "$other" && PYTHONPATH=$site python3 -c "import sys; from snn.cli import ${cmd}_main; sys.exit(${cmd}_main())" "$@")
  fi
}
build_args=(build network_specs/$NET.yaml --gpu h100 --batch $B -j 16)
cal_args=(calibrate --spec network_specs/$NET.yaml --batch $B --levels 0.5:0.9:0.1 --images "$photos")
e2e_args=(bench e2e --spec network_specs/$NET.yaml --batch $B --sparsity-profile 0.7 --reps 30 --images "$photos")
{
  snn_this snn-codegen "${build_args[@]}" 2>&1 | tail -1
  [ -n "$other" ] && snn_other codegen "${build_args[@]}" 2>&1 | tail -1
  snn_this timeout 300 snn-run "${cal_args[@]}" --out "$out/this-cal" 2>&1 | tail -3
  [ -n "$other" ] && snn_other run "${cal_args[@]}" --out "$out/other-cal" 2>&1 | tail -3
  for side in this other other this; do
    [ "$side" = other ] && [ -z "$other" ] && continue
    n=1; [ -d "$out/$side-1" ] && n=2
    if [ "$side" = this ]; then snn_this timeout 200 snn-run "${e2e_args[@]}" --out "$out/$side-$n" 2>&1 | tail -2
    else snn_other run "${e2e_args[@]}" --out "$out/$side-$n" 2>&1 | tail -2; fi
  done
} > "$out/log.txt" 2>&1
python3 - "$out" <<'PY'
import glob, json, sys
out = sys.argv[1]
rows = []
for f in sorted(glob.glob(f"{out}/*-[12]/e2e_*.json")):
    d = json.load(open(f))
    side = f.split("/")[-2]
    for b, rec in sorted(d["runs"].items(), key=lambda kv: int(kv[0])):
        t = {k: x["median_ms"] for k, x in rec["times_ms"].items()}
        fp = min((x, k) for k, x in t.items() if "fp32" in k)
        tf = min((x, k) for k, x in t.items() if "tf32" in k)
        rows.append(f"| {side} | {b} | {t['snn']:.3f} | {fp[0]:.3f} ({fp[1]}) | {fp[0] / t['snn']:.2f}x | "
                    f"{tf[0]:.3f} ({tf[1]}) | {tf[0] / t['snn']:.2f}x | {rec['sparse_layers']} |")
table = ["| side-run | batch | snn ms | best dense FP32 ms | vs FP32 | best dense TF32 ms | vs TF32 | sparse convs |",
         "| --- | --- | --- | --- | --- | --- | --- | --- |"] + rows
open(f"{out}/table.md", "w").write("\n".join(table) + "\n")
print("\n".join(table))
PY
