"""The "pipes" stage-3 model: the "snn" stage 3 before the fit. Per-block work on the FP32 and shared-memory
pipes, issue limited below WARPS_FOR_FULL_ISSUE resident warps, the memory share per block, the tail wave
apart. Kept selectable: on the H100 its picks ran ResNet-152 end to end faster than the fitted model's
(docs/costmodel.md, "Two stage-3 models").
"""
from __future__ import annotations

import numpy as np

from ...gpu import GPU
from ...spec import ConvShape
from ..movement import BYTES_PER_NNZ, memory_time

K_NNZ_ALU = 6              # integer/branch instructions per thread per stored nonzero
K_OUT_ALU = 2              # per accumulator written back
SMEM_LANES_PER_SM = 32     # shared-memory pipe: 128 B/clk/SM on Volta..Hopper
WARPS_FOR_FULL_ISSUE = 16  # fewer resident warps per SM than this cannot hide latency
LAUNCH_US = 1.5            # per kernel of the sparse path
SPARSE_PATH_KERNELS = 3


def time(shape: ConvShape, gpu: GPU, tab: dict, occ: dict, batch: int, density: float, idx, num_blk, blk_wave,
         waves) -> dict[str, np.ndarray]:
    """Waves of per-block pipe time, memory as a floor, plus the input conversion and the launches."""
    bps, warps = occ["bps"][idx], occ["warps"][idx]
    th, tw, cpb, threads = tab["th"][idx], tab["tw"][idx], tab["cpb"][idx], tab["threads"][idx]
    tc_avg = tab["tc_avg"][idx]
    nnz = tab["in_sp"][idx] * tc_avg * density                  # non-zero inputs per block
    fma = cpb * tab["pairs_sp"][idx] * tc_avg * density         # real multiply-adds, whole register tile
    alu = fma + threads * nnz * K_NNZ_ALU + cpb * th * tw * K_OUT_ALU
    lsu = (fma                                                  # a weight read from shared memory per FMA
           + threads * nnz                                      # every thread reads every nonzero (broadcast)
           + nnz * BYTES_PER_NNZ / 4                            # staging the input tile into shared memory
           + tc_avg * shape.R * shape.S * cpb                   # staging the weights
           + cpb * th * tw)                                     # the atomics
    c_blk = np.maximum(alu / gpu.fp32_lanes_per_sm, lsu / SMEM_LANES_PER_SM) / (gpu.boost_clock_mhz * 1e6)
    tr, dram, t_mem = memory_time(shape, gpu, tab, batch, density, idx)
    m_blk = t_mem / num_blk

    def issue(blocks_on_sm):  # seconds for an SM to run that many blocks side by side
        return blocks_on_sm * c_blk / np.minimum(1.0, blocks_on_sm * warps / WARPS_FOR_FULL_ISSUE)

    full = np.floor(num_blk / blk_wave)
    tail = num_blk - full * blk_wave
    k_tail = np.ceil(tail / gpu.sms)
    t_full = np.maximum(issue(bps), blk_wave * m_blk)
    t_tail = np.where(tail > 0, np.maximum(issue(np.maximum(k_tail, 1)), tail * m_blk), 0.0)
    convert = (batch * shape.C * shape.H * shape.W * (4 + density * BYTES_PER_NNZ)) / (gpu.dram_bandwidth_gbs * 1e9)
    kernel_us = (full * t_full + t_tail) * 1e6
    return {"predicted_us": kernel_us + convert * 1e6 + SPARSE_PATH_KERNELS * LAUNCH_US,
            "kernel_us": kernel_us, "convert_us": np.full_like(kernel_us, convert * 1e6),
            "num_blocks": num_blk, "blk_wave": blk_wave, "waves": waves, "tail_blocks": tail,
            "compute_us": (full * issue(bps) + np.where(tail > 0, issue(np.maximum(k_tail, 1)), 0.0)) * 1e6,
            "memory_us": t_mem * 1e6, "dram_bytes": dram, "l2_bytes": tr["l2_bytes"],
            "atomic_us": tr["atomic_l2"] / (gpu.l2_bandwidth_gbs * 1e9) * 1e6, "n_atomics": tr["n_atomics"],
            "fmas": fma * num_blk, "edge_waste": tab["edge_waste"][idx]}
