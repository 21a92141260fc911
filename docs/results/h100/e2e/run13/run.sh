#!/bin/bash
# Device call 9 of 2026-11-23 (session 3): ResNet-152, thread-contiguous channels by default (this commit)
# against 01efa71 (the same without them), both with the revised cost model.
bash tools/e2e_ab.sh resnet152
