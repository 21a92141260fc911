#!/bin/bash
# Device call 5 of session 4 (2026-11-23): the ResNet-152 1x1 layers at batch 8 and 32, around the nt 8
# winner (tools/check_kernels.py tune1x1_kernels: tiles, threads, tc, hoisted loads, ring depth, chunk);
# Nsight Compute on the nt 4 / nt 8 twins (L2 bytes for the cost model's floor); the L2 bandwidth a copy sees.
# Cubins precompiled here: python3 tools/check_kernels.py compile --tune1x1 --batches 8,32 --cache .carry/kcache -j 2
export PYTHONPATH=.; mkdir -p $OUT/bench $OUT/prof
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
python3 docs/results/kernels/run12-1x1/l2bw.py | tee $OUT/l2bw.txt
timeout 300 python3 tools/check_kernels.py bench --tune1x1 --batches 8,32 --levels 0.5,0.7,0.9 \
    --reps 20 --cache .carry/kcache --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|spills" $OUT/bench/bench.log | head -5
grep -E "\| 0.7 \|" $OUT/bench/top_table.md
export SNN_PROFILE_CASES=v8 SNN_CACHE_DIR=.carry/kcache
timeout 200 ncu --clock-control none -k regex:sconv --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats --section InstructionStats \
    --metrics lts__t_bytes.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
    --csv --page raw python3 tools/profile_kernels.py > $OUT/prof/raw.csv 2> $OUT/prof/ncu.err
python3 tools/profile_kernels.py --summarize $OUT/prof/raw.csv > $OUT/prof/summary.md; cat $OUT/prof/summary.md
