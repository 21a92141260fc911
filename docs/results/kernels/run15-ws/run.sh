#!/bin/bash
# Device call 2 of session 5: Nsight Compute on the warp-tiled kernels against the batch-32 winners
# (SNN_PROFILE_CASES=v9), and bench --ws at batch 32 with WS_VARIANTS (kc 8, hoisted loads, minb 4).
#   python3 tools/check_kernels.py compile --ws --batches 8,32 --cache .carry/kcache_ws -j 2
#   tar cJf .carry/kcache_ws.tar.xz -C .carry kcache_ws
export PYTHONPATH=.; mkdir -p $OUT/bench $OUT/prof
tar xJf .carry/kcache_ws.tar.xz -C .carry
export SNN_PROFILE_CASES=v9 SNN_CACHE_DIR=.carry/kcache_ws
timeout 200 ncu --clock-control none -k regex:sconv --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats --section InstructionStats \
    --metrics lts__t_bytes.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum \
    --csv --page raw python3 tools/profile_kernels.py > $OUT/prof/raw.csv 2> $OUT/prof/ncu.err
python3 tools/profile_kernels.py --summarize $OUT/prof/raw.csv | tee $OUT/prof/summary.md
timeout 300 python3 tools/check_kernels.py bench --ws --batches 32 --levels 0.5,0.7,0.9 \
    --reps 20 --cache .carry/kcache_ws --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|Error|error" $OUT/bench/bench.log | head -5
grep -E "geomean" $OUT/bench/ws_table.md
