#!/bin/bash
# Device call 1 of session 5 (2026-11-23): warp-tiled blocks (emit.render_sparse_ws) against the previous
# two best configs per layer, batch 8 and 32. Cubins precompiled here:
#   python3 tools/check_kernels.py compile --ws --batches 8,32 --cache .carry/kcache_ws -j 2
#   tar cJf .carry/kcache_ws.tar.xz -C .carry kcache_ws
export PYTHONPATH=.; mkdir -p $OUT/bench
tar xJf .carry/kcache_ws.tar.xz -C .carry
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
timeout 420 python3 tools/check_kernels.py bench --ws --batches 8,32 --levels 0.5,0.7,0.9 \
    --reps 20 --cache .carry/kcache_ws --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|spills|Error|error" $OUT/bench/bench.log | head -5
grep -E "geomean" $OUT/bench/ws_table.md
awk -F'|' 'NR>2 && $4+0==0.7 {print $2,$3,$5,$6,$7,$8,$10}' $OUT/bench/ws_table.md
