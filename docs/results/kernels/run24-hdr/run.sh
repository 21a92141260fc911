#!/bin/bash
# Device call 7 of session 6 (2026-11-23): the warp-tiled channel header "hdr" (32-bit shared addresses fixed per
# chunk, the next channel's mask values loaded without a test; emit.render_sparse_ws(variant="hdr")) against the
# base loop, run20's three best warp-tiled configs per layer of issue 7, batch 8 and 32.
# Cubins precompiled: python3 tools/check_kernels.py compile --ws-inner --ws-variants ",hdr" --batches 8,32 --cache .carry/kcache22 -j 2
export PYTHONPATH=.; mkdir -p $OUT/hdr
[ -d .carry/kcache22 ] || tar xJf .carry/kcache22.tar.xz -C .carry
timeout 300 python3 tools/check_kernels.py bench --ws-inner --ws-variants ",hdr" --batches 8,32 --levels 0.55,0.7,0.85 \
    --reps 20 --cache .carry/kcache22 --out $OUT/hdr -j 16 > $OUT/hdr/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|Error|error|compiled" $OUT/hdr/bench.log | head -5; tail -1 $OUT/hdr/bench.log
cat $OUT/hdr/ws_inner_table.md
