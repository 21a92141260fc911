#!/bin/bash
# Device call 6 of session 6 (2026-11-23): Nsight Compute on the batch-32 warp-tiled kernels the plan uses, at
# sparsity 0.99 (the fixed cost: 72-78 us on the ResNet-152 3x3 layers in bench-s6) and 0.7 (SNN_PROFILE_CASES=v10).
export PYTHONPATH=.; mkdir -p $OUT/prof
[ -d .carry/kcache22 ] || tar xJf .carry/kcache22.tar.xz -C .carry
export SNN_PROFILE_CASES=v10 SNN_CACHE_DIR=.carry/kcache22
timeout 400 ncu --clock-control none -k regex:sconv --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis \
    --metrics lts__t_bytes.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,dram__bytes.sum \
    --csv --page raw python3 tools/profile_kernels.py > $OUT/prof/raw.csv 2> $OUT/prof/ncu.err
echo "ncu rc=$?"; tail -3 $OUT/prof/ncu.err
python3 tools/profile_kernels.py --summarize $OUT/prof/raw.csv | tee $OUT/prof/summary.md
