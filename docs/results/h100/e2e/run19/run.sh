#!/bin/bash
# Device call 3 of session 6 (2026-11-23): ResNet-152 end to end at batch 8 and 32, this commit (warp-tiled 1x1
# convs planned at batch >= 8) against 9118a6e (session 5's final code), each side built, calibrated and timed in
# the same call. Here: git archive 9118a6e | tar -x -C .carry/old (docs removed); both sides' cubins precompiled
# into .carry/cache_ab (SNN_CACHE_DIR=.carry/cache_ab python3 -m cli build ... --batch 8,32, in each tree).
set -u
tar xJf .carry/old.tar.xz -C .carry
for v in new old; do mkdir -p .carry/x && tar xJf .carry/cache_ab.tar.xz -C .carry/x && rm -rf .carry/cache_$v && mv .carry/x/cache_ab .carry/cache_$v; done
BATCHES=8,32 bash tools/e2e_ab.sh resnet152
