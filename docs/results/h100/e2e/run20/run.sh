#!/bin/bash
# Device call 10 of session 6 (2026-11-23): DenseNet-201 end to end at batch 8, this commit (warp-tiled 1x1 convs
# planned, the leaner channel header) against 9118a6e (session 5's final code). DenseNet's 1x1 convs (N = 128)
# were not in run22's pre-registered bench. To fit the last minutes of device time, both sides are calibrated at
# 0.7 only (`--levels 0.7`), the e2e profile's level. .carry/old = git archive 9118a6e (docs removed); both sides'
# cubins precompiled into .carry/cache_ab.
set -u
tar xJf .carry/old.tar.xz -C .carry
for v in new old; do mkdir -p .carry/x && tar xJf .carry/cache_ab.tar.xz -C .carry/x && rm -rf .carry/cache_$v && mv .carry/x/cache_ab .carry/cache_$v; done
BATCHES=8 bash tools/e2e_ab.sh densenet201 --levels 0.7
