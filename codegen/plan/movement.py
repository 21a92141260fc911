"""Stage 2: data movement. Bytes a config moves for the whole batch ("paper": Table 2 in fp32 bytes; the
others: bytes from L2 into the SMs), the cut that keeps the configs moving the least, and the memory time
(DRAM and L2 traffic) that the "snn" and "pipes" stage-3 models take as a floor.
"""
from __future__ import annotations

import math

import numpy as np

from ..gpu import GPU
from ..spec import ConvShape
from .occupancy import occupancy_min, stage1
from .space import ws_allowed
from .tables import space_table

BYTES_PER_NNZ = 8          # a stored input of the COO* format: fp32 value + packed (h, w) position
                           # (the traffic terms; the fused kernel stages dense tiles)
ATOMIC_L2_BYTES = 8        # an fp32 atomic add is a read-modify-write in L2
STAGE2_KEEP = 1 / 3          # the paper's stage 2
STAGE2_KEEP_SNN = 1 / 2      # "snn": its third cut the 1x1 nt 8 configs (more spatial tiles, more weight
                             # re-reads) that measured fastest at batch 8/32 (docs/costmodel.md, "nt 8")


def bytes_moved(shape: ConvShape, tab: dict, batch: int, density: float, model: str, idx,
                clusters: bool = False) -> np.ndarray:
    """Stage 2's measure for the configs idx of tab, in bytes for the whole batch (`clusters`: the GPU's
    channel splits that fit a cluster reduce on chip, GPU.clusters)."""
    if model == "paper":  # Table 2 as printed (elements), in fp32 bytes, times the batch
        inp = shape.H * shape.W * shape.C * density
        wts = tab["tiles_h"][idx] * tab["tiles_w"][idx] * shape.R * shape.S * shape.C * shape.N
        out = shape.P * shape.Q * shape.N * tab["tiles_c"][idx]
        return 4.0 * batch * (inp + wts + out)
    return traffic(shape, tab, batch, density, idx, clusters)["l2_bytes"]


def atomic_split(tab: dict, idx, clusters: bool) -> np.ndarray:
    """Configs idx whose channel split adds into a zeroed output with atomics (and a memset and an epilogue
    launch around the kernel): tc < C, unless the split reduces through a cluster."""
    split = tab["tiles_c"][idx] > 1
    return split & ~tab["cluster_fit"][idx] if clusters else split


def traffic(shape: ConvShape, tab: dict, batch: int, density: float, idx,
            clusters: bool = False) -> dict[str, np.ndarray]:
    """Bytes the whole batch moves from L2 into the SMs, and the DRAM terms that do not depend on the GPU
    (but for `clusters`: a cluster's split sums on chip, one store an output)."""
    tiles_sp = tab["tiles_h"][idx] * tab["tiles_w"][idx]
    n_atomics = float(batch * shape.P * shape.Q * shape.N) * np.where(atomic_split(tab, idx, clusters),
                                                                       tab["tiles_c"][idx], 1)
    in_l2 = batch * tiles_sp * (tab["in_sp"][idx] * shape.C * density * BYTES_PER_NNZ + shape.C * 4)
    w_bytes = float(shape.C * shape.R * shape.S * shape.N * 4)
    w_l2 = batch * tiles_sp * w_bytes
    atom_l2 = n_atomics * ATOMIC_L2_BYTES
    one = np.ones_like(w_l2)
    return {"l2_bytes": in_l2 + w_l2 + atom_l2, "in_l2": in_l2, "w_l2": w_l2, "atomic_l2": atom_l2,
            "n_atomics": n_atomics,
            # the COO* input comes from DRAM once: halo re-reads hit L2
            "in_dram": one * batch * shape.C * shape.H * shape.W * density * BYTES_PER_NNZ,
            "w_bytes": one * w_bytes, "out_bytes": one * float(batch * shape.P * shape.Q * shape.N * 4)}


def stage2(shape: ConvShape, gpu: GPU, batch: int, density: float, model: str):
    """(stage-2 survivors, stage-1 survivors, data movement of each stage-1 survivor); indices into
    the space table."""
    s1 = stage1(shape, gpu, occupancy_min(model, batch), ws_allowed(model, batch))
    idx1 = s1["idx"]
    tab = space_table(shape)
    dm = bytes_moved(shape, tab, batch, density, model, idx1, gpu.clusters)
    share = STAGE2_KEEP_SNN if model == "snn" else STAGE2_KEEP
    order = np.lexsort((idx1, -s1["occ"][idx1], dm))  # least data movement; ties: higher occupancy, then space order
    # per kernel family: the warp-tiled blocks re-read weights less by design, so one ranking by data
    # movement would push every classic config out
    fam = tab["ws"][idx1][order]
    kept = [order[fam == f][:max(1, math.ceil(int((fam == f).sum()) * share))] for f in (False, True) if (fam == f).any()]
    return idx1[np.sort(np.concatenate(kept))], idx1, dm


def memory_time(shape: ConvShape, gpu: GPU, tab: dict, batch: int, density: float,
                idx) -> tuple[dict, np.ndarray, np.ndarray]:
    """(traffic, DRAM bytes, memory seconds) of the configs idx: the floor the "snn" and "pipes" models share."""
    tr = traffic(shape, tab, batch, density, idx, gpu.clusters)
    half_l2 = gpu.l2_bytes / 2
    w_dram = np.where(tr["w_bytes"] <= half_l2, tr["w_bytes"], tr["w_l2"])
    # output zeroed, then written back once if it stays in L2; else every channel tile misses again
    # (a cluster's split: written once, no memset)
    clustered = (tab["tiles_c"][idx] > 1) & ~atomic_split(tab, idx, gpu.clusters)
    out_dram = np.where(clustered, tr["out_bytes"],
                        np.where(tr["out_bytes"] <= half_l2, 2 * tr["out_bytes"], (1 + 2 * tab["tiles_c"][idx]) * tr["out_bytes"]))
    dram = tr["in_dram"] + w_dram + out_dram
    t_mem = np.maximum(dram / (gpu.dram_bandwidth_gbs * 1e9), tr["l2_bytes"] / (gpu.l2_bandwidth_gbs * 1e9))
    return tr, dram, t_mem
