"""measure: timing, inputs and sparsity profiles, layer and e2e benchmarks, reports and plots. Used by
calibrate and the `snn-run bench` commands, never the other way round.

- common:   CLI list parsing, level keys, small statistics, shape grouping, writing a result (no torch)
- timing:   Env (torch, the device, what a result records), Timer and CUDA-event timing, NVML, kernel sums
- inputs:   kernel caches and weights on the device, the image pool, real pre-activations, levels
- profiles: sparsity profiles: biases shifted so each ReLU reaches a target sparsity
- layer:    `bench layers`: one conv layer's sparse kernel against cuDNN (calibrate times with it too)
- e2e:      `bench e2e`: the whole network against the strongest dense configurations, and energy
- summary:  summary.md from result documents (no torch)
- plots:    PNG plots from result documents (matplotlib; no torch)
- report:   a results folder -> summary.md and plots (no torch)

No module imports torch at import time: torch is imported where a measurement starts.
"""
