#!/bin/bash
# Device call 4 of 2026-11-23 (session 3): ResNet-152 end to end, batch 1 and 8, with the cost model of this
# commit ("new") and with the one before it ("old" = commit 2aa4a42, carried as .carry/old: git archive
# 2aa4a42). Each side: its own build (cubins precompiled here into .carry/cache_new / .carry/cache_old;
# all hits there), a fresh calibration, then bench e2e; calibrations and e2e runs interleaved.
set -u
export PYTHONUNBUFFERED=1 SNN_GIT_COMMIT=$(cat .carry/commit)
ROOT=$PWD; P=$ROOT/.carry/photos; R=$OUT/r; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$R/env.txt" 2>&1
T0=$SECONDS
side() {  # side new|old, then the snn-run arguments
    local v=$1; shift
    local dir=$ROOT; [ "$v" = old ] && dir=$ROOT/.carry/old
    (cd "$dir" && SNN_CACHE_DIR=$ROOT/.carry/cache_$v PYTHONPATH=$dir "$@")
}
for v in new old; do
    side $v timeout 90 python3 -m cli build network_specs/resnet152.yaml --gpu h100 --batch 1,8 -j 16 2>&1 | tail -1
done > "$R/build.log" 2>&1
run() { local v=$1 t=$2; shift 2; echo "+ [$v] snn-run $*"
        side $v timeout "$t" python3 -X faulthandler -c "import cli; cli.run_main()" "$@"; echo "exit $? at $((SECONDS-T0)) s"; }
{
for v in new old; do run $v 170 calibrate --spec network_specs/resnet152.yaml --batch 1,8 --images "$P" --out "$R/$v"; done
for v in new old; do run $v 120 bench e2e --spec network_specs/resnet152.yaml --batch 1,8 --sparsity-profile 0.7 --images "$P" --out "$R/$v"; done
} > "$R/bench.log" 2>&1
cat "$R/build.log"; grep -E "^\+ |^exit|Fatal|Error" "$R/bench.log" | tail -12
python3 - <<'PY'
import json, glob, os
for v in ("new", "old"):
    for f in sorted(glob.glob(os.environ["OUT"] + f"/r/{v}/e2e_*.json")):
        d = json.load(open(f))
        for b, rec in d["runs"].items():
            t = rec["times_ms"]
            dense = min(x for k, x in t.items() if "fp32" in k and x)
            print(v, "b" + b, "snn %.3f ms" % t["snn"], "kernel_sum %.3f" % rec["kernel_sum"]["kernel_sum_ms"],
                  "best dense fp32 %.3f" % dense, "x%.2f" % (dense / t["snn"]), "sparse layers", rec["sparse_layers"])
PY
cd "$OUT" && tar czf r.tgz r && rm -rf r
