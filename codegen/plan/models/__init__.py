"""Stage 3: time by waves, one module per model. All three count the same waves (Eqs. 3-5 of the paper, times
the batch, the right way up) and differ in how they price them:

  "paper"  Eqs. 6-9 as printed, with the known slips fixed (paper.py)
  "snn"    (default) the fused kernel's per-channel latency and issue share, fitted to H100 measurements (snn.py)
  "pipes"  the "snn" stage 3 before the fit: per-block work on the FP32 and shared-memory pipes (pipes.py)
"""
from __future__ import annotations

import numpy as np

from ...errors import UserError
from ...gpu import GPU
from ...spec import ConvShape
from . import paper, pipes, snn

MODELS = ("snn", "pipes", "paper")


def check(model: str, batch: int) -> None:
    """A UserError for a model not in MODELS or a batch that is not a positive integer."""
    if model not in MODELS:
        raise UserError(f"unknown cost model '{model}': choose one of {', '.join(MODELS)}")
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise UserError(f"batch must be a positive integer, got {batch!r}")


def stage3(shape: ConvShape, gpu: GPU, tab: dict, occ: dict, batch: int, density: float, model: str, idx,
           consts: dict | None = None, ws_consts: dict | None = None) -> dict[str, np.ndarray]:
    """Stage 3 for the configs idx of tab (occ: occupancy.table_occupancy of tab): the waves, then `model`'s
    time and its terms ("predicted_us" among them). `consts` / `ws_consts` override the "snn" model's
    SNN_FIT / SNN_FIT_WS (the classic and the warp-tiled family's constants; tools/fit_costmodel.py fits them)."""
    threads = tab["bthreads"][idx]
    oc = occ["occ"][idx]
    num_blk = batch * tab["blocks_per_image"][idx]                  # Eq. 3, times B, with N tiles
    blk_wave = np.round(gpu.max_threads * oc / threads)             # Eq. 5 (= SMs x blocks per SM)
    waves = np.ceil(num_blk / blk_wave)                             # Eq. 4, the right way up
    if model == "paper":
        return paper.time(shape, gpu, tab, occ, batch, density, idx, num_blk, blk_wave, waves)
    if model == "pipes":
        return pipes.time(shape, gpu, tab, occ, batch, density, idx, num_blk, blk_wave, waves)
    return snn.time(shape, gpu, tab, occ, batch, density, idx, num_blk, blk_wave, waves, consts, ws_consts)
