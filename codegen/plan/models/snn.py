"""The "snn" stage-3 model (the default): the waves priced as the fused kernel spends them.

A block walks its tc channels one after the other; a channel costs its serial latency (one warp's chain:
wait, taps, mask loop, FMAs: fixed + per in-tile pixel tested + per FMA) plus its share of the SM's issue
slots when k blocks run side by side (the sum, not the longer: Nsight Compute profiles show neither hidden
behind the other). Waves of SMs x blocks per SM, the last one timed on its own; memory time per wave from L2
/ DRAM traffic as a floor; the write-back (epilogue fused where tc = C or the split reduces through a cluster), a
fixed cost, and after a split that adds with atomics the epilogue launch that reads its sums. Its constants (SNN_FIT) are
fitted to H100 measurements by tools/fit_costmodel.py (docs/costmodel.md, "Stage 3" and "Fitted to H100
measurements").
"""
from __future__ import annotations

import numpy as np

from ...gpu import GPU
from ...spec import ConvShape
from ..movement import atomic_split, memory_time

ISSUE_PER_SM = 4           # warp instructions an SM issues per clock (4 schedulers, Volta..Hopper)
WS_FILL_INS = 2            # warp instructions per 16-byte weight vector a warp-tiled block copies (LDGSTS + add, SASS)
# Fitted by tools/fit_costmodel.py (least squares of log time over H100 kernel measurements of bench_kernels.py);
# cycles are per channel a block walks unless said otherwise, so they scale with the GPU's clock.
SNN_FIT = {
    "fixed_us": 4.788,     # launch + first fill + write-back of a kernel on cold L2, once per layer
    "epilogue_us": 4.25,   # the runtime's epilogue launch after a split that adds with atomics (tc < C), + 4
                           # passes over the output's bytes (the sums read and zeroed, the output, a residual):
                           # one launch on the benches' event-timed scale (fitted there to a memset launch;
                           # graph replay on the H100: ~2.4 us, docs/results/fusion/h100 in git history)
                           # (graph replay on the H100: 2.4 us each at batch 1, the same)
    "cluster_us": 1.0,     # a split reduced through a cluster instead: two cluster barriers and the sums over
                           # distributed shared memory (an estimate, not fitted)
    "ch_cyc": 173.8,       # serial latency of one channel for the block's warps (wait, taps, mask)
    "pix_cyc": 12.61,      # + per in-tile pixel tested by the mask loop
    "fma_cyc": 5.544,      # + per FMA a thread issues
    "pix_ins": 0.6032,     # warp instructions per channel, warp and in-tile pixel (bit test, branch, load),
                           # + 1 per FMA: the issue side when k blocks share an SM's 4 schedulers
    "out_cyc": 11.88,      # SM cycles per warp and accumulator written back (atomics / stores), per block
    "ch_ins": 17.21,       # warp instructions per channel and warp besides the pixel loop (loop, mask words)
    "w_ins": 3.73,         # + per weight a thread loads for the channel (R*S*nt: cp.async, address, LDS)
}
# The warp-tiled family's: the same terms (w_ins unused: its weight loads are counted from the SASS, WS_FILL_INS).
SNN_FIT_WS = dict(SNN_FIT)


def time(shape: ConvShape, gpu: GPU, tab: dict, occ: dict, batch: int, density: float, idx, num_blk, blk_wave,
         waves, consts: dict | None = None, ws_consts: dict | None = None) -> dict[str, np.ndarray]:
    """Per-channel latency + issue share per wave, memory as a floor, the tail wave apart, fixed costs;
    `consts` / `ws_consts` override SNN_FIT / SNN_FIT_WS."""
    th, tw, cpb = tab["th"][idx], tab["tw"][idx], tab["cpb"][idx]
    tc_avg = tab["tc_avg"][idx]
    bps, warps = occ["bps"][idx], occ["warps"][idx]
    kc, kw, ws = {**SNN_FIT, **(consts or {})}, {**SNN_FIT_WS, **(ws_consts or {})}, tab["ws"][idx]
    k_ = {n: np.where(ws, kw[n], kc[n]) for n in kc}
    clk = gpu.boost_clock_mhz * 1e6
    f = tab["nt"][idx] * tab["pairs_thr"][idx] * density         # FMAs per thread and channel (its register tile)
    pred = tab["pred"][idx]                                       # predicated bodies issue at any density
    f_issued = tab["nt"][idx] * tab["pairs_thr"][idx] * (pred + (1.0 - pred) * density)
    npix = tab["npix"][idx]
    lat = k_["ch_cyc"] + k_["pix_cyc"] * npix + k_["fma_cyc"] * f
    rs, nt = shape.R * shape.S, tab["nt"][idx]
    # weights: the classic kernel's per-thread ring (fitted, per weight); a warp-tiled warp loads its taps as
    # vectors and copies its share of the block's weight rows (SASS: one LDS.128 a vector, ~2 a copied one)
    w_warp = np.where(tab["ws"][idx], rs * np.ceil(nt / 4) + WS_FILL_INS * rs * cpb / 128 / warps,
                      k_["w_ins"] * rs * nt)
    ins = warps * (k_["ch_ins"] + w_warp + k_["pix_ins"] * npix + f_issued)  # warp instructions per channel and block

    out = warps * th * tw * tab["nt"][idx] * k_["out_cyc"]         # SM cycles of the write-back, once per block

    def wave(k):  # seconds for an SM running k blocks side by side, its blocks' memory share aside
        return (k * out + tc_avg * (lat + k * ins / ISSUE_PER_SM)) / clk

    tr, dram, t_mem = memory_time(shape, gpu, tab, batch, density, idx)
    m_blk = t_mem / num_blk

    full = np.floor(num_blk / blk_wave)
    tail = num_blk - full * blk_wave
    k_tail = np.maximum(np.ceil(tail / gpu.sms), 1)
    t_full = np.maximum(wave(bps), blk_wave * m_blk)
    t_tail = np.where(tail > 0, np.maximum(wave(k_tail), tail * m_blk), 0.0)
    kernel_us = (full * t_full + t_tail) * 1e6
    # a split with atomics adds into the runtime's zeroed accumulator: the epilogue launch after it reads the sums
    # into the output and zeroes them again (no memset)
    out_us = tr["out_bytes"] / (gpu.dram_bandwidth_gbs * 1e9) * 1e6
    atomic = atomic_split(tab, idx, gpu.clusters)
    epilogue_us = np.where(atomic, k_["epilogue_us"] + 4 * out_us, 0.0)
    fixed_us = k_["fixed_us"] + np.where(atomic, epilogue_us,
                                         np.where(tab["tiles_c"][idx] > 1, k_["cluster_us"], 0.0))
    return {"predicted_us": kernel_us + fixed_us,
            "kernel_us": kernel_us, "fixed_us": fixed_us,
            "epilogue_us": epilogue_us,   # the epilogue launch after an atomic split (in fixed_us)
            "num_blocks": num_blk, "blk_wave": blk_wave, "waves": waves, "tail_blocks": tail,
            "compute_us": (full * wave(bps) + np.where(tail > 0, wave(k_tail), 0.0)) * 1e6,
            "latency_bound": lat >= bps * ins / ISSUE_PER_SM,
            "memory_us": t_mem * 1e6, "dram_bytes": dram, "l2_bytes": tr["l2_bytes"],
            "atomic_us": tr["atomic_l2"] / (gpu.l2_bandwidth_gbs * 1e9) * 1e6, "n_atomics": tr["n_atomics"],
            "fmas": cpb * tab["pairs_sp"][idx] * tc_avg * density * num_blk, "edge_waste": tab["edge_waste"][idx]}
