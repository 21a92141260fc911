"""Per-config numeric tables: what a block really touches (edges included), block counts and the resource
estimate, as parallel arrays over a shape's configs. Nothing here depends on the GPU, the batch or the level;
the three stages read these tables.
"""
from __future__ import annotations

from functools import cache, lru_cache

import numpy as np

from ..config import KernelConfig
from ..spec import ConvShape
from .resources import cluster_fit, resources
from .space import space_arrays

PRED_FMA_MAX = 4  # ptxas if-converts a pixel body of <= 4 FMAs: it issues for zero inputs too (docs/performance.md)


def axis_counts(n_out: int, n_in: int, t: int, stride: int, k: int, pad: int) -> tuple[int, int, int, int]:
    """Along one axis, for tile size t: (tiles, real input rows summed over tiles (halo included,
    padding excluded), (output, tap) pairs hitting a real input summed over all tile rows including
    the padded ones past n_out, the same pairs for rows < n_out only)."""
    tiles = -(-n_out // t)
    t_in = (t - 1) * stride + k
    starts = np.arange(tiles) * t * stride - pad
    real_in = int((np.clip(starts + t_in, 0, n_in) - np.clip(starts, 0, n_in)).sum())
    rows = np.arange(tiles * t)[:, None] * stride - pad + np.arange(k)[None, :]
    hit = (rows >= 0) & (rows < n_in)
    return tiles, real_in, int(hit.sum()), int(hit[:n_out].sum())


@cache
def _taps_per_input(t: int, k: int, stride: int) -> tuple[int, ...]:
    """For each input row of a tile of t outputs: how many (output, tap) pairs of the tile it feeds."""
    return tuple(sum(1 for r in range(k) if iy >= r and (iy - r) % stride == 0 and (iy - r) // stride < t)
                 for iy in range((t - 1) * stride + k))


@cache
def predicated_share(th: int, tw: int, nt: int, R: int, S: int, sh: int, sw: int) -> float:
    """Share of a register tile's (output, tap) pairs whose in-tile pixel body has <= PRED_FMA_MAX FMAs
    (the SASS of 7x7 nt 1 and 4x4 nt 4 tiles has exactly that many predicated FFMAs: 96 and 16)."""
    per_pixel = np.outer(_taps_per_input(th, R, sh), _taps_per_input(tw, S, sw))
    return float(per_pixel[per_pixel * nt <= PRED_FMA_MAX].sum() / per_pixel.sum())


def table(shape: ConvShape, th, tw, tc, threads, nt, wh=1, ww=1) -> dict[str, np.ndarray]:
    """Per config (parallel arrays): block counts, per-block averages and the resource estimate.
    Warp-tiled rows (wh*ww > 1): tiles, inputs and pairs of the block tile, pixels tested and pairs
    per thread of one warp's register tile."""
    th, tw, tc, threads, nt = (np.asarray(a, dtype=np.int64).reshape(-1) for a in (th, tw, tc, threads, nt))
    wh, ww = (np.broadcast_to(np.asarray(a, dtype=np.int64).reshape(-1), th.shape).copy() for a in (wh, ww))
    bh, bw = th * wh, tw * ww                               # the block tile
    rows = {t: axis_counts(shape.P, shape.H, t, shape.stride[0], shape.R, shape.padding[0])
            for t in np.unique(bh).tolist()}
    cols = {t: axis_counts(shape.Q, shape.W, t, shape.stride[1], shape.S, shape.padding[1])
            for t in np.unique(bw).tolist()}
    r = np.array([rows[t] for t in bh.tolist()], dtype=np.float64).reshape(-1, 4)
    c = np.array([cols[t] for t in bw.tolist()], dtype=np.float64).reshape(-1, 4)
    cpb = threads * nt
    tiles_c = -(-shape.C // tc)
    tiles_n = -(-shape.N // cpb)
    tiles_sp = r[:, 0] * c[:, 0]
    ws = wh * ww > 1
    regs, smem, buildable = resources(shape, th, tw, tc, threads, nt, wh, ww)
    npix = ((th - 1) * shape.stride[0] + shape.R) * ((tw - 1) * shape.stride[1] + shape.S)
    return {
        "th": th, "tw": tw, "tc": tc, "threads": threads, "nt": nt, "cpb": cpb, "wh": wh, "ww": ww, "ws": ws,
        "bthreads": threads * wh * ww,
        # (output, tap) pairs per thread and input channel at density 1: one warp's register tile
        "pairs_thr": r[:, 2] * c[:, 2] / tiles_sp / (wh * ww),
        "tiles_h": r[:, 0], "tiles_w": c[:, 0], "tiles_c": tiles_c, "tiles_n": tiles_n,
        "blocks_per_image": tiles_sp * tiles_c * tiles_n,
        "tc_avg": shape.C / tiles_c,
        # stored inputs per block and input channel at density 1: halo included, padding not stored
        "in_sp": r[:, 1] * c[:, 1] / tiles_sp,
        # (output, tap) pairs per block and input channel at density 1, over the whole register tile
        "pairs_sp": r[:, 2] * c[:, 2] / tiles_sp,
        # share of those pairs that land on outputs past P or Q (partial edge tiles)
        "edge_waste": 1.0 - (r[:, 3] * c[:, 3]) / (r[:, 2] * c[:, 2]),
        "regs": regs, "smem": smem, "buildable": buildable, "npix": npix,  # in-tile pixels the mask loop tests
        # a channel split that reduces through a cluster where the GPU has them (GPU.clusters)
        "cluster_fit": cluster_fit(shape, th, tw, tc, threads, nt, wh, ww, smem),
        "pred": np.array([predicated_share(a, b, n, shape.R, shape.S, *shape.stride)
                          for a, b, n in zip(th.tolist(), tw.tolist(), nt.tolist())]),
    }


@lru_cache(maxsize=4096)
def space_table(shape: ConvShape) -> dict[str, np.ndarray]:
    """The table of every config of the space (space.config_space's order)."""
    sp = space_arrays(shape)
    return table(shape, sp["th"], sp["tw"], sp["tc"], sp["threads"], sp["nt"], sp["wh"], sp["ww"])


@lru_cache(maxsize=4096)
def config_table(shape: ConvShape, config: KernelConfig) -> dict[str, np.ndarray]:
    """The table of one config (one row); its split reduces through a cluster only where the config says so. Cached
    as space_table is (read-only): the planner prices the batch-1 row tiles of a shape at every level."""
    tab = table(shape, config.th, config.tw, config.tc, config.threads, config.nt, config.wh, config.ww)
    tab["cluster_fit"] = tab["cluster_fit"] & config.cluster
    return tab
