#!/bin/bash
# Device call 6 of session 7 (2026-11-23): DenseNet-201 end to end at batch 8, this commit against 9118a6e (session 5's
# final code, whose plan keeps 1x1 convs on the classic kernel): session 6's e2e/run20 timed out before its old side
# finished. The old side first, 30 timed runs. Here: git archive 9118a6e | tar -x -C .carry/old (docs removed),
# tar cJf .carry/old.tar.xz -C .carry old; both sides' cubins precompiled into .carry/cache_ab.
set -u
tar xJf .carry/old.tar.xz -C .carry
for v in new old; do mkdir -p .carry/x && tar xJf .carry/cache_ab.tar.xz -C .carry/x && rm -rf .carry/cache_$v && mv .carry/x/cache_ab .carry/cache_$v; done
BATCHES=8 ORDER="old new" REPS=30 bash tools/e2e_ab.sh densenet201
