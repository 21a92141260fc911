#!/bin/bash
# The measured choice among candidate kernels against the cost model's picks, in one device call, on images the
# calibration did not see. One build with `--candidates $K` (cubins precompiled on the CPU machine into
# $SNN_CACHE_DIR: all hits here), copied twice:
#   tuned: `snn-run calibrate` measures every candidate of every level on photos A and keeps the fastest;
#   model: the same measurements (its calibration.json copied over), `calibrate --no-tune`: the model's picks.
# Then on photos B, for both: `bench layers` on the layers given (issue 7's) and `bench e2e` at sparsity 0.7.
#   [K=3] [BATCHES=1,32] [LAYER_LEVELS=0.5,0.7,0.9] [CAL_REPS=30] [E2E_ORDER=...] bash tools/tune_ab.sh NETWORK PHOTOS_A PHOTOS_B [--layer NAME ...]
# Writes $OUT/<network>.tgz (logs, calibrate/bench JSON) and prints one line per side, batch and layer set.
set -u
NET=$1; A=$2; BI=$3; shift 3
K=${K:-3}; B=${BATCHES:-1,32}
ROOT=$PWD; R=$OUT/$NET; G=$ROOT/.carry/gen_tune/$NET; mkdir -p "$R"
export PYTHONPATH=$ROOT PYTHONUNBUFFERED=1
T0=$SECONDS
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -X faulthandler -c "import cli; cli.run_main()" "$@"
        echo "exit $? at $((SECONDS-T0)) s"; }
{
rm -rf "$G"; mkdir -p "$G"
timeout 300 python3 -m cli build network_specs/$NET.yaml --gpu h100 --batch $B --candidates $K -j 16 --out "$G/tuned" 2>&1 | tail -2
cp -r "$G/tuned" "$G/model"
snn 420 calibrate --spec network_specs/$NET.yaml --cache "$G/tuned" --gpu h100 --batch $B --images "$A" \
    ${CAL_REPS:+--reps $CAL_REPS} --out "$R/tuned"
cp "$G/tuned/$NET/h100/calibration.json" "$G/model/$NET/h100/calibration.json"
snn 120 calibrate --spec network_specs/$NET.yaml --cache "$G/model" --gpu h100 --batch $B --images "$A" --no-tune \
    --out "$R/model"
if [ $# -gt 0 ]; then
    for v in model tuned; do
        snn 200 bench layers --spec network_specs/$NET.yaml --cache "$G/$v" --gpu h100 --batch $B \
            --levels ${LAYER_LEVELS:-0.5,0.7,0.9} --images "$BI" "$@" --out "$R/$v"
    done
fi
# whole-network times drift within a call (the first side ran 20 % slower, cuDNN included, in tune-s8's first
# call): by default each side twice, model tuned tuned model ($E2E_ORDER)
for v in ${E2E_ORDER:-model tuned tuned model}; do
    [ -d "$R/$v/e2e1" ] && o="$R/$v/e2e2" || o="$R/$v/e2e1"
    snn 200 bench e2e --spec network_specs/$NET.yaml --cache "$G/$v" --gpu h100 --batch $B --sparsity-profile 0.7 \
        --images "$BI" --no-energy --out "$o"
done
} > "$R/log.txt" 2>&1
grep -E "^\+ |^exit|Error|error:" "$R/log.txt" | tail -20
python3 - "$R" <<'PY'
import glob, json, math, sys
R = sys.argv[1]
def gm(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
for v in ("model", "tuned"):
    for f in sorted(glob.glob(f"{R}/{v}/layers_*.json")):
        d = json.load(open(f))
        for b in map(str, d["batches"]):
            for lv in d["levels"]:
                k = f"{lv:.2f}"
                sp = [s["batches"][b]["levels"][k] for s in d["shapes"] if b in s["batches"]]
                print(v, d["network"], "layers b" + b, k, "geomean x cuDNN FP32 %.3f" % gm([r["speedup_fp32"] for r in sp]),
                      "sum us %.1f" % sum(r["sparse_us"] for r in sp))
    for f in sorted(glob.glob(f"{R}/{v}/calibrate_*.json")):
        d = json.load(open(f))
        for b in d["batches"]:
            g = [r["tuned_gain"] for r in d["rows"] if r["batch"] == b and r.get("tuned_gain")]
            print(v, d["network"], "calibrate b%d" % b, "pick/chosen geomean %.3f over %d layers" % (gm(g), len(g)) if g else "")
    for f in sorted(glob.glob(f"{R}/{v}/e2e*/e2e_*.json")):
        d = json.load(open(f))
        for b, rec in d["runs"].items():
            t = {k: x["median_ms"] for k, x in rec["times_ms"].items()}
            fp = min(x for k, x in t.items() if "fp32" in k)
            print(v, d["network"], f.split("/")[-2], "b" + b, "snn %.3f ms" % t["snn"], "dense fp32 %.3f (x%.2f)" % (fp, fp / t["snn"]),
                  "sparse", rec["sparse_layers"], "relerr %.1e" % rec["rel_err_snn_graph_vs_dense"])
PY
find "$R" -name "*.png" -delete
find "$R" -name "*.json" -exec gzip -f {} +
cd "$OUT" && tar czf "$NET.tgz" "$NET" && rm -rf "$NET"   # one file back
