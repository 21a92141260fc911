#!/bin/bash
# Device call 3 of session 4 (2026-11-23): nt 8 with each warp-wide copy / load / atomic on 512 contiguous
# bytes (vector v of thread t at n0 + v*THREADS*4), and weights copied through L1 (cp.async.ca, "_ca")
# against L2 only (cp.async.cg). Cubins precompiled here:
#   python3 tools/check_kernels.py compile --inner --vec --batches 1,32 --cache .carry/kcache -j 2 --prune
export PYTHONPATH=.; mkdir -p $OUT/bench
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
SNN_CACHE_DIR=.carry/kcache timeout 200 python3 -m pytest -q tests/gpu/test_kernels.py -k vec -p no:cacheprovider > $OUT/pytest_vec.log 2>&1
echo "pytest rc=$?"; tail -2 $OUT/pytest_vec.log
timeout 330 python3 tools/check_kernels.py bench --inner --batches 1,32 --levels 0.5,0.7,0.9 \
    --reps 20 --cache .carry/kcache --out $OUT/bench -j 16 > $OUT/bench/bench.log 2>&1
echo "bench rc=$?"; grep -E "BAD|spills" $OUT/bench/bench.log | head -5
grep -E "^batch|geomean" $OUT/bench/inner_table.md
awk -F'|' 'NR>2 && $4+0==0.7 {print $2,$3,$5,$6,$7,$8,$9,$10,$11,$12,$13}' $OUT/bench/inner_table.md
export SNN_PROFILE_CASES=v8 SNN_CACHE_DIR=.carry/kcache; mkdir -p $OUT/prof
timeout 200 ncu --clock-control none -k regex:sconv --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats --section InstructionStats \
    --metrics lts__t_bytes.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
    --csv --page raw python3 tools/profile_kernels.py > $OUT/prof/raw.csv 2> $OUT/prof/ncu.err
python3 tools/profile_kernels.py --summarize $OUT/prof/raw.csv | tee $OUT/prof/summary.md
