#!/bin/bash
# ResNet-152 end to end at batch 8, this commit (warp-tiled configs planned at batch >= 8) against bba7efc
# (session 4's final code), one device call (run from docs/results/kernels/run18-model/run.sh):
#   git archive bba7efc | tar -x -C .carry/old; cache_new / cache_old: session 4's cubins, misses compiled there
BATCHES=${BATCHES:-8} bash tools/e2e_ab.sh resnet152
