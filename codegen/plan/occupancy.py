"""Stage 1: occupancy. The theoretical occupancy by the rules of the CUDA occupancy calculator
(cuda_occupancy.h), and stage 1's cut over a shape's configs: what launches, and occupancy >= a threshold.

Resident blocks per SM are the minimum of four limits:

  warps      max_warps_per_sm // ceil(threads / 32)
  blocks     max_blocks_per_sm
  registers  a warp's registers are regs_per_thread * 32 rounded up to reg_alloc_unit (256); each of
             the reg_sub_partitions (4) SM quarters holds regs_per_sm / 4 registers and whole warps,
             so warps_per_sm = 4 * ((regs_per_sm / 4) // regs_per_warp) (the "warp allocation
             granularity"); a block needing more than regs_per_block (with its warps rounded up to a
             multiple of 4), or regs_per_thread > max_regs_per_thread, cannot launch
  shared     (smem + smem_reserved_per_block) rounded up to smem_alloc_unit; smem_per_sm // that;
             a block over smem_per_block_optin (+ the reserved KiB on sm_80+) cannot launch

occupancy = blocks_per_sm * warps_per_block / max_warps_per_sm. The carveout is assumed to be the
largest (the driver picks it when a kernel needs it; cuda_occupancy.h's default state).
Vectorised over numpy arrays because the cost model evaluates thousands of configurations.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import UserError
from ..gpu import GPU
from ..spec import ConvShape
from .tables import space_table

LIMITS = ("warps", "blocks", "registers", "shared")

OCCUPANCY_MIN = 0.5
OCCUPANCY_MIN_BATCHED = 0.25  # "snn" at batch > 1: the batch brings the parallelism, and its fastest kernels
                              # (more output channels per thread, bigger tiles) sit at 30-40 % occupancy
                              # (docs/costmodel.md, "Batch > 1: held-out measurements")


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float               # active warps / max warps per SM, 0..1
    limiter: str                   # which of LIMITS binds ("none" if the block cannot launch at all)
    limits: dict                   # blocks per SM allowed by each limit
    regs_per_warp: int             # after rounding to the allocation unit
    smem_per_block: int            # bytes after adding the reserved part and rounding

    def to_dict(self) -> dict:
        return {"blocks_per_sm": self.blocks_per_sm, "warps_per_sm": self.warps_per_sm,
                "occupancy": self.occupancy, "limiter": self.limiter, "limits": dict(self.limits),
                "regs_per_warp": self.regs_per_warp, "smem_per_block": self.smem_per_block}


def _roundup(x, unit):
    return -(-x // unit) * unit


def block_limits(gpu: GPU, threads, regs_per_thread, smem_bytes) -> dict[str, np.ndarray]:
    """Blocks per SM allowed by each limit, element-wise over arrays (or scalars), plus the rounded
    register and shared-memory allocations under the keys 'regs_per_warp' and 'smem_alloc'."""
    threads = np.asarray(threads, dtype=np.int64)
    regs = np.asarray(regs_per_thread, dtype=np.int64)
    smem = np.asarray(smem_bytes, dtype=np.int64)
    warps = -(-threads // gpu.warp_size)

    by_warps = np.where(threads <= gpu.max_threads_per_block, gpu.max_warps_per_sm // warps, 0)
    by_blocks = np.full(np.broadcast(threads, regs, smem).shape, gpu.max_blocks_per_sm, dtype=np.int64)

    regs_per_warp = _roundup(regs * gpu.warp_size, gpu.reg_alloc_unit)
    # The hardware check assumes registers go to all sub-partitions at once: warps rounded up to 4.
    assumed = regs_per_warp * _roundup(warps, gpu.reg_sub_partitions)
    fits = (regs <= gpu.max_regs_per_thread) & (assumed <= gpu.regs_per_block) & (regs_per_warp * warps <= gpu.regs_per_block)
    per_quarter = gpu.regs_per_sm // gpu.reg_sub_partitions
    warps_by_regs = (per_quarter // np.maximum(regs_per_warp, 1)) * gpu.reg_sub_partitions
    by_regs = np.where(fits, np.where(regs_per_warp > 0, warps_by_regs // warps, 1 << 30), 0)

    smem_alloc = _roundup(smem + gpu.smem_reserved_per_block, gpu.smem_alloc_unit)
    cap = gpu.smem_per_block_optin + (gpu.smem_reserved_per_block if gpu.compute_capability[0] >= 8 else 0)
    by_smem = np.where(smem_alloc > cap, 0, gpu.smem_per_sm // np.maximum(smem_alloc, 1))
    by_smem = np.where(smem_alloc == 0, 1 << 30, by_smem)
    return {"warps": by_warps, "blocks": by_blocks, "registers": by_regs, "shared": by_smem,
            "regs_per_warp": regs_per_warp, "smem_alloc": smem_alloc}


def blocks_per_sm(gpu: GPU, threads, regs_per_thread, smem_bytes) -> np.ndarray:
    lim = block_limits(gpu, threads, regs_per_thread, smem_bytes)
    return np.minimum(np.minimum(lim["warps"], lim["blocks"]), np.minimum(lim["registers"], lim["shared"]))


def occupancy_array(gpu: GPU, threads, regs_per_thread, smem_bytes) -> tuple[np.ndarray, np.ndarray]:
    """(blocks per SM, occupancy) element-wise."""
    bps = blocks_per_sm(gpu, threads, regs_per_thread, smem_bytes)
    warps = -(-np.asarray(threads, dtype=np.int64) // gpu.warp_size)
    return bps, bps * warps / gpu.max_warps_per_sm


def occupancy(gpu: GPU, threads: int, regs_per_thread: int, smem_bytes: int) -> Occupancy:
    """Occupancy of one kernel configuration, with the limit that binds."""
    lim = block_limits(gpu, threads, regs_per_thread, smem_bytes)
    limits = {k: int(lim[k]) for k in LIMITS}
    bps = min(limits.values())
    warps = -(-threads // gpu.warp_size)
    limiter = "none" if bps == 0 else next(k for k in ("registers", "shared", "warps", "blocks") if limits[k] == bps)
    return Occupancy(bps, bps * warps, bps * warps / gpu.max_warps_per_sm, limiter, limits,
                     int(lim["regs_per_warp"]), int(lim["smem_alloc"]))


# ---- stage 1 over a shape's table ----------------------------------------------------------------

def table_occupancy(tab: dict[str, np.ndarray], gpu: GPU) -> dict[str, np.ndarray]:
    """Blocks per SM, warps per block, occupancy and whether it launches, per row of a table."""
    lim = block_limits(gpu, tab["bthreads"], tab["regs"], tab["smem"])
    bps = np.minimum(np.minimum(lim["warps"], lim["blocks"]), np.minimum(lim["registers"], lim["shared"]))
    warps = -(-tab["bthreads"] // gpu.warp_size)
    # The classic kernel stays within the 48 KiB every GPU grants without the opt-in attribute (static shared
    # memory); the warp-tiled one asks for more (dynamic, the runtime opts in). Only what the emitter can
    # build (kernel_rules.chunk_channels / ws_params find a channel chunk that fits).
    smem_cap = np.where(tab["ws"], gpu.smem_per_block_optin, gpu.smem_per_block)
    feasible = (bps > 0) & (tab["regs"] <= gpu.max_regs_per_thread) & (tab["smem"] <= smem_cap) & tab["buildable"]
    return {"bps": bps, "warps": warps, "occ": bps * warps / gpu.max_warps_per_sm, "feasible": feasible}


def occupancy_min(model: str, batch: int) -> float:
    """Stage 1's threshold: the paper's 50 %, or OCCUPANCY_MIN_BATCHED for "snn" at batch > 1."""
    return OCCUPANCY_MIN_BATCHED if model == "snn" and batch > 1 else OCCUPANCY_MIN


@lru_cache(maxsize=4096)
def stage1(shape: ConvShape, gpu: GPU, occ_min: float = OCCUPANCY_MIN, ws: bool = False) -> dict[str, Any]:
    """table_occupancy of the space table, "feasible" narrowed to the classic family unless `ws`, and the
    survivors "idx": occupancy >= occ_min, or where none reaches it the best there is ("relaxed")."""
    tab = space_table(shape)
    o = table_occupancy(tab, gpu)
    feasible = o["feasible"] & (ws | ~tab["ws"])
    occ = o["occ"]
    if not feasible.any():
        raise UserError(f"conv {shape.tag()}: no kernel configuration fits on {gpu.name} "
                        f"(shared memory per block {gpu.smem_per_block} B)")
    keep = feasible & (occ >= occ_min - 1e-9)
    relaxed = not keep.any()
    if relaxed:  # nothing reaches the threshold: keep the best occupancy there is, and say so in --explain
        keep = feasible & (occ >= occ[feasible].max() - 1e-9)
    return {**o, "feasible": feasible, "idx": np.flatnonzero(keep), "relaxed": relaxed}
