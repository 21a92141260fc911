#!/bin/bash
# Where the batch-1 and batch-8 time of ResNet-152 and DenseNet-201 goes, before and after a change, in one run
# on one GPU: for each checkout, build (batch 1,8), calibrate on the photos (levels 0.4..0.9), then
# breakdown.py per network and batch (trained-like profile, CUDA graph replay, CUPTI activities, float64 check);
# table.py turns both into OUT/table.md; each side's calibration is kept (OUT/SIDE_NET_tuning.json.gz,
# its output in OUT/SIDE_NET_calibrate.log). The after
# side first checks its kernels against float64 (tests/gpu/test_kernels.py, test_manifest_kernels.py:
# OUT/kernel_checks.log).
#   bash docs/results/fusion/run.sh OUT PHOTO_DIR BEFORE_TREE [NET ...]
# BEFORE_TREE: a checkout of the commit to compare with (git worktree add DIR COMMIT); "after" is this checkout.
# CLUSTERS=1 adds a third side, "clusters": this checkout built with --clusters (channel splits summed in clusters).
# BATCHES="1" calibrates and replays batch 1 only (default "1 8"; the bundles are built for both).
# KERNEL_CHECKS=0 leaves the float64 kernel checks out (a call that only times). The replays then run again in the
# reverse order (before2, after2; AGAIN=0: not).
# NCU=1 also runs after's batch-1 replay under Nsight Compute, one kernel at a time (isolated.py):
# OUT/isolated_NET_b1.md and the raw OUT/isolated_NET_b1.csv.gz.
# ALSO="NAME:VAR=VALUE" adds a side NAME: after's bundles and calibration measured with VAR=VALUE in the
# environment (e.g. ALSO=nohandoff:SNN_HANDOFF=0, ALSO=nopdl:SNN_PDL=0).
# A file .commit in a tree names its commit where git cannot (a copy without .git); SNN_GIT_COMMIT, this one's.
# SNN_CACHE_DIR: a compiler cache filled on a CPU machine with the same build commands (all hits here).
set -uo pipefail
out=${1:?usage: run.sh OUT PHOTO_DIR BEFORE_TREE [NET ...]}; photos=$(realpath "${2:?PHOTO_DIR}")
before=$(realpath "${3:?BEFORE_TREE}"); shift 3
nets=("$@"); [ ${#nets[@]} -eq 0 ] && nets=(resnet152 densenet201)
out=$(realpath -m "$out"); mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd); after=$(cd "$here/../../.." && pwd)
BATCHES=${BATCHES:-1 8}
sides=(before after); [ -n "${CLUSTERS:-}" ] && sides+=(clusters)
# one side's graph replayed and broken down: replay NAME NET BATCH -> OUT/NAME_NET_bBATCH.json (in the side's tree)
replay() { python3 "$here/breakdown.py" "$2" "$3" "$photos" "$out/$1_$2_b$3.json" 2>&1 | grep -v "Warning\|_warn_once"; }
for side in "${sides[@]}"; do
  tree=$before; flags=""; [ $side = after ] && tree=$after
  if [ $side = clusters ]; then  # a copy of this checkout, so that its bundles do not replace after's
    tree=$(mktemp -d); flags=--clusters
    tar -C "$after" --exclude=./.carry --exclude=./generated -cf - . | tar -C "$tree" -xf -
  fi
  (
    cd "$tree" && . "$here/../env.sh"  # this checkout's env.sh: snn from the side's tree
    if [ $side = after ]; then  # the kernels as built, and as rendered, against float64
      env_report > "$out/env.txt"
      for net in "${nets[@]}"; do snn-codegen build "$net" --gpu "$GPU" --batch 1,8 -j 16 > /dev/null 2>&1; done
      [ "${KERNEL_CHECKS:-1}" = 0 ] || timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py tests/gpu/test_manifest_kernels.py \
        2>&1 | tail -3 > "$out/kernel_checks.log"
    fi
    commit=$(cat "$tree/.commit" 2>/dev/null || git -C "$tree" rev-parse HEAD 2>/dev/null)
    [ $side != before ] && commit=${SNN_GIT_COMMIT:-$commit}
    echo "== $side: commit $commit"
    for net in "${nets[@]}"; do
      snn-codegen build "$net" --gpu "$GPU" --batch 1,8 -j 16 $flags 2>&1 | tail -1
      timeout 900 snn-run calibrate --spec "$net" --batch "${BATCHES// /,}" --levels 0.4:0.9:0.1 --reps 15 --images "$photos" \
        > "$out/${side}_${net}_calibrate.log" 2>&1
      grep -E "^wrote|^in the graph|^  [^ ]|Error|error" "$out/${side}_${net}_calibrate.log"
      # what calibrate measured and picked, kept: picks differ between calibrations and set the replay time
      gzip -c "generated/$net/$GPU/tuning.json" > "$out/${side}_${net}_tuning.json.gz"
      for b in $BATCHES; do
        replay "$side" "$net" $b
        if [ $side = after ] && [ $b = 1 ] && [ -n "${NCU:-}" ]; then
          timeout 300 ncu --profile-from-start off --graph-profiling node --cache-control none --clock-control none \
            --metrics "$(python3 "$here/isolated.py" --metrics)" --csv --page raw \
            python3 "$here/breakdown.py" "$net" 1 "$photos" --profile-one > "$out/isolated_${net}_b1.csv"
          python3 "$here/isolated.py" "$out/isolated_${net}_b1.csv" "$out/after_${net}_b1.json" > "$out/isolated_${net}_b1.md"
          gzip -f "$out/isolated_${net}_b1.csv"
        fi
        if [ $side = after ] && [ -n "${ALSO:-}" ]; then
          env "${ALSO#*:}" python3 "$here/breakdown.py" "$net" $b "$photos" "$out/${ALSO%%:*}_${net}_b$b.json" 2>&1 | grep -v Warning
        fi
      done
    done
  ) >> "$out/log.txt" 2>&1
done
# the replays again, after first: with the same kernels on both sides, the side replayed second has measured up to
# 1.5 % slower, so both orders are kept (before2 / after2 in table.md; AGAIN=0 leaves this out)
if [ "${AGAIN:-1}" != 0 ]; then
  for side in after before; do
    tree=$before; [ $side = after ] && tree=$after
    (
      cd "$tree" && . "$here/../env.sh"  # this checkout's env.sh: snn from the side's tree
      for net in "${nets[@]}"; do
        for b in $BATCHES; do
          replay "${side}2" "$net" $b
        done
      done
    ) >> "$out/log.txt" 2>&1
  done
fi
(cd "$after" && . docs/results/env.sh && python3 "$here/table.py" "$out") | tee -a "$out/log.txt"
