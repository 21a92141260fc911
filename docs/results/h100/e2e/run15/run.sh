#!/bin/bash
# Device call 6 of session 4 (2026-11-23), after the run13-model bench in the same call: ResNet-152 end to
# end, this commit (nt 8 for 1x1 convs picked by the revised cost model, hoisting at batch 1) against
# 77428b3 (session 3's final main). Builds compile their cache misses here (-j 16).
bash tools/e2e_ab.sh resnet152
