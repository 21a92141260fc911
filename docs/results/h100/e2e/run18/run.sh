#!/bin/bash
# Device call 9 of session 5 (2026-11-23): VGG-19 and DenseNet-201 end to end at batch 8, this commit against
# bba7efc (session 4's final code), each side built, calibrated and timed in the same call
# (.carry/old = git archive bba7efc; caches: session 4's cubins, misses compiled there).
mkdir -p $OUT/vgg19 $OUT/densenet201
OUT0=$OUT
OUT=$OUT0/vgg19 BATCHES=8 bash tools/e2e_ab.sh vgg19
OUT=$OUT0/densenet201 BATCHES=8 bash tools/e2e_ab.sh densenet201
