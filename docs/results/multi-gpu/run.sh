#!/bin/bash
# snn-run infer under torchrun on the GPUs of one machine: world size 1 against plain infer (the same predictions),
# (a second plain run gives the run-to-run variation), then images/s on 1, 2, 4, ... GPUs (as many as the machine has) over a folder of COPIES copies of the photos.
#   bash docs/results/multi-gpu/run.sh OUT PHOTO_DIR [COPIES]
# SNN_CACHE_DIR: a compiler cache filled on a CPU machine with the same build (all hits here).
set -uo pipefail
out=$(realpath -m "${1:?usage: run.sh OUT PHOTO_DIR [COPIES]}"); photos=$(realpath "${2:?PHOTO_DIR}"); copies=${3:-40}
mkdir -p "$out"; here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." && . docs/results/env.sh
env_report > "$out/env.txt"
ngpu=$(nvidia-smi -L | wc -l)
run() { local name=$1; shift; echo "== $name: $*"; "$@" > "$out/$name.log" 2>&1; echo "exit $?"; tail -4 "$out/$name.log"; }
{
  snn-codegen build resnet152 --gpu "$GPU" --batch 8 -j 16 2>&1 | tail -1
  run plain snn-run infer "$photos" --spec resnet152 --batch 8 --output "$out/plain.csv"
  run plain2 snn-run infer "$photos" --spec resnet152 --batch 8 --output "$out/plain2.csv"   # run-to-run variation
  run torchrun1 python3 -m torch.distributed.run --standalone --nproc-per-node 1 --no-python snn-run infer "$photos" --spec resnet152 \
      --batch 8 --output "$out/torchrun1.csv"
  run devices1 snn-run infer "$photos" --spec resnet152 --batch 8 --devices 1 --output "$out/devices1.json"
  python3 "$here/compare.py" "$out/plain.csv" "$out/plain2.csv" "$out/torchrun1.csv" "$out/devices1.json"
  big=$(mktemp -d); i=0
  for c in $(seq "$copies"); do for f in "$photos"/*; do i=$((i + 1)); ln -s "$f" "$big/$(printf %05d $i)_$(basename "$f")"; done; done
  echo "throughput folder: $i files ($copies copies of $photos)"
  run big_plain snn-run infer "$big" --spec resnet152 --batch 8 --output "$out/big_plain.json"
  n=1
  while [ $n -le "$ngpu" ]; do
    run "big_devices$n" snn-run infer "$big" --spec resnet152 --batch 8 --devices $n --output "$out/big_devices$n.json"
    n=$((n * 2))
  done
  python3 "$here/compare.py" --throughput "$out"/big_plain.json "$out"/big_devices*.json
} 2>&1 | tee "$out/log.txt"
