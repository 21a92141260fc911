#!/bin/bash
# End to end A/B of two code trees on the device: this checkout ("new") against the tree carried in
# .carry/old ("old": e.g. `git archive <commit> | tar -x -C .carry/old`). For each: its own build (cubins
# precompiled on the CPU machine into .carry/cache_new / .carry/cache_old: all hits there), a fresh
# calibration, then bench e2e at batch 1 and 8 (or $BATCHES) with sparsity profile 0.7; calibrations and e2e
# runs interleaved. Writes $OUT/r/{new,old}/ and prints one line per side and batch.
#   [BATCHES=8] [ORDER="old new"] [REPS=40] bash tools/e2e_ab.sh NETWORK [extra calibrate arguments, e.g. --levels 0.4:0.9:0.1]
# ORDER: which side calibrates and runs first (default new old); REPS: bench e2e's --reps (default its own).
set -u
NET=$1; shift
B=${BATCHES:-1,8}
export PYTHONUNBUFFERED=1 SNN_GIT_COMMIT=$(cat .carry/commit)
ROOT=$PWD; P=$ROOT/.carry/photos; R=$OUT/r; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$R/env.txt" 2>&1
echo "commit $SNN_GIT_COMMIT (new); old: .carry/old" >> "$R/env.txt"
T0=$SECONDS
side() {  # side new|old, then a command run in that tree
    local v=$1; shift
    local dir=$ROOT; [ "$v" = old ] && dir=$ROOT/.carry/old
    (cd "$dir" && SNN_CACHE_DIR=$ROOT/.carry/cache_$v PYTHONPATH=$dir "$@")
}
for v in new old; do
    side $v timeout 120 python3 -m cli build network_specs/$NET.yaml --gpu h100 --batch $B -j 16 2>&1 | tail -1
done > "$R/build.log" 2>&1
run() { local v=$1 t=$2; shift 2; echo "+ [$v] snn-run $*"
        side $v timeout "$t" python3 -X faulthandler -c "import cli; cli.run_main()" "$@"; echo "exit $? at $((SECONDS-T0)) s"; }
{
for v in ${ORDER:-new old}; do run $v 200 calibrate --spec network_specs/$NET.yaml --batch $B "$@" --images "$P" --out "$R/$v"; done
for v in ${ORDER:-new old}; do run $v 120 bench e2e --spec network_specs/$NET.yaml --batch $B --sparsity-profile 0.7 ${REPS:+--reps $REPS} --images "$P" --out "$R/$v"; done
} > "$R/bench.log" 2>&1
cat "$R/build.log"; grep -E "^\+ |^exit|Fatal|Error" "$R/bench.log" | tail -12
python3 - <<'PY'
import glob, json, os
for v in ("new", "old"):
    for f in sorted(glob.glob(os.environ["OUT"] + f"/r/{v}/e2e_*.json")):
        d = json.load(open(f))
        for b, rec in d["runs"].items():
            t = {k: x["median_ms"] for k, x in rec["times_ms"].items()}
            fp = min(x for k, x in t.items() if "fp32" in k)
            tf = min(x for k, x in t.items() if "tf32" in k)
            print(v, d["network"], "b" + b, "snn %.3f ms" % t["snn"], "kernel_sum %.3f" % rec["kernel_sum"]["kernel_sum_ms"],
                  "dense fp32 %.3f x%.2f" % (fp, fp / t["snn"]), "tf32 %.3f x%.2f" % (tf, tf / t["snn"]),
                  "sparse", rec["sparse_layers"], "relerr %.1e" % rec["rel_err_snn_graph_vs_dense"])
PY
for f in "$R"/*/calibrate_*.json; do gzip -f "$f"; done
cd "$OUT" && tar czf r.tgz r && rm -rf r
