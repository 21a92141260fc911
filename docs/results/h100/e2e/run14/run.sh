#!/bin/bash
# Device call 4 of session 4 (2026-11-23): ResNet-152 end to end, this commit (v8: hoisted value loads by
# default at batch 1, nt 8 in the 1x1 configuration space) against 77428b3 (session 3's final main: vec
# already the default, so this measures session 4's changes only). Caches precompiled on the CPU machine.
bash tools/e2e_ab.sh resnet152
