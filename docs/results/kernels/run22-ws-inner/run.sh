#!/bin/bash
# Device call 1 of session 6 (2026-11-23): the warp-tiled channel loop's variants (emit.render_sparse_ws(variant=)):
# value loads k pixels ahead of their tests (pre2/pre4; cpre4/cpre8 only where the pixel is non-zero) and one
# indirect jump per non-zero pixel (nz), on run20's three best warp-tiled configs per layer, batch 32.
# Cubins precompiled here (5 of the variants spill 4-16 bytes; named in bench.json "spills"):
#   python3 tools/check_kernels.py compile --ws-inner --batches 32 --cache .carry/kcache22 -j 2
#   tar cJf .carry/kcache22.tar.xz -C .carry kcache22
export PYTHONPATH=.; mkdir -p $OUT/ws-inner
[ -d .carry/kcache22 ] || tar xJf .carry/kcache22.tar.xz -C .carry
timeout 300 python3 tools/check_kernels.py bench --ws-inner --batches 32 --levels 0.55,0.7,0.85 \
    --reps 20 --cache .carry/kcache22 --out $OUT/ws-inner -j 16 > $OUT/ws-inner/bench.log 2>&1
echo "ws-inner rc=$?"; grep -E "BAD|Error|error|compiled" $OUT/ws-inner/bench.log | head -5; tail -1 $OUT/ws-inner/bench.log
