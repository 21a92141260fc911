#!/bin/bash
# Device call 2 of session 7 (2026-11-23): warp-tiled kernels at batch 1, where the plan has none
# (costmodel.WS_MIN_BATCH = 8). check_kernels.py bench --ws-b1: per layer (issue 7's eight 3x3 layers and the six
# ResNet-152 1x1 shapes), both check_kernels.b1_plans (the plan as built, and with warp-tiled configs allowed at
# batch 1: b1_plans.json, computed by the committed code) against ws_b1_grid (tc 8/16/32, 2-8 warps), uniform
# zeros, L2 flushed, every timed kernel checked against float64 afterwards.
# Call 1 (flush-only/) timed the same 3x3 kernels with check_kernels' old timer, a flush alone between runs: its
# batch-1 times swing 13 -> 35 us for one kernel, the host's enqueue leaking into the events. time_fn now shares
# runtime.bench.event_times_us (a GPU sleep sized to the host's enqueue), as `bench layers` does.
# floor.py: what one event-timed launch costs after the flush.
# Cubins precompiled here (9 4x4 nt 2 grid kernels spill 4 bytes; listed in bench.json "spills"):
#   python3 tools/check_kernels.py compile --ws-b1 --levels 0.5,0.7,0.9,0.99 --cache .carry/kcache25 -j 2
#   tar cJf .carry/kcache25.tar.xz -C .carry kcache25
export PYTHONPATH=.; mkdir -p $OUT/b1
[ -d .carry/kcache25 ] || tar xJf .carry/kcache25.tar.xz -C .carry
python3 docs/results/kernels/run25-b1/floor.py > $OUT/floor.json 2>&1; cat $OUT/floor.json
timeout 450 python3 tools/check_kernels.py bench --ws-b1 --levels 0.5,0.7,0.9,0.99 \
    --cache .carry/kcache25 --out $OUT/b1 -j 16 > $OUT/b1/bench.log 2>&1
echo "ws-b1 rc=$?"; grep -E "BAD|Error|error|compiled" $OUT/b1/bench.log | head -5; tail -1 $OUT/b1/bench.log
python3 tools/ws_b1_table.py $OUT/b1 | tee $OUT/b1/ws_b1_table.md
