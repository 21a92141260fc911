#!/bin/bash
# Device call 3 of session 5: the warp-tiled kernel with a fixed per-thread copy plan (one LDGSTS + an add
# per weight vector), mask values loaded a channel ahead, a 128-register cap for 4x4 nt 4, chunk size from
# the blocks an SM holds; nt 8 and 4x8 warp tiles among the candidates. Profile (v9 cases) + bench --ws.
#   python3 tools/check_kernels.py compile --ws --batches 8,32 --cache .carry/kcache_ws2 -j 2 --prune
#   tar cJf .carry/kcache_ws2.tar.xz -C .carry kcache_ws2
export PYTHONPATH=.; mkdir -p $OUT/bench $OUT/prof
tar xJf .carry/kcache_ws2.tar.xz -C .carry
export SNN_PROFILE_CASES=v9 SNN_CACHE_DIR=.carry/kcache_ws2
timeout 200 ncu --clock-control none -k regex:sconv --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats --section InstructionStats \
    --metrics lts__t_bytes.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum \
    --csv --page raw python3 tools/profile_kernels.py > $OUT/prof/raw.csv 2> $OUT/prof/ncu.err
python3 tools/profile_kernels.py --summarize $OUT/prof/raw.csv | tee $OUT/prof/summary.md
timeout 330 python3 tools/check_kernels.py bench --ws --batches 8,32 --levels 0.5,0.7,0.9 \
    --reps 20 --cache .carry/kcache_ws2 --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|Error|error" $OUT/bench/bench.log | head -5
grep -E "geomean" $OUT/bench/ws_table.md
awk -F'|' 'NR>2 && $4+0==0.7 {print $2,$3,$5,$6,$7,$8,$10}' $OUT/bench/ws_table.md
