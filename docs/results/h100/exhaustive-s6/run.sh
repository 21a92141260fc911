#!/bin/bash
# Device call 4 of session 6 (2026-11-23): the model's choice against a sample of stage-1 survivors on REAL
# activations at batch 32 and 0.7 (paper Fig. 8; `calibrate --exhaustive`: 4 distinct 3x3 shapes x 24 configs per
# network, which are issue 7's eight layers), to see whether run22/run20's uniform-random benches rank the configs
# as real inputs do; and the one outlier of bench-s6 (1x1 128->512 @28, batch 1, 0.5: 105.5 us) measured again.
# Cubins precompiled on the CPU machine (SNN_CACHE_DIR=.carry/cache_ab; the sample through
# runtime.calibrate.build_exhaustive(spec, "h100", 32, 0.7, 4, 24)).
set -u
[ -d .carry/cache_ab ] || tar xJf .carry/cache_ab.tar.xz -C .carry
export PYTHONPATH=$PWD SNN_CACHE_DIR=$PWD/.carry/cache_ab PYTHONUNBUFFERED=1 SNN_GIT_COMMIT=$(cat .carry/commit)
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; echo "commit $SNN_GIT_COMMIT"; } > $OUT/env.txt 2>&1
for n in resnet152 densenet201; do
    timeout 120 python3 -m cli build network_specs/$n.yaml --gpu h100 --batch 1,32 -j 16 2>&1 | tail -1
done > $OUT/build.log 2>&1
snn() { local t=$1; shift; echo "+ snn-run $*"; timeout "$t" python3 -c "import cli; cli.run_main()" "$@"; echo "exit $?"; }
{
for n in resnet152 densenet201; do
    snn 250 calibrate --spec network_specs/$n.yaml --batch 32 --levels 0.7 --images .carry/photos --exhaustive \
        --exhaustive-layers 4 --exhaustive-configs 24 --out $OUT
done
snn 60 bench layers --spec network_specs/resnet152.yaml --batch 1 --levels 0.5,0.7 --images .carry/photos \
    --layer layer2.1.conv3 --out $OUT/again
} > $OUT/bench.log 2>&1
grep -E "^\+|^exit|exhaustive|speedup" $OUT/bench.log
rm -f $OUT/*.png $OUT/again/*.png; gzip -f $OUT/calibrate_*.json
