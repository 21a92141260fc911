"""The configuration space per kernel family, and which families compete for a model and batch.

Classic kernel (sparse_conv.cu.j2): a register tile th x tw per block, tc input channels, threads x nt
output channels. Warp-tiled kernel (sparse_conv_ws.cu.j2): a block of wh x ww warps of 32 threads, each
with its own th x tw register tile. Both spaces are short functions of the shape, not lists; what the
emitter cannot build is left out here or marked unbuildable by the resource estimate (resources.py).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable

import numpy as np

from .. import kernel_rules as rules
from ..config import KernelConfig
from ..spec import ConvShape

# ---- classic kernel ---------------------------------------------------------------------------
TILE_MAX = 16              # output rows / cols per block
EDGE_WASTE_MAX = 0.15      # a tile size may pad P (or Q) by at most 15 %
ACC_MAX = 64               # th*tw*nt fp32 accumulators per thread: keeps ptxas far from spilling
THREADS = tuple(range(32, 257, 32))
NT = (1, 2, 4)
NT_WIDE = 8                # 1x1 convs also try 8 output channels a thread (two float4 a tap and pixel): their
                           # pixel bodies (8 FMAs) stay branches where ptxas predicates 4-FMA ones, so zeros
                           # cost no FMAs (docs/performance.md); 3x3 ones measured slower with it
TC_MAX = 512
N_WASTE_MAX = 0.125        # threads*nt may pad N by at most 12.5 %

# ---- warp-tiled kernel (KernelConfig.wh * ww > 1): "snn" model only ------------------------------
# a warp's register tile; 4x7 / 7x4 left out: mispredicted both ways (nt 1: 18 % slower than predicted, nt 4:
# 16 % faster, spread 15-23 %), where 2x7 / 7x2 are within 10 %
WS_TILES = ((4, 4), (4, 8), (8, 4), (2, 4), (4, 2), (2, 8), (8, 8), (2, 7), (7, 2))
# 1x1 convs: one-row warp tiles, measured 0.85-0.93x the classic kernel's best; planned with tc <= WS_TC_MAX_1X1
WS_TILES_1X1 = ((1, 7), (1, 14), (2, 7), (2, 4), (4, 4), (1, 8), (2, 8))
WS_TC_MAX_1X1 = 128        # 1x1: picks with tc up to 512 took 1.15-1.84x the best measured; up to 128, 1.04x
WS_ACC_MAX = 128           # th*tw*nt: 4x4 nt 8 (128) ran within 2 % of the best on 256->256 @14
WS_MIN_BATCH = 1           # at batch 1 the plan's warp-tiled picks took 1.08x the best measured, the classic-only
                           # picks 1.23x (predicted before measuring, uniform inputs, 14 layers x 4 levels)

# one-row warp tiles for stride-1 3x3 convs at batch 1, outside WS_TILES: 1 x 7 pixels a warp, 7 x 2 (or 7 x 1)
# warps, 8 channels a block, 2 or 4 output channels a thread. On the H200 they took 10.3 against the plan's 11.0 us
# on ResNet-152's 3x3 256 @14 alone and 21.9 against 24.6 us a layer-3 block with its pair, 9.9-10.2 against 11.3
# at 28x28, 11.1 against 11.3 at 7x7, 10.4-12.2 against 10.2 at 56x56 (docs/results/fusion/h200/rows/). The space
# the model ranks does not hold them (its 3x3 warp tiles are 2 x 4 and larger), so the build offers them as
# alternatives that `snn-run calibrate` measures against its pick (planner.plan_shape); it chose them at 28x28,
# 14x14 and 7x7
ROW_TILES_B1 = ((1, 7, 8, 32, 2, 7, 2), (1, 7, 8, 32, 4, 7, 2), (1, 7, 8, 32, 2, 7, 1))

CONFIG_KEYS = ("th", "tw", "tc", "threads", "nt", "wh", "ww")


def pads_within(n: int, t: int, share: float) -> bool:
    """Whether tiles (or channel groups) of t cover n with at most `share` of n left over."""
    return -(-n // t) * t <= (1 + share) * n


def tile_candidates(n_out: int) -> list[int]:
    """Tile sizes along one output axis that pad it by at most EDGE_WASTE_MAX."""
    return [t for t in range(1, min(n_out, TILE_MAX) + 1) if pads_within(n_out, t, EDGE_WASTE_MAX)]


def tc_candidates(C: int) -> list[int]:
    """Input channels per block: powers of two from 4 (a channel tile of any size costs nothing extra
    at the edge: blocks loop over the nonzeros they hold), plus all of C when it is small."""
    out = {2 ** k for k in range(2, 10) if 2 ** k < C and 2 ** k <= TC_MAX}
    if C <= TC_MAX:
        out.add(C)
    return sorted(out)


def channel_candidates(N: int, wide: bool = False) -> list[tuple[int, int]]:
    """(threads, nt) pairs: threads a multiple of 32 in [32, 256], threads*nt padding N by <= 12.5 %;
    wide: nt NT_WIDE too (only N a multiple of it: a thread's channels are all in range or all out)."""
    nts = NT + ((NT_WIDE,) if wide and N % NT_WIDE == 0 else ())
    return [(t, nt) for t in THREADS for nt in nts if pads_within(N, t * nt, N_WASTE_MAX)]


def classic_space(shape: ConvShape) -> dict[str, np.ndarray]:
    """The classic kernel's configs as parallel int64 arrays (CONFIG_KEYS; wh = ww = 1)."""
    ths, tws, tcs = tile_candidates(shape.P), tile_candidates(shape.Q), tc_candidates(shape.C)
    chans = channel_candidates(shape.N, wide=shape.R * shape.S == 1)
    if not chans:  # N so small that even 32 threads pad it by more than 12.5 %
        chans = [(32, 1)]
    th, tw, tc, ch = np.meshgrid(ths, tws, tcs, np.arange(len(chans)), indexing="ij")
    th, tw, tc, ch = (a.ravel().astype(np.int64) for a in (th, tw, tc, ch))
    threads = np.array([c[0] for c in chans], dtype=np.int64)[ch]
    nt = np.array([c[1] for c in chans], dtype=np.int64)[ch]
    keep = th * tw * nt <= ACC_MAX
    one = np.ones(int(keep.sum()), dtype=np.int64)
    return {"th": th[keep], "tw": tw[keep], "tc": tc[keep], "threads": threads[keep], "nt": nt[keep],
            "wh": one, "ww": one}


def ws_space(shape: ConvShape, one_by_one: bool = False) -> list[KernelConfig]:
    """Warp-tiled configs: stride-1 convs with C and N multiples of 4; warp tiles WS_TILES (1x1: WS_TILES_1X1,
    channel tiles up to WS_TC_MAX_1X1 unless one_by_one=True, for measurements: tools/fit_costmodel.py),
    nt 1/2/4/8 (32 threads x nt padding N by <= 12.5 %, <= WS_ACC_MAX accumulators), block shapes
    kernel_rules.WS_WARPS whose block tile pads P and Q by <= EDGE_WASTE_MAX, channel tiles of
    tc_candidates >= 8 that a chunk divides."""
    one = shape.R * shape.S == 1
    if tuple(shape.stride) != (1, 1) or shape.N % 4 or shape.C % 4:
        return []
    out = []
    for th, tw in (WS_TILES_1X1 if one else WS_TILES):
        for nt in (1, 2, 4, 8):
            for wh, ww in rules.WS_WARPS:
                if not ws_tile_fits(shape, th, tw, nt, wh, ww):
                    continue
                for tc in tc_candidates(shape.C):
                    cfg = KernelConfig(th, tw, tc, 32, nt, wh, ww)
                    if tc >= 8 and (tc <= WS_TC_MAX_1X1 or not one or one_by_one) and ws_builds(shape, cfg):
                        out.append(cfg)
    return out


def ws_tile_fits(shape: ConvShape, th: int, tw: int, nt: int, wh: int, ww: int) -> bool:
    """Whether a warp tile th x tw of nt channels a thread in wh x ww warps fits the shape: within the output and
    WS_ACC_MAX accumulators, 32 threads x nt padding N by <= N_WASTE_MAX, the block tile padding P and Q by <=
    EDGE_WASTE_MAX."""
    if th > shape.P or tw > shape.Q or th * tw * nt > WS_ACC_MAX or shape.N % nt:
        return False
    return pads_within(shape.N, 32 * nt, N_WASTE_MAX) and all(
        pads_within(n, t, EDGE_WASTE_MAX) for n, t in ((shape.P, th * wh), (shape.Q, tw * ww)))


def ws_builds(shape: ConvShape, cfg: KernelConfig) -> bool:
    """Whether the warp-tiled kernel takes the config (kernel_rules.ws_eligible) with a chunk whose two stages and
    registers fit (ws_params)."""
    if not rules.ws_eligible(shape, cfg):
        return False
    r = rules.ws_params(shape, cfg)
    return r["KC"] != 0 and bool(r["REGS_OK"])


def row_tiles(shape: ConvShape, batch: int) -> list[KernelConfig]:
    """The ROW_TILES_B1 configs that fit a stride-1 3x3 conv at batch 1 as ws_space's do (ws_tile_fits, ws_builds),
    with a channel tile smaller than C; none elsewhere."""
    if batch != 1 or (shape.R, shape.S) != (3, 3) or tuple(shape.stride) != (1, 1) or shape.N % 4 or shape.C % 4:
        return []
    out = []
    for th, tw, tc, threads, nt, wh, ww in ROW_TILES_B1:
        cfg = KernelConfig(th, tw, tc, threads, nt, wh, ww)
        if tc < shape.C and ws_tile_fits(shape, th, tw, nt, wh, ww) and ws_builds(shape, cfg):
            out.append(cfg)
    return out


@lru_cache(maxsize=4096)
def space_arrays(shape: ConvShape) -> dict[str, np.ndarray]:
    """Every config of config_space(shape), as parallel int64 arrays th, tw, tc, threads, nt, wh, ww:
    the classic kernel's configs, then the warp-tiled ones."""
    sp = classic_space(shape)
    ws = ws_space(shape)
    if ws:
        extra = {k: np.array([getattr(c, k) for c in ws], dtype=np.int64) for k in sp}
        sp = {k: np.concatenate([sp[k], extra[k]]) for k in sp}
    return sp


def config_space(shape: ConvShape) -> list[KernelConfig]:
    """All configurations considered for `shape` (before any GPU limit), in a fixed order."""
    sp = space_arrays(shape)
    return configs(sp, range(len(sp["th"])))


def configs(tab: dict[str, np.ndarray], idx: Iterable[int], clusters: bool = False) -> list[KernelConfig]:
    """The KernelConfigs of rows idx of a space (or table: it has the same keys); with `clusters` (the GPU has
    them) a table's channel splits that fit one (its "cluster_fit") reduce through it."""
    return [KernelConfig(*(int(tab[k][i]) for k in CONFIG_KEYS),
                         cluster=bool(clusters and "cluster_fit" in tab and tab["cluster_fit"][i])) for i in idx]


def index_of(tab: dict[str, np.ndarray], config: KernelConfig) -> np.ndarray:
    """The space-table indices of `config` (none when it is not in the space)."""
    return np.flatnonzero(np.logical_and.reduce([tab[k] == getattr(config, k) for k in CONFIG_KEYS]))


def ws_allowed(model: str, batch: int) -> bool:
    """Warp-tiled configs compete where they were measured and modelled: "snn", batch >= WS_MIN_BATCH."""
    return model == "snn" and batch >= WS_MIN_BATCH
