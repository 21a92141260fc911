#!/bin/bash
# Device call 2 of 2026-11-23 (session 3), commit 6bf92a1: Nsight Compute on the kernels of
# tools/profile_kernels.py (cubins from the carried .carry/kcache), one launch each.
export PYTHONPATH=.; mkdir -p $OUT/prof
timeout 400 ncu --clock-control none -k regex:sconv --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats --section InstructionStats \
    --metrics lts__t_bytes.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__inst_executed.sum,dram__bytes.sum \
    --csv --page raw python3 tools/profile_kernels.py > $OUT/prof/raw.csv 2> $OUT/prof/ncu.err
python3 tools/profile_kernels.py --summarize $OUT/prof/raw.csv | tee $OUT/prof/summary.md
