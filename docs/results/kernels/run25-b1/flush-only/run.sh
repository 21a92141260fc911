#!/bin/bash
# Device call 1 of session 7 (2026-11-23): warp-tiled kernels at batch 1, where the plan has none
# (costmodel.WS_MIN_BATCH = 8). check_kernels.py bench --ws-b1: per 3x3 layer of issue 7, the build's batch-1
# picks at the four levels against ws_b1_grid (tc 8/16/32, 2-8 warps), uniform zeros, L2 flushed, every timed
# kernel checked against float64 afterwards. floor.py: what one event-timed launch costs after the flush.
# Cubins precompiled here (9 4x4 nt 2 grid kernels spill 4 bytes; listed in bench.json "spills"):
#   python3 tools/check_kernels.py compile --ws-b1 --levels 0.5,0.7,0.9,0.99 --cache .carry/kcache25 -j 2
#   tar cJf .carry/kcache25.tar.xz -C .carry kcache25
export PYTHONPATH=.; mkdir -p $OUT/b1
[ -d .carry/kcache25 ] || tar xJf .carry/kcache25.tar.xz -C .carry
python3 docs/results/kernels/run25-b1/floor.py > $OUT/floor.json 2>&1; cat $OUT/floor.json
timeout 400 python3 tools/check_kernels.py bench --ws-b1 --levels 0.5,0.7,0.9,0.99 \
    --cache .carry/kcache25 --out $OUT/b1 -j 16 > $OUT/b1/bench.log 2>&1
echo "ws-b1 rc=$?"; grep -E "BAD|Error|error|compiled" $OUT/b1/bench.log | head -5; tail -1 $OUT/b1/bench.log
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/b1/bench.json"))
for r in d["bench"]:
    a = r["all_us"]
    ws = {k: v for k, v in a.items() if "_w" in k.rsplit("_b", 1)[0]}
    cl = {k: v for k, v in a.items() if k not in ws}
    bw, bc = min(ws, key=ws.get), min(cl, key=cl.get)
    print(f"{r['layer']:26s} {r['sparsity']:.2f} fp32 {r['cudnn_fp32_us']:6.1f} classic {cl[bc]:5.1f} ws {ws[bw]:5.1f} "
          f"{ws[bw] / cl[bc]:.2f} {bw.split('_', 6)[-1]}")
PY
