#!/bin/bash
# perf round, device call: v2 check + bench (full candidate set) + memcheck; v1 re-timing run1's
# winners in the same session. Logs under $OUT.
set -u
R=$(cd "$(dirname "$0")" && pwd)
V=${1:-v2}
mkdir -p $OUT/$V $OUT/v1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt 2>&1
cd $R/$V && PYTHONPATH=. SNN_CACHE_DIR=$R/cache_$V python3 tools/check_kernels.py all --cache $R/cache_$V --out $OUT/$V -j 16 --reps 25 > $OUT/$V/all.log 2>&1; echo "$V rc=$?" | tee -a $OUT/$V/all.log
if [ -d $R/v1 ]; then
cd $R/v1 && PYTHONPATH=. python3 tools/check_kernels.py bench --best-of $R/run1_all.json --limit 1 --cache $R/cache_v1 --out $OUT/v1 -j 16 --reps 25 > $OUT/v1/bench.log 2>&1; echo "v1 rc=$?" | tee -a $OUT/v1/bench.log
fi
cd $R/$V && PYTHONPATH=. timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 tools/check_kernels.py sanitize --limit 8 --cache $R/cache_$V --out $OUT/$V > $OUT/$V/sanitize.log 2>&1; echo "sanitize rc=$?" | tee -a $OUT/$V/sanitize.log
tail -3 $OUT/$V/sanitize.log
grep -E "^check:|ceilings|BAD|spills|Error|error" $OUT/$V/all.log | head
export V
python3 - <<'PY'
import json, os
out, V = os.environ["OUT"], os.environ["V"]
for v in (V, "v1"):
    p = f"{out}/{v}/{'bench' if v == 'v1' else 'all'}.json"
    if not os.path.exists(p): print(v, "missing"); continue
    d = json.load(open(p))
    print(v, {k: (s["geomean_vs_fp32"], s["geomean_vs_tf32"]) for k, s in d.get("summary", {}).items()})
PY
