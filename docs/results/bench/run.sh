#!/bin/bash
# The README's results table on the GPU at hand (docs/results/env.sh names it: $GPU): ResNet-152, DenseNet-201
# and VGG-19 at batch 1, 8 and 32. Per network:
#   build      snn-codegen build NET --gpu $GPU --batch $BATCHES
#   calibrate  snn-run calibrate on the photos, levels 0.4..0.9 (the tuning file goes to OUT/NET/tuning.json)
#   e2e        snn-run bench e2e on the photos: snn on the trained-like profile (`trained`: each conv's input
#              sparsity set by layer role and stage from the measured table in network_specs/profiles/), and on
#              uniform 0.5 and 0.7; against torch eager, CUDA graph and torch.compile (inductor, freezing,
#              reduce-overhead), each FP32 (TF32 off), TF32, FP16 and BF16, in the same run on the same images
# then table.py writes OUT/table.md and OUT/e2e.png and puts the table into the README.
#   bash docs/results/bench/run.sh OUT PHOTO_DIR [NET ...]      (default: resnet152 densenet201 vgg19)
# STEPS (default build,calibrate,e2e) and BATCHES (default 1,8,32) run a part, e.g. one network and step per call
# on a machine that limits a call's time; a later e2e step reads the tuning file an earlier calibrate left in OUT.
# PROFILES (default "trained 0.5 0.7"): the sparsity profiles snn runs on in e2e. SNN_PRECISIONS (default none):
# snn's 16-bit runs also timed (bench e2e --snn-precisions; the sixteen-bit folder measures those).
# SNN_CACHE_DIR: a compiler cache filled on a CPU machine with the same build commands (all hits here).
set -uo pipefail
out=${1:?usage: run.sh OUT_DIR PHOTO_DIR [NET ...]}; photos=${2:?PHOTO_DIR}; shift 2
nets=("$@"); [ ${#nets[@]} -eq 0 ] && nets=(resnet152 densenet201 vgg19)
STEPS=${STEPS:-build,calibrate,e2e}; BATCHES=${BATCHES:-1,8,32}; PROFILES=${PROFILES:-trained 0.5 0.7}
SNN_PRECISIONS=${SNN_PRECISIONS:-}
profile_args=(); for p in $PROFILES; do profile_args+=(--sparsity-profile "$p"); done
out=$(realpath -m "$out"); photos=$(realpath "$photos")
mkdir -p "$out"
cd "$(dirname "$0")/../../.."
. docs/results/env.sh
env_report > "$out/env.txt"
has() { [[ ",$STEPS," == *",$1,"* ]]; }
for net in "${nets[@]}"; do
  mkdir -p "$out/$net"
  {
    echo "== $net $(date -u +%FT%TZ) steps $STEPS batches $BATCHES"
    has build && snn-codegen build "$net" --gpu "$GPU" --batch "$BATCHES" -j 16 2>&1 | tail -2
    if has calibrate; then
      timeout 900 snn-run calibrate --spec "$net" --batch "$BATCHES" --levels 0.4:0.9:0.1 --reps 15 \
        --images "$photos" --tuning "$out/$net/tuning.json" 2>&1 | tail -3
    fi
    if has e2e; then
      [ -f "$out/$net/tuning.json" ] && cp "$out/$net/tuning.json" "generated/$net/$GPU/tuning.json"
      e2e=$out/$net/e2e-b${BATCHES//,/-}; mkdir -p "$e2e"
      timeout 1800 snn-run bench e2e --spec "$net" --batch "$BATCHES" --images "$photos" --reps 30 \
        "${profile_args[@]}" --snn-precisions "$SNN_PRECISIONS" --out "$e2e" > "$e2e/log.txt" 2>&1
      echo "bench e2e exit code $?"; grep -E "^(profile|$net b|wrote)" "$e2e/log.txt"
    fi
  } >> "$out/log.txt" 2>&1
done
# the table from every e2e result in OUT so far (a calibrate-only part has none yet)
has e2e && python3 docs/results/bench/table.py "$out" --readme README.md | tee -a "$out/log.txt"
has e2e && gzip -f "$out"/*/e2e-*/e2e_*.json   # the raw times, kept gzipped (table.py reads either)
