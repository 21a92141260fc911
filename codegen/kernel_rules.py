"""The sparse convolution kernel's resource rules: how much shared memory its tile, masks and weight
ring take, how many channels it stages at once, its register cap and the in-block channel split's
layout. Pure functions of (shape, config): codegen/emit.py renders with them and codegen/plan/resources.py
estimates with them (over whole arrays of configs), so the planner never imports the emitter.
"""
from __future__ import annotations

import math

from .config import KernelConfig
from .spec import ConvShape

STATIC_SMEM_LIMIT = 40 * 1024  # keep the staged tile under the 48 KB static limit with room to spare
WEIGHT_RING_LIMIT = 20 * 1024  # the per-thread weight ring takes at most this much of STATIC_SMEM_LIMIT
WEIGHT_RING_DEPTH = 4          # channels of weights in flight (cp.async) while one is used; 16 (with a
                               # 24 KB ring) measured slower at both batch 1 and 32 (docs/performance.md)


def weight_ring_depth(shape: ConvShape, cfg: KernelConfig) -> int:
    """WD: channels of weights the kernel keeps in flight, <= WEIGHT_RING_DEPTH and <= tc (tc <= WD:
    all of a block's weights are requested at once, with its input), ring within WEIGHT_RING_LIMIT
    (at least 1: a 7x7 filter for 128 output channels takes 25 KB a slot)."""
    slot = shape.R * shape.S * cfg.threads * cfg.nt * 4
    depth = min(WEIGHT_RING_DEPTH, cfg.tc)
    while depth > 1 and depth * slot > WEIGHT_RING_LIMIT:
        depth -= 1
    return depth


REG_MARGIN = 120  # registers beyond accumulators and one channel's taps: addresses, masks, loop state (80 spilled)


def register_cap(threads: int, blocks: int) -> int:
    """Registers per thread ptxas allows for `blocks` resident blocks: each of the SM's 4 schedulers
    owns a quarter of the 64 K registers and whole warps (seen in ptxas: 9 one-warp blocks give 168)."""
    warps_per_quadrant = -(-(threads // 32) * blocks // 4)
    return min(255, 16384 // (warps_per_quadrant * 32) // 8 * 8)


def min_blocks(shape: ConvShape, cfg: KernelConfig) -> int:
    """Second __launch_bounds__ argument: the most blocks whose register cap still covers what the
    tile needs (accumulators + one channel's taps + REG_MARGIN), so more blocks fit on an SM;
    with 1, ptxas took up to 254 registers for tiles needing ~160."""
    need = cfg.th * cfg.tw * cfg.nt + shape.R * shape.S * cfg.nt + REG_MARGIN
    return most_blocks(cfg.threads, need)


def most_blocks(threads: int, need: int, most: int = 32) -> int:
    """The most blocks of `threads` threads (at least 1, at most `most`) whose register cap still covers
    `need` registers a thread (255 at most)."""
    blocks = 1
    while blocks < most and register_cap(threads, blocks + 1) >= min(need, 255):
        blocks += 1
    return blocks


def tile_smem_bytes(npix, kc, words, ring_bytes):
    """Static shared memory of a classic kernel: its tile (npix x kc floats), masks (kc x words) and weight
    ring. Plain arithmetic, so the cost model applies it to whole arrays of configs."""
    return npix * kc * 4 + kc * words * 4 + ring_bytes


def chunk_channels(shape: ConvShape, cfg: KernelConfig, budget: int = STATIC_SMEM_LIMIT) -> int:
    """Channels staged in shared memory at once (KC): divides tc, <= 32, tile + masks + weight ring
    fit `budget` (STATIC_SMEM_LIMIT)."""
    ih, iw = cfg.in_tile(shape)
    npix = ih * iw
    words = math.ceil(npix / 32)
    ring = weight_ring_depth(shape, cfg) * shape.R * shape.S * cfg.threads * cfg.nt * 4
    for kc in range(min(cfg.tc, 32), 0, -1):
        if cfg.tc % kc == 0 and tile_smem_bytes(npix, kc, words, ring) <= budget:
            return kc
    raise ValueError(f"{cfg.tag()}: in-tile {ih}x{iw} and weight ring too large for shared memory")


# ---------------------------------------------------------------- the channel split's cluster reduction

CLUSTER_MAX = 8      # blocks of one thread-block cluster: the portable limit (sm_90+)
CLUSTER_ROUNDS = 4   # the partial tile passes through the staging's shared memory in at most this many rounds


def cluster_fits(tiles_c, pixels, nb, stage_floats):
    """Whether a channel split reduces through a thread-block cluster (its blocks sum their partial tiles
    through distributed shared memory, the last step fused with the epilogue; no memset, no atomics, no
    epilogue launch): 1 < tiles_c <= CLUSTER_MAX, and the block's partial tile (pixels x nb floats) passes
    through the shared memory its staging already takes (stage_floats), whole pixels at a time, in at most
    CLUSTER_ROUNDS rounds, so resources and occupancy stay as they are. Plain arithmetic over scalars or
    arrays. Planned only with `--clusters` (GPU.clusters) on a GPU that has them (GPU.has_clusters)."""
    per = stage_floats // nb   # pixels a round
    return (tiles_c > 1) & (tiles_c <= CLUSTER_MAX) & (per >= 1) & (pixels <= per * CLUSTER_ROUNDS)


def cluster_stage_floats(shape: ConvShape, cfg: KernelConfig) -> int:
    """The floats of shared memory a config's partial tile may reuse: the classic kernel's weight ring and
    input tile (one array when it clusters), the warp-tiled kernel's two stages."""
    if cfg.warp_tiled:
        return ws_params(shape, cfg)["SMEM"] // 4
    ih, iw = cfg.in_tile(shape)
    return ih * iw * chunk_channels(shape, cfg) + weight_ring_depth(shape, cfg) * shape.R * shape.S * cfg.threads * cfg.nt


def cluster_split(shape: ConvShape, cfg: KernelConfig) -> bool:
    """cluster_fits for one config of either family."""
    return bool(cluster_fits(math.ceil(shape.C / cfg.tc), cfg.th * cfg.wh * cfg.tw * cfg.ww, cfg.threads * cfg.nt,
                             cluster_stage_floats(shape, cfg)))


# ---------------------------------------------------------------- warp-tiled blocks (sparse_conv_ws.cu.j2)

# block shapes the planner considers: 2x2 / 2x4 (the fastest measured on H100), and the 7-row / 7-column ones
# that tile 7, 14 and 28 exactly (2x7 warp tiles in 7x2 blocks ran 0.96x the 8x8 blocks' time on 14x14 and 28x28)
WS_WARPS = ((1, 2), (2, 1), (2, 2), (2, 4), (4, 2), (4, 1), (1, 4), (7, 1), (1, 7), (7, 2), (2, 7))
WS_MAX_WORDS = 4            # a warp's in-tile pixels: at most 4 ballot words (128 pixels)
WS_REG_MARGIN = 24          # registers beyond accumulators + taps (ptxas: 125 for 4x4 nt 4 under a 128 cap)
WS_EPILOGUE_NT8 = 8         # + for nt 8: two output vectors in the fused epilogue (a 2x4 tile spilled under 96)
WS_REG_MIN = 80             # 4x4 nt 1 tiles spilled under a 64 cap
SM_SMEM_BYTES = 228 * 1024  # an H100 SM's shared memory; each block takes 1 KB more
WS_SMEM_LIMIT = 200 * 1024  # dynamic shared memory, of the H100's 227 KB per block


def ws_eligible(shape: ConvShape, cfg: KernelConfig) -> bool:
    """What the warp-tiled template supports: 32-thread warps, nt 1/2/4/8, 16-byte weight rows (N % 4 == 0,
    N % nt == 0), a warp window of <= WS_MAX_WORDS ballot words, and a block of <= 1024 threads."""
    ih, iw = cfg.in_tile(shape)
    return (cfg.threads == 32 and cfg.nt in (1, 2, 4, 8) and shape.N % 4 == 0 and shape.N % cfg.nt == 0
            and math.ceil(ih * iw / 32) <= WS_MAX_WORDS and cfg.block_threads() <= 1024
            and cfg.block_threads() % (32 * cfg.nt // 4 or 1) == 0)


def ws_params(shape: ConvShape, cfg: KernelConfig, kc: int | None = None, minb: int | None = None,
              extra_regs: int = 0) -> dict:
    """The warp-tiled kernel's resources: MINB (the most blocks whose register cap covers accumulators + taps
    + WS_REG_MARGIN + extra_regs), KC (the most channels a chunk, dividing tc, whose two stages let MINB blocks
    share an SM), the input tile's pixel stride XSTR and the floats of one stage's input tile and weights;
    SMEM = both stages, dynamic shared memory. 0 for KC where no chunk fits; REGS_OK false where even one block
    an SM cannot give the tile its registers (the emitter refuses, the planner leaves it out)."""
    rs = shape.R * shape.S
    nb = cfg.threads * cfg.nt
    bih = (cfg.th * cfg.wh - 1) * shape.stride[0] + shape.R
    biw = (cfg.tw * cfg.ww - 1) * shape.stride[1] + shape.S
    nthr = cfg.block_threads()
    ih, iw = cfg.in_tile(shape)
    words = math.ceil(ih * iw / 32)
    # + 16 a ballot word past two: 8x8 nt 1 (4 words) spilled 8 bytes under 128 registers
    need = max(cfg.th * cfg.tw * cfg.nt + rs * cfg.nt + WS_REG_MARGIN + 16 * max(0, words - 2) + extra_regs
               + (WS_EPILOGUE_NT8 if cfg.nt == 8 else 0), WS_REG_MIN)
    if minb is None:
        minb = most_blocks(nthr, need, 16)

    def stage(k):
        xstr = k if k % 8 == 4 or k % 4 else k + 4  # pixel stride: the ballots' loads at most 4-way bank conflicts
        return xstr, -(-bih * biw * xstr // 4) * 4, k * rs * nb

    if kc is None:
        budget = min(WS_SMEM_LIMIT, SM_SMEM_BYTES // minb - 1024)
        kc = next((k for k in (16, 8, 4, 2, 1) if cfg.tc % k == 0 and 8 * sum(stage(k)[1:]) <= budget), 0)
    xstr, xs, ws = stage(max(kc, 1))
    cap = register_cap(nthr, minb)
    return {"MINB": minb, "KC": kc, "XSTR": xstr, "XS_FLOATS": xs, "WS_FLOATS": ws, "SMEM": 8 * (xs + ws),
            "BIH": bih, "BIW": biw, "NTHR": nthr, "REG_CAP": cap,
            # a block too large for the registers its tile needs even alone on the SM (8x8 nt 1 in 14 warps spilled)
            "REGS_OK": cap >= min(need, 255)}
