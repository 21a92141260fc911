#!/bin/bash
# Device call 2 of session 4: why the nt 8 kernels of run10-inner are 2-6x slower (Nsight Compute).
export PYTHONPATH=. SNN_PROFILE_CASES=v8 SNN_CACHE_DIR=.carry/kcache; mkdir -p $OUT/prof
timeout 300 ncu --clock-control none -k regex:sconv --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats --section InstructionStats --section MemoryWorkloadAnalysis \
    --metrics lts__t_bytes.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__t_sectors_op_red.sum,l1tex__t_bytes_pipe_lsu_mem_global_op_ldgsts.sum \
    --csv --page raw python3 tools/profile_kernels.py > $OUT/prof/raw.csv 2> $OUT/prof/ncu.err
tail -3 $OUT/prof/ncu.err
python3 tools/profile_kernels.py --summarize $OUT/prof/raw.csv | tee $OUT/prof/summary.md
