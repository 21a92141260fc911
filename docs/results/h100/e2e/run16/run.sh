#!/bin/bash
# Device call 7 of session 4 (2026-11-23): DenseNet-201 end to end, this commit against 77428b3.
bash tools/e2e_ab.sh densenet201
