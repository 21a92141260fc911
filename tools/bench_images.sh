#!/bin/bash
# Images per block (IB, issue 7 batch 8/32): the device command. Run from the repo root:
#   PYTHONPATH=. bash tools/bench_images.sh        (writes everything under $OUT)
# Uses the precompiled cubin cache .carry/kcache (carry it; a miss is compiled with -j 16).
# Order: float64 check of the IB > 1 kernels, the IB = 1 vs IB > 1 bench at batch 8 and 32 (table:
# $OUT/bench/images_table.md), then memcheck and racecheck on a few IB > 1 kernels.
set -u
export PYTHONPATH=${PYTHONPATH:-.}
OUT=${OUT:?set OUT}
CACHE=${SNN_KCACHE:-.carry/kcache}
LEVELS=${LEVELS:-0.5,0.7,0.9,0.99}
mkdir -p "$OUT/check" "$OUT/bench" "$OUT/sanitize"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
T0=$(date +%s)
python3 tools/check_kernels.py check --images --cache "$CACHE" --out "$OUT/check" -j 16 > "$OUT/check/check.log" 2>&1
echo "check rc=$? ($(( $(date +%s) - T0 ))s)" | tee -a "$OUT/check/check.log"
grep -E "^check:|BAD|spills" "$OUT/check/check.log" | head -20
timeout 300 python3 tools/check_kernels.py bench --images --batches 8,32 --levels "$LEVELS" --reps 25 \
    --cache "$CACHE" --out "$OUT/bench" -j 16 > "$OUT/bench/bench.log" 2>&1
echo "bench rc=$? ($(( $(date +%s) - T0 ))s)" | tee -a "$OUT/bench/bench.log"
grep -E "BAD|ceilings" "$OUT/bench/bench.log" | head -20
cat "$OUT/bench/images_table.md" 2>/dev/null
for tool in memcheck racecheck; do
    timeout 60 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
        python3 tools/check_kernels.py sanitize --images --limit 4 --cache "$CACHE" --out "$OUT/sanitize" \
        > "$OUT/sanitize/$tool.log" 2>&1
    echo "$tool rc=$? ($(( $(date +%s) - T0 ))s)" | tee -a "$OUT/sanitize/$tool.log"
    tail -2 "$OUT/sanitize/$tool.log"
done
