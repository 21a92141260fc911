"""Registers and shared memory of the kernel the emitter writes for each config, over whole arrays of configs.

The kernel's resource rules live in codegen/kernel_rules.py (the emitter renders with them); here they are
mirrored over numpy arrays (weight_ring_depth, register_cap, min_blocks, chunk_channels;
tests/test_plan_resources.py checks they agree with the scalar functions), and the warp-tiled family's
(kernel_rules.ws_params) applied row by row. The constants are fitted to ptxas (docs/costmodel.md,
"Resource estimate").
"""
from __future__ import annotations

import numpy as np

from .. import kernel_rules as rules
from ..config import KernelConfig
from ..spec import ConvShape

REG_BASE = 26              # registers beyond accumulators and one channel's taps: addresses, masks,
                           # loop state (median of ptxas - th*tw*nt - R*S*nt over 280 sm_90 kernels)
SMEM_ALIGN = 16            # ptxas places the 16-byte aligned weight ring after the tile and masks


def _ring_depth(R, S, tc, threads, nt):
    """WD: the largest depth <= WEIGHT_RING_DEPTH and <= tc whose ring fits WEIGHT_RING_LIMIT, at least 1."""
    slot = R * S * threads * nt * 4
    return np.maximum(1, np.minimum(np.minimum(rules.WEIGHT_RING_DEPTH, tc), rules.WEIGHT_RING_LIMIT // slot))


def _register_cap(threads, blocks):
    warps_per_quadrant = -(-(threads // 32) * blocks // 4)
    return np.minimum(255, 16384 // (warps_per_quadrant * 32) // 8 * 8)


def _min_blocks(need, threads):
    """MINB: register_cap only falls as blocks grow, so the blocks allowed are a prefix of 1..32."""
    need = np.minimum(need, 255)
    blocks = np.ones_like(threads)
    for b in range(2, 33):
        blocks = np.where((blocks == b - 1) & (_register_cap(threads, b) >= need), b, blocks)
    return blocks


def _chunk(npix, words, ring, tc):
    """KC: the largest divisor of tc, <= 32, whose tile + masks + ring fit STATIC_SMEM_LIMIT; 0 where none
    does (kernel_rules.chunk_channels raises: the emitter cannot build the config)."""
    kc = np.zeros_like(tc)
    for k in range(1, 33):
        fits = (tc % k == 0) & (rules.tile_smem_bytes(npix, k, words, ring) <= rules.STATIC_SMEM_LIMIT)
        kc = np.where(fits, k, kc)
    return kc


def kernel_params(shape: ConvShape, th, tw, tc, threads, nt) -> dict[str, np.ndarray]:
    """NPIX, NWORDS, WD, KC (0: not buildable), MINB and the register cap of the emitted classic kernel."""
    npix = ((th - 1) * shape.stride[0] + shape.R) * ((tw - 1) * shape.stride[1] + shape.S)
    words = -(-npix // 32)
    wd = _ring_depth(shape.R, shape.S, tc, threads, nt)
    ring = wd * shape.R * shape.S * threads * nt * 4
    minb = _min_blocks(th * tw * nt + shape.R * shape.S * nt + rules.REG_MARGIN, threads)
    return {"npix": npix, "words": words, "wd": wd, "ring": ring, "kc": _chunk(npix, words, ring, tc),
            "minb": minb, "reg_cap": _register_cap(threads, minb)}


def classic_resources(shape: ConvShape, th, tw, tc, threads, nt):
    """(registers, static smem, buildable) of the emitted classic kernel, as arrays."""
    k = kernel_params(shape, th, tw, tc, threads, nt)
    regs = np.minimum(th * tw * nt + shape.R * shape.S * nt + REG_BASE, k["reg_cap"])
    tile = k["npix"] * k["kc"] * 4 + k["kc"] * k["words"] * 4            # xs[NPIX*KC] + masks[KC*NWORDS]
    smem = -(-tile // SMEM_ALIGN) * SMEM_ALIGN + k["ring"]               # + wring[WD*RS*NT*THREADS]
    return regs, smem, k["kc"] > 0


def ws_resources(shape: ConvShape, th, tw, tc, threads, nt, wh, ww):
    """(registers, dynamic shared bytes, buildable) of warp-tiled configs (kernel_rules.ws_params), per row."""
    regs, smem, ok = [], [], []
    for row in zip(th.tolist(), tw.tolist(), tc.tolist(), threads.tolist(), nt.tolist(), wh.tolist(), ww.tolist()):
        cfg = KernelConfig(*row)
        r = rules.ws_params(shape, cfg)
        regs.append(min(cfg.th * cfg.tw * cfg.nt + shape.R * shape.S * cfg.nt + REG_BASE, r["REG_CAP"]))
        smem.append(r["SMEM"])
        ok.append(r["KC"] > 0 and cfg.tc % r["KC"] == 0 and r["REGS_OK"] and rules.ws_eligible(shape, cfg))
    return np.array(regs, dtype=np.int64), np.array(smem, dtype=np.int64), np.array(ok, dtype=bool)


def resources(shape: ConvShape, th, tw, tc, threads, nt, wh, ww):
    """(registers, shared bytes, buildable) per row of int64 arrays of either family."""
    ws = wh * ww > 1
    regs, smem, buildable = classic_resources(shape, th, tw, tc, threads, nt)
    if ws.any():
        regs, smem, buildable = regs.copy(), smem.copy(), buildable.copy()
        regs[ws], smem[ws], buildable[ws] = ws_resources(shape, *(a[ws] for a in (th, tw, tc, threads, nt, wh, ww)))
    return regs, smem, buildable


def cluster_fit(shape: ConvShape, th, tw, tc, threads, nt, wh, ww, smem):
    """kernel_rules.cluster_fits per row: the block's partial tile against the shared memory its staging
    takes (classic: input tile + weight ring; warp-tiled: both stages, `smem` from `resources`)."""
    k = kernel_params(shape, th, tw, tc, threads, nt)
    stage = np.where(wh * ww > 1, smem // 4, k["npix"] * k["kc"] + k["ring"] // 4)
    return rules.cluster_fits(-(-shape.C // tc), th * wh * tw * ww, threads * nt, stage)


def estimate_resources(shape: ConvShape, config: KernelConfig) -> tuple[int, int]:
    """(registers per thread, shared bytes per block) of the kernel emit.render_sparse writes for `config`:
    regs = min(th*tw*nt + R*S*nt + REG_BASE, the __launch_bounds__ cap); smem = the KC-channel input tile
    (halo included) + its masks, rounded up to 16 B, + the WD-deep weight ring (static), or for a
    warp-tiled config both stages of input tile and weights (dynamic). Raises ValueError where the emitter
    cannot build the config (as kernel_rules.chunk_channels does)."""
    row = (np.array([getattr(config, k)], dtype=np.int64) for k in ("th", "tw", "tc", "threads", "nt", "wh", "ww"))
    regs, smem, buildable = resources(shape, *row)
    if not buildable[0]:
        raise ValueError(f"{config.tag()}: the emitter cannot build it for {shape.tag()} (tile and ring over "
                         f"{rules.STATIC_SMEM_LIMIT} B of shared memory)")
    return int(regs[0]), int(smem[0])
