#!/bin/bash
# Device call 5 of 2026-11-23 (session 3): DenseNet-201, the revised cost model (this commit) against 2aa4a42.
bash tools/e2e_ab.sh densenet201 --levels 0.4:0.9:0.1
