#!/bin/bash
# calibrate's in-graph step (runtime/calibrate_graph.py), on one GPU:
#   bash docs/results/calibrate/run.sh OUT PHOTO_DIR probe [NET]
#       per batch (8, 1), every conv shape's dense candidates three ways: alone as calibrate times them (the
#       tuning file), ten back to back in a small CUDA graph, and as the static kernel of every layer of the shape
#       in the whole network's graph (replay ms); probe.py -> OUT/probe_bB.{json,log}, the calibration it read
#       OUT/probe_tuning.json.gz
#   bash docs/results/calibrate/run.sh OUT PHOTO_DIR repair TUNING.json.gz [NET]
#       a calibration's measurements (another run's tuning file, its in-graph verdicts dropped) replayed as they
#       pick, then calibrate's in-graph step on them (no measurement left to make), replayed again, then the
#       measurements' picks once more: OUT/{measured,in_graph,measured2}_NET_bB.json (fusion/breakdown.py)
# SNN_CACHE_DIR: a compiler cache filled on a CPU machine with the same build command (all hits here).
set -uo pipefail
out=${1:?usage: run.sh OUT PHOTO_DIR probe|repair [TUNING.json.gz] [NET]}; photos=$(realpath "${2:?PHOTO_DIR}")
mode=${3:?probe or repair}; shift 3
tuning_gz=""; [ "$mode" = repair ] && { tuning_gz=$(realpath "${1:?TUNING.json.gz}"); shift; }
net=${1:-resnet152}
out=$(realpath -m "$out"); mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd); cd "$here/../../.." && . docs/results/env.sh
env_report > "$out/env.txt"
bundle=generated/$net/$GPU
snn-codegen build "$net" --gpu "$GPU" --batch 1,8 -j 16 2>&1 | tail -1 | tee -a "$out/log.txt"
calibrate() {
  timeout 600 snn-run calibrate --spec "$net" --batch 1,8 --levels 0.4:0.9:0.1 --reps 15 --images "$photos" "$@" \
    > "$out/calibrate.log" 2>&1
  grep -E "^wrote|^in the graph|^  [^ ]|Error|error" "$out/calibrate.log" | tee -a "$out/log.txt"
}
replay() { python3 "$here/../fusion/breakdown.py" "$net" "$2" "$photos" "$out/$1_${net}_b$2.json" 2>&1 | grep -v "Warning\|_warn_once" \
  | tee -a "$out/log.txt"; }
# the tuning file without its in-graph verdicts: the measurements' own picks
measured_only() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d.pop('graph', None); \
json.dump(d, open(sys.argv[1], 'w'))" "$bundle/tuning.json"; }
if [ "$mode" = probe ]; then
  calibrate --no-graph
  gzip -c "$bundle/tuning.json" > "$out/probe_tuning.json.gz"
  for b in 8 1; do
    timeout 240 python3 "$here/probe.py" "$net" $b "$photos" "$out/probe_b$b.json" 2>&1 | grep -v Warning \
      | tee "$out/probe_b$b.log"
  done
else
  zcat "$tuning_gz" > "$bundle/tuning.json" && measured_only
  for b in 1 8; do replay measured $b; done
  calibrate
  gzip -c "$bundle/tuning.json" > "$out/in_graph_tuning.json.gz"
  for b in 1 8; do replay in_graph $b; done
  measured_only
  for b in 1 8; do replay measured2 $b; done
fi
