#!/bin/bash
# Device call 5 of session 7 (2026-11-23): run21 again with the old side first and 40 timed runs (run21: the new side, run first, had episodes of 4-8 ms wall-time spikes; the old side none). ResNet-152, then DenseNet-201, end to end at batch 1, this commit (warp-tiled
# kernels planned at batch 1, run25-b1) against e28bb40 (session 6's final code), each side built, calibrated and timed
# in the same call. Here: git archive e28bb40 | tar -x -C .carry/old7 (docs/results removed), tar cJf .carry/old7.tar.xz;
# both sides' cubins precompiled into .carry/cache_ab (SNN_CACHE_DIR=.carry/cache_ab python3 -m cli build ... in each
# tree). Each network's r.tgz lands in $OUT/<network>/.
set -u
tar xJf .carry/old7.tar.xz -C .carry && rm -rf .carry/old && mv .carry/old7 .carry/old
for v in new old; do mkdir -p .carry/x && tar xJf .carry/cache_ab.tar.xz -C .carry/x && rm -rf .carry/cache_$v && mv .carry/x/cache_ab .carry/cache_$v; done
O=$OUT
for n in resnet152 densenet201; do
    mkdir -p $O/$n; OUT=$O/$n BATCHES=1 ORDER="old new" REPS=40 bash tools/e2e_ab.sh $n
done
