"""The "paper" stage-3 model: Eqs. 6-9 of the cuSNN paper as printed, with the known slips fixed (R*S in
Eq. 6; Eq. 4 the right way up and Table 2 / Eq. 3 times the batch in the shared stages) and N in Eq. 6 read
as the block's own output channels (our blocks split N; the paper's do not).
"""
from __future__ import annotations

import numpy as np

from ...gpu import GPU
from ...spec import ConvShape


def time(shape: ConvShape, gpu: GPU, tab: dict, occ: dict, batch: int, density: float, idx, num_blk, blk_wave,
         waves) -> dict[str, np.ndarray]:
    """Time per wave at the GPU's peak FP32 rate scaled by occupancy, times the waves."""
    th, tw, cpb = tab["th"][idx], tab["tw"][idx], tab["cpb"][idx]
    oc = occ["occ"][idx]
    flops_blk = 2.0 * th * tw * tab["tc"][idx] * shape.R * shape.S * cpb * density  # Eq. 6 with R*S
    flops_wave = blk_wave * flops_blk                                               # Eq. 7
    time_wave = flops_wave / (gpu.peak_fp32_flops * oc)                             # Eq. 8
    return {"predicted_us": time_wave * waves * 1e6,                                # Eq. 9
            "num_blocks": num_blk, "blk_wave": blk_wave, "waves": waves,
            "flops_blk": flops_blk, "time_wave_us": time_wave * 1e6}
