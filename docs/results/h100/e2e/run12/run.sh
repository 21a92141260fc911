#!/bin/bash
# Device call 6 of 2026-11-23 (session 3): VGG-19, the revised cost model (this commit) against 2aa4a42.
bash tools/e2e_ab.sh vgg19
