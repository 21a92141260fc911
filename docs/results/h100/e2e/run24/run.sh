#!/bin/bash
# Device call 5 of session 8 (2026-11-23): warp-tiled 1x1 convs at batch 1 priced with their own constants
# (costmodel.SNN_FIT_WS_1X1_B1, session 7's warp-tiled fit) against the previous commit, end to end at batch 1,
# ResNet-152 then DenseNet-201, each side built, calibrated and timed in the same call (old side first, 40 runs).
# Prediction, written before the call (from tune-s8's measurements of the changed picks, photos A: 0.97x / 0.90x
# on the changed 1x1 levels): kernel sum -0.5 to -2 % on ResNet-152 (88 of 165 1x1 levels change), -3 to -6 % on
# DenseNet-201 (1067 of 1111 change, 98 new kernels).
# Here: git archive <previous commit> | tar -x -C .carry/old8 (docs/results removed), tar cJf .carry/old8.tar.xz;
# both sides' cubins precompiled into .carry/cache_ab8 (SNN_CACHE_DIR=.carry/cache_ab8 python3 -m cli build ... in
# each tree). Each network's r.tgz lands in $OUT/<network>/.
set -u
tar xJf .carry/old8.tar.xz -C .carry && rm -rf .carry/old && mv .carry/old8 .carry/old
for v in new old; do mkdir -p .carry/x && tar xJf .carry/cache_ab8.tar.xz -C .carry/x && rm -rf .carry/cache_$v && mv .carry/x/cache_ab8 .carry/cache_$v; done
O=$OUT
for n in resnet152 densenet201; do
    mkdir -p $O/$n; OUT=$O/$n BATCHES=1 ORDER="old new" REPS=40 bash tools/e2e_ab.sh $n
done
