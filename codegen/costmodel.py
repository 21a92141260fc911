"""Tile-size selection: the configuration space and the three-stage cost model (paper Sec. 3.5).

For one conv shape, GPU, batch and sparsity level:

  enumerate   config_space(shape): register tile th x tw, channel tile tc, threads, nt (a short
              function, not a list); drop what cannot launch (registers, shared memory per block)
  stage 1     keep occupancy >= 50 % (occupancy.py, the CUDA occupancy calculator's rules)
  stage 2     keep the third with the least data movement (Table 2, in bytes, times the batch)
  stage 3     predict the time (waves, Eqs. 3-9) and take the minimum

Three models share stages 1-2 and differ in what they count:

  "paper"  Table 2 and Eqs. 3-9 as printed, with the known slips fixed (Eq. 4 the right way up,
           R*S in Eq. 6, Table 2 / Eq. 3 times the batch) and N in Eq. 6 read as the block's own
           output channels (our blocks split N; the paper's do not).
  "snn"    (default) the same waves, priced as the fused kernel spends them: a block walks its tc
           channels serially, each costing the longer of its latency (fixed + per in-tile pixel
           tested + per FMA) and its share of the SM's issue slots when blocks share the SM; plus
           the write-back, memory time per wave (DRAM and L2 traffic) as a floor, the tail wave on
           its own, the memset and a fixed cost. Its constants (SNN_FIT) are fitted to H100
           measurements by tools/fit_costmodel.py.
  "pipes"  the "snn" stage 3 before the fit: per-block work on the FP32 and shared-memory pipes
           (kept: its picks ran ResNet-152 faster at batch 8, docs/costmodel.md).

docs/costmodel.md describes them and every departure from the paper. Levels are *sparsity*
(fraction of zeros) s; the paper's rho is the density 1 - s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any, Iterable, Sequence

import numpy as np

from . import kernel_rules as rules
from .config import KernelConfig
from .errors import UserError
from .gpu import GPU
from .occupancy import block_limits
from .spec import ConvLayer, ConvShape, Network

MODELS = ("snn", "pipes", "paper")
DEFAULT_LEVELS = "0.4:0.9:0.05"

# ---- configuration space ----------------------------------------------------------------------
TILE_MAX = 16              # output rows / cols per block
EDGE_WASTE_MAX = 0.15      # a tile size may pad P (or Q) by at most 15 %
ACC_MAX = 64               # th*tw*nt fp32 accumulators per thread: keeps ptxas far from spilling
THREADS = tuple(range(32, 257, 32))
NT = (1, 2, 4)
NT_WIDE = 8                # 1x1 convs also try 8 output channels a thread (two float4 a tap and pixel): their
                           # pixel bodies (8 FMAs) stay branches where ptxas predicates 4-FMA ones, so zeros
                           # cost no FMAs (docs/perf-notes.md, v8); 3x3 ones measured slower with it
TC_MAX = 512
N_WASTE_MAX = 0.125        # threads*nt may pad N by at most 12.5 %

# ---- resource estimate (fitted to ptxas: docs/costmodel.md, "Resource estimate") ---------------
REG_BASE = 26              # registers beyond accumulators and one channel's taps: addresses, masks,
                           # loop state (median of ptxas - th*tw*nt - R*S*nt over 280 sm_90 kernels)
SMEM_ALIGN = 16            # ptxas places the 16-byte aligned weight ring after the tile and masks
BYTES_PER_NNZ = 8          # a stored input of the COO* format: fp32 value + packed (h, w) position
                           # (the "snn" model's traffic terms; the fused kernel stages dense tiles)

# ---- stage thresholds ---------------------------------------------------------------------------
OCCUPANCY_MIN = 0.5
OCCUPANCY_MIN_BATCHED = 0.25  # "snn" at batch > 1: the batch brings the parallelism, and its fastest kernels
                              # (more output channels per thread, bigger tiles) sit at 30-40 % occupancy
                              # (docs/costmodel.md, "Batch > 1: held-out measurements")
STAGE2_KEEP = 1 / 3          # the paper's stage 2
STAGE2_KEEP_SNN = 1 / 2      # "snn": its third cut the 1x1 nt 8 configs (more spatial tiles, more weight
                             # re-reads) that measured fastest at batch 8/32 (docs/costmodel.md, "nt 8")
REUSE_TOLERANCE = 0.03     # plan_shape keeps a lower level's config if within 3 % of the fastest
CANDIDATE_WINDOW = 1.3     # alternatives for `calibrate` to measure: predicted within 1.3x of the pick (the model's
                           # bias between families reached +0.28 in log time, run25-b1 / fitws-s7)

# ---- warp-tiled configs (KernelConfig.wh * ww > 1, sparse_conv_ws.cu.j2): "snn" model only
# a warp's register tile; 4x7 / 7x4 left out: mispredicted both ways (nt 1: 18 % slower than predicted, nt 4:
# 16 % faster, spread 15-23 %, run17-model + run19-exact), where 2x7 / 7x2 are within 10 %
WS_TILES = ((4, 4), (4, 8), (8, 4), (2, 4), (4, 2), (2, 8), (8, 8), (2, 7), (7, 2))
# 1x1 convs: one-row warp tiles, 0.85-0.93x the classic kernel's best (run21-1x1); planned with tc <= WS_TC_MAX_1X1
WS_TILES_1X1 = ((1, 7), (1, 14), (2, 7), (2, 4), (4, 4), (1, 8), (2, 8))
WS_TC_MAX_1X1 = 128        # 1x1: tc 512 picks took 1.15-1.84x the best (run21); up to 128 the picks took 1.04x (run22)
WS_ACC_MAX = 128           # th*tw*nt: 4x4 nt 8 (128) ran within 2 % of the best on 256->256 @14 (run16-ws)
WS_MIN_BATCH = 1           # 8 until run25-b1: at batch 1 the plan's warp-tiled picks took 1.08x the best measured, the
                           # classic picks 1.23x (pre-registered, uniform inputs, 14 layers x 4 levels)
WS_FILL_INS = 2            # warp instructions per 16-byte weight vector a warp-tiled block copies (LDGSTS + add, SASS)

# ---- "pipes" model constants: the stage 3 used before the fit (kept selectable: on the H100 its picks ran
# ResNet-152 end to end faster than the fitted model's, docs/costmodel.md "Two stage-3 models") ----------
K_NNZ_ALU = 6              # integer/branch instructions per thread per stored nonzero
K_OUT_ALU = 2              # per accumulator written back
SMEM_LANES_PER_SM = 32     # shared-memory pipe: 128 B/clk/SM on Volta..Hopper
WARPS_FOR_FULL_ISSUE = 16  # fewer resident warps per SM than this cannot hide latency
LAUNCH_US = 1.5            # per kernel of the sparse path
SPARSE_PATH_KERNELS = 3

# ---- "snn" model constants (see docs/costmodel.md, "Stage 3" and "Fitted to H100 measurements") -----
ATOMIC_L2_BYTES = 8        # an fp32 atomic add is a read-modify-write in L2
ISSUE_PER_SM = 4           # warp instructions an SM issues per clock (4 schedulers, Volta..Hopper)
# Fitted by tools/fit_costmodel.py (least squares of log time over the H100 measurements in docs/results);
# cycles are per channel a block walks unless said otherwise, so they scale with the GPU's clock.
SNN_FIT = {
    "fixed_us": 4.788,     # launch + first fill + write-back of a kernel on cold L2, once per layer
    "memset_us": 4.25,     # the output memset when tc < C (several blocks add into one output), + its bytes
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

@dataclass(frozen=True)
class Choice:
    config: KernelConfig
    predicted_us: float
    # the next configs `snn-run calibrate` measures against this one on real activations (plan_shape's
    # `candidates`); empty unless asked for
    alternatives: tuple = ()

    def candidates(self) -> list[tuple[KernelConfig, float]]:
        """(config, predicted us): the pick first, then its alternatives."""
        return [(self.config, self.predicted_us)] + [(a.config, a.predicted_us) for a in self.alternatives]


@dataclass(frozen=True)
class LayerPlan:
    layer: ConvLayer
    choices: dict = field(hash=False)  # level (float, 2 decimals) -> Choice; shared by layers of one shape

    def to_dict(self, batch: int) -> dict[str, Any]:
        def one(ch):
            return {"config": ch.config.to_dict(), "tag": ch.config.tag(),
                    "kernel": ch.config.name(self.layer.shape, batch), "predicted_us": round(ch.predicted_us, 4)}
        return {"index": self.layer.index, "name": self.layer.name, "shape": shape_dict(self.layer.shape),
                "levels": {f"{lv:.2f}": one(ch) | ({"alternatives": [one(a) for a in ch.alternatives]}
                                                   if ch.alternatives else {})
                           for lv, ch in self.choices.items()}}


@dataclass(frozen=True)
class Plan:
    network: str
    gpu: GPU
    batch: int
    levels: tuple
    model: str
    layers: tuple  # of LayerPlan, in network order

    def to_dict(self) -> dict[str, Any]:
        return {"network": self.network, "gpu": self.gpu.name, "arch": self.gpu.arch, "batch": self.batch,
                "model": self.model, "levels": list(self.levels),
                "distinct_shapes": len({lp.layer.shape for lp in self.layers}),
                "total_predicted_us": {f"{lv:.2f}": round(sum(lp.choices[lv].predicted_us for lp in self.layers), 3)
                                       for lv in self.levels},
                "layers": [lp.to_dict(self.batch) for lp in self.layers]}


def shape_dict(s: ConvShape) -> dict[str, Any]:
    return {"C": s.C, "N": s.N, "H": s.H, "W": s.W, "R": s.R, "S": s.S, "stride": list(s.stride),
            "padding": list(s.padding), "P": s.P, "Q": s.Q, "tag": s.tag()}


# =================================================================================================
# Levels

def parse_levels(text: str | Sequence[float]) -> tuple[float, ...]:
    """'0.4:0.9:0.05' (start:stop:step, stop included), '0.5,0.7' or '0.6' -> sparsity levels as
    floats rounded to 2 decimals, each in [0, 1)."""
    if not isinstance(text, str):
        levels = [round(float(x), 2) for x in text]
    else:
        src = text.strip()
        try:
            if ":" in src:
                parts = [float(p) for p in src.split(":")]
                if len(parts) != 3:
                    raise ValueError
                start, stop, step = parts
                if step <= 0 or stop < start:
                    raise UserError(f"--levels '{text}': need start <= stop and step > 0 (start:stop:step)")
                n = int(math.floor((stop - start) / step + 1e-9)) + 1
                levels = [round(start + i * step, 2) for i in range(n)]
            else:
                levels = [round(float(p), 2) for p in src.split(",")]
        except ValueError:
            raise UserError(f"--levels '{text}': expected start:stop:step like 0.4:0.9:0.05, or a list like 0.5,0.7") from None
    if not levels:
        raise UserError(f"--levels '{text}': no levels")
    for lv in levels:
        if not 0.0 <= lv < 1.0:
            raise UserError(f"--levels '{text}': sparsity level {lv} is outside [0, 1)")
    return tuple(sorted(set(levels)))


# =================================================================================================
# Configuration space and resource estimate

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


def _classic_space(shape: ConvShape) -> dict[str, np.ndarray]:
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
        if th > shape.P or tw > shape.Q:
            continue
        for nt in (1, 2, 4, 8):
            nb = 32 * nt
            if th * tw * nt > WS_ACC_MAX or shape.N % nt or not pads_within(shape.N, nb, N_WASTE_MAX):
                continue
            for wh, ww in rules.WS_WARPS:
                if not all(pads_within(n, t, EDGE_WASTE_MAX) for n, t in ((shape.P, th * wh), (shape.Q, tw * ww))):
                    continue
                for tc in tc_candidates(shape.C):
                    cfg = KernelConfig(th, tw, tc, 32, nt, wh, ww)
                    if tc >= 8 and (tc <= WS_TC_MAX_1X1 or not one or one_by_one) and rules.ws_eligible(shape, cfg):
                        r = rules.ws_params(shape, cfg)
                        if r["KC"] == 0 or not r["REGS_OK"]:
                            continue
                        out.append(cfg)
    return out


@lru_cache(maxsize=4096)
def _space(shape: ConvShape) -> dict[str, np.ndarray]:
    """Every config of config_space(shape), as parallel int64 arrays th, tw, tc, threads, nt, wh, ww:
    the classic kernel's configs, then the warp-tiled ones."""
    sp = _classic_space(shape)
    ws = ws_space(shape)
    if ws:
        extra = {k: np.array([getattr(c, k) for c in ws], dtype=np.int64) for k in sp}
        sp = {k: np.concatenate([sp[k], extra[k]]) for k in sp}
    return sp


def config_space(shape: ConvShape) -> list[KernelConfig]:
    """All configurations considered for `shape` (before any GPU limit), in a fixed order."""
    sp = _space(shape)
    return _configs(sp, range(len(sp["th"])))


# The kernel's resource rules (kernel_rules.weight_ring_depth, min_blocks, register_cap, chunk_channels)
# over whole arrays of configs; tests/test_costmodel.py checks they agree with the scalar functions.

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


def _kernel_params(shape: ConvShape, th, tw, tc, threads, nt) -> dict[str, np.ndarray]:
    """NPIX, NWORDS, WD, KC (0: not buildable), MINB and the register cap of the emitted kernel."""
    npix = ((th - 1) * shape.stride[0] + shape.R) * ((tw - 1) * shape.stride[1] + shape.S)
    words = -(-npix // 32)
    wd = _ring_depth(shape.R, shape.S, tc, threads, nt)
    ring = wd * shape.R * shape.S * threads * nt * 4
    minb = _min_blocks(th * tw * nt + shape.R * shape.S * nt + rules.REG_MARGIN, threads)
    return {"npix": npix, "words": words, "wd": wd, "ring": ring, "kc": _chunk(npix, words, ring, tc),
            "minb": minb, "reg_cap": _register_cap(threads, minb)}


def _resources(shape: ConvShape, th, tw, tc, threads, nt):
    """(registers, static smem, buildable) of the emitted kernel, as arrays."""
    k = _kernel_params(shape, th, tw, tc, threads, nt)
    regs = np.minimum(th * tw * nt + shape.R * shape.S * nt + REG_BASE, k["reg_cap"])
    tile = k["npix"] * k["kc"] * 4 + k["kc"] * k["words"] * 4            # xs[NPIX*KC] + masks[KC*NWORDS]
    smem = -(-tile // SMEM_ALIGN) * SMEM_ALIGN + k["ring"]               # + wring[WD*RS*NT*THREADS]
    return regs, smem, k["kc"] > 0


def _ws_resources(shape: ConvShape, th, tw, tc, threads, nt, wh, ww):
    """(registers, dynamic shared bytes, buildable) of warp-tiled configs (kernel_rules.ws_params), per row."""
    regs, smem, ok = [], [], []
    for row in zip(th.tolist(), tw.tolist(), tc.tolist(), threads.tolist(), nt.tolist(), wh.tolist(), ww.tolist()):
        cfg = KernelConfig(*row)
        r = rules.ws_params(shape, cfg)
        regs.append(min(cfg.th * cfg.tw * cfg.nt + shape.R * shape.S * cfg.nt + REG_BASE, r["REG_CAP"]))
        smem.append(r["SMEM"])
        ok.append(r["KC"] > 0 and cfg.tc % r["KC"] == 0 and r["REGS_OK"] and rules.ws_eligible(shape, cfg))
    return np.array(regs, dtype=np.int64), np.array(smem, dtype=np.int64), np.array(ok, dtype=bool)


def estimate_resources(shape: ConvShape, config: KernelConfig) -> tuple[int, int]:
    """(registers per thread, shared bytes per block) of the kernel emit.render_sparse writes for `config`:
    regs = min(th*tw*nt + R*S*nt + REG_BASE, the __launch_bounds__ cap); smem = the KC-channel input tile
    (halo included) + its masks, rounded up to 16 B, + the WD-deep weight ring (static), or for a
    warp-tiled config both stages of input tile and weights (dynamic). Raises ValueError where the emitter
    cannot build the config (as kernel_rules.chunk_channels does)."""
    tab = _config_table(shape, config)
    if not tab["buildable"][0]:
        raise ValueError(f"{config.tag()}: the emitter cannot build it for {shape.tag()} (tile and ring over "
                         f"{rules.STATIC_SMEM_LIMIT} B of shared memory)")
    return int(tab["regs"][0]), int(tab["smem"][0])


# =================================================================================================
# Geometry: what a block really touches, edges included

def _axis(n_out: int, n_in: int, t: int, stride: int, k: int, pad: int) -> tuple[int, int, int, int]:
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


PRED_FMA_MAX = 4  # ptxas if-converts a pixel body of <= 4 FMAs: it issues for zero inputs too (perf-notes, v8)


@cache
def _taps_per_input(t: int, k: int, stride: int) -> tuple[int, ...]:
    """For each input row of a tile of t outputs: how many (output, tap) pairs of the tile it feeds."""
    return tuple(sum(1 for r in range(k) if iy >= r and (iy - r) % stride == 0 and (iy - r) // stride < t)
                 for iy in range((t - 1) * stride + k))


@cache
def _predicated_share(th: int, tw: int, nt: int, R: int, S: int, sh: int, sw: int) -> float:
    """Share of a register tile's (output, tap) pairs whose in-tile pixel body has <= PRED_FMA_MAX FMAs
    (the SASS of 7x7 nt 1 and 4x4 nt 4 tiles has exactly that many predicated FFMAs: 96 and 16)."""
    per_pixel = np.outer(_taps_per_input(th, R, sh), _taps_per_input(tw, S, sw))
    return float(per_pixel[per_pixel * nt <= PRED_FMA_MAX].sum() / per_pixel.sum())


def _table(shape: ConvShape, th, tw, tc, threads, nt, wh=1, ww=1) -> dict[str, np.ndarray]:
    """Per config (parallel arrays): block counts, per-block averages and the resource estimate;
    nothing here depends on the GPU, the batch or the level. Warp-tiled rows (wh*ww > 1): tiles, inputs
    and pairs of the block tile, pixels tested and pairs per thread of one warp's register tile."""
    th, tw, tc, threads, nt = (np.asarray(a, dtype=np.int64).reshape(-1) for a in (th, tw, tc, threads, nt))
    wh, ww = (np.broadcast_to(np.asarray(a, dtype=np.int64).reshape(-1), th.shape).copy() for a in (wh, ww))
    bh, bw = th * wh, tw * ww                               # the block tile
    rows = {t: _axis(shape.P, shape.H, t, shape.stride[0], shape.R, shape.padding[0]) for t in np.unique(bh).tolist()}
    cols = {t: _axis(shape.Q, shape.W, t, shape.stride[1], shape.S, shape.padding[1]) for t in np.unique(bw).tolist()}
    r = np.array([rows[t] for t in bh.tolist()], dtype=np.float64).reshape(-1, 4)
    c = np.array([cols[t] for t in bw.tolist()], dtype=np.float64).reshape(-1, 4)
    cpb = threads * nt
    tiles_c = -(-shape.C // tc)
    tiles_n = -(-shape.N // cpb)
    tiles_sp = r[:, 0] * c[:, 0]
    ws = wh * ww > 1
    regs, smem, buildable = _resources(shape, th, tw, tc, threads, nt)
    if ws.any():
        regs, smem, buildable = regs.copy(), smem.copy(), buildable.copy()
        regs[ws], smem[ws], buildable[ws] = _ws_resources(shape, *(a[ws] for a in (th, tw, tc, threads, nt, wh, ww)))
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
        "pred": np.array([_predicated_share(a, b, n, shape.R, shape.S, *shape.stride)
                          for a, b, n in zip(th.tolist(), tw.tolist(), nt.tolist())]),
    }


@lru_cache(maxsize=4096)
def _space_table(shape: ConvShape) -> dict[str, np.ndarray]:
    sp = _space(shape)
    return _table(shape, sp["th"], sp["tw"], sp["tc"], sp["threads"], sp["nt"], sp["wh"], sp["ww"])


def _config_table(shape: ConvShape, config: KernelConfig) -> dict[str, np.ndarray]:
    return _table(shape, config.th, config.tw, config.tc, config.threads, config.nt, config.wh, config.ww)


_CONFIG_KEYS = ("th", "tw", "tc", "threads", "nt", "wh", "ww")


def _configs(tab: dict[str, np.ndarray], idx: Iterable[int]) -> list[KernelConfig]:
    return [KernelConfig(*(int(tab[k][i]) for k in _CONFIG_KEYS)) for i in idx]


def _index_of(tab: dict[str, np.ndarray], config: KernelConfig) -> np.ndarray:
    """The space-table indices of `config` (none when it is not in the space)."""
    return np.flatnonzero(np.logical_and.reduce([tab[k] == getattr(config, k) for k in _CONFIG_KEYS]))


# =================================================================================================
# Stage 0 + 1: what launches, and occupancy

def _occupancy(tab: dict[str, np.ndarray], gpu: GPU) -> dict[str, np.ndarray]:
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


def ws_allowed(model: str, batch: int) -> bool:
    """Warp-tiled configs compete where they were measured and modelled: "snn", batch >= WS_MIN_BATCH."""
    return model == "snn" and batch >= WS_MIN_BATCH


@lru_cache(maxsize=4096)
def _stage1(shape: ConvShape, gpu: GPU, occ_min: float = OCCUPANCY_MIN, ws: bool = False) -> dict[str, Any]:
    tab = _space_table(shape)
    o = _occupancy(tab, gpu)
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


# =================================================================================================
# Stage 2: data movement (bytes, whole batch)

def _data_movement(shape: ConvShape, tab: dict, batch: int, density: float, model: str, idx) -> np.ndarray:
    if model == "paper":  # Table 2 as printed (elements), in fp32 bytes, times the batch
        inp = shape.H * shape.W * shape.C * density
        wts = tab["tiles_h"][idx] * tab["tiles_w"][idx] * shape.R * shape.S * shape.C * shape.N
        out = shape.P * shape.Q * shape.N * tab["tiles_c"][idx]
        return 4.0 * batch * (inp + wts + out)
    return _traffic(shape, tab, batch, density, idx)["l2_bytes"]


def _traffic(shape: ConvShape, tab: dict, batch: int, density: float, idx) -> dict[str, np.ndarray]:
    """Bytes the whole batch moves from L2 into the SMs, and the DRAM terms that do not depend on the GPU."""
    tiles_sp = tab["tiles_h"][idx] * tab["tiles_w"][idx]
    n_atomics = float(batch * shape.P * shape.Q * shape.N) * tab["tiles_c"][idx]
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


def _stage2(shape: ConvShape, gpu: GPU, batch: int, density: float, model: str):
    """(stage-2 survivors, stage-1 survivors, data movement of each stage-1 survivor); indices into
    the space table."""
    s1 = _stage1(shape, gpu, occupancy_min(model, batch), ws_allowed(model, batch))
    idx1 = s1["idx"]
    tab = _space_table(shape)
    dm = _data_movement(shape, tab, batch, density, model, idx1)
    share = STAGE2_KEEP_SNN if model == "snn" else STAGE2_KEEP
    order = np.lexsort((idx1, -s1["occ"][idx1], dm))  # least data movement; ties: higher occupancy, then space order
    # per kernel family: the warp-tiled blocks re-read weights less by design, so one ranking by data
    # movement would push every classic config out
    fam = tab["ws"][idx1][order]
    kept = [order[fam == f][:max(1, math.ceil(int((fam == f).sum()) * share))] for f in (False, True) if (fam == f).any()]
    return idx1[np.sort(np.concatenate(kept))], idx1, dm


# =================================================================================================
# Stage 3: time by waves

def _memory(shape: ConvShape, gpu: GPU, tab: dict, batch: int, density: float, idx) -> tuple[dict, np.ndarray, np.ndarray]:
    """(traffic, DRAM bytes, memory seconds) of the configs idx: the floor both stage-3 models share."""
    tr = _traffic(shape, tab, batch, density, idx)
    half_l2 = gpu.l2_bytes / 2
    w_dram = np.where(tr["w_bytes"] <= half_l2, tr["w_bytes"], tr["w_l2"])
    # output zeroed, then written back once if it stays in L2; else every channel tile misses again
    out_dram = np.where(tr["out_bytes"] <= half_l2, 2 * tr["out_bytes"], (1 + 2 * tab["tiles_c"][idx]) * tr["out_bytes"])
    dram = tr["in_dram"] + w_dram + out_dram
    t_mem = np.maximum(dram / (gpu.dram_bandwidth_gbs * 1e9), tr["l2_bytes"] / (gpu.l2_bandwidth_gbs * 1e9))
    return tr, dram, t_mem


def _time_pipes(shape: ConvShape, gpu: GPU, tab: dict, batch: int, density: float, idx, num_blk, blk_wave, waves,
                bps, warps) -> dict[str, np.ndarray]:
    """"pipes" stage 3 (the model before the fit): per-block work on the FP32 and shared-memory pipes,
    issue limited below WARPS_FOR_FULL_ISSUE resident warps, memory share per block, tail wave apart."""
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
    tr, dram, t_mem = _memory(shape, gpu, tab, batch, density, idx)
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


def _time(shape: ConvShape, gpu: GPU, tab: dict, occ: dict, batch: int, density: float, model: str, idx,
          consts: dict | None = None, ws_consts: dict | None = None) -> dict[str, np.ndarray]:
    """Stage 3 for the configs idx of tab; `consts` / `ws_consts` override SNN_FIT / SNN_FIT_WS (the classic and
    the warp-tiled family's constants; tools/fit_costmodel.py fits them)."""
    th, tw, cpb, threads = tab["th"][idx], tab["tw"][idx], tab["cpb"][idx], tab["bthreads"][idx]
    tc_avg = tab["tc_avg"][idx]
    bps, oc, warps = occ["bps"][idx], occ["occ"][idx], occ["warps"][idx]
    num_blk = batch * tab["blocks_per_image"][idx]                  # Eq. 3, times B, with N tiles
    blk_wave = np.round(gpu.max_threads * oc / threads)             # Eq. 5 (= SMs x blocks per SM)
    waves = np.ceil(num_blk / blk_wave)                             # Eq. 4, the right way up
    if model == "paper":
        flops_blk = 2.0 * th * tw * tab["tc"][idx] * shape.R * shape.S * cpb * density  # Eq. 6 with R*S
        flops_wave = blk_wave * flops_blk                                               # Eq. 7
        time_wave = flops_wave / (gpu.peak_fp32_flops * oc)                             # Eq. 8
        return {"predicted_us": time_wave * waves * 1e6,                                # Eq. 9
                "num_blocks": num_blk, "blk_wave": blk_wave, "waves": waves,
                "flops_blk": flops_blk, "time_wave_us": time_wave * 1e6}

    if model == "pipes":
        return _time_pipes(shape, gpu, tab, batch, density, idx, num_blk, blk_wave, waves, bps, warps)

    # "snn": a block walks its tc channels one after the other; a channel costs its serial latency (one
    # warp's chain: wait, taps, mask loop, FMAs) plus its share of the SM's issue slots when k blocks run
    # side by side (the sum, not the longer: Nsight Compute shows neither hidden behind the other,
    # docs/results/kernels/run7-profile). Waves of SMs x blocks per SM, the last one timed on its own;
    # memory time per wave from L2 / DRAM traffic as a floor; a fixed cost and the memset around it.
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

    tr, dram, t_mem = _memory(shape, gpu, tab, batch, density, idx)
    m_blk = t_mem / num_blk

    full = np.floor(num_blk / blk_wave)
    tail = num_blk - full * blk_wave
    k_tail = np.maximum(np.ceil(tail / gpu.sms), 1)
    t_full = np.maximum(wave(bps), blk_wave * m_blk)
    t_tail = np.where(tail > 0, np.maximum(wave(k_tail), tail * m_blk), 0.0)
    kernel_us = (full * t_full + t_tail) * 1e6
    # the memset: a launch, and the output's bytes at DRAM speed
    memset_us = k_["memset_us"] + tr["out_bytes"] / (gpu.dram_bandwidth_gbs * 1e9) * 1e6
    fixed_us = k_["fixed_us"] + np.where(tab["tiles_c"][idx] > 1, memset_us, 0.0)
    return {"predicted_us": kernel_us + fixed_us,
            "kernel_us": kernel_us, "fixed_us": fixed_us,
            "num_blocks": num_blk, "blk_wave": blk_wave, "waves": waves, "tail_blocks": tail,
            "compute_us": (full * wave(bps) + np.where(tail > 0, wave(k_tail), 0.0)) * 1e6,
            "latency_bound": lat >= bps * ins / ISSUE_PER_SM,
            "memory_us": t_mem * 1e6, "dram_bytes": dram, "l2_bytes": tr["l2_bytes"],
            "atomic_us": tr["atomic_l2"] / (gpu.l2_bandwidth_gbs * 1e9) * 1e6, "n_atomics": tr["n_atomics"],
            "fmas": cpb * tab["pairs_sp"][idx] * tc_avg * density * num_blk, "edge_waste": tab["edge_waste"][idx]}


# =================================================================================================
# Planning

def _check(model: str, batch: int) -> None:
    if model not in MODELS:
        raise UserError(f"unknown cost model '{model}': choose one of {', '.join(MODELS)}")
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise UserError(f"batch must be a positive integer, got {batch!r}")


def _run(shape: ConvShape, gpu: GPU, batch: int, level: float, model: str, keep: Iterable[int] = ()) -> dict[str, Any]:
    """All three stages for one shape and level; indices into the space table. `keep`: configs that stage 3 also
    times when they passed stage 1 (plan_shape's picks at lower levels: stage 2's cut moves with the density, and a
    pick it drops at the next level would leave the plan slower at higher sparsity)."""
    _check(model, batch)
    density = 1.0 - level
    s1 = _stage1(shape, gpu, occupancy_min(model, batch), ws_allowed(model, batch))
    idx2, idx1, dm1 = _stage2(shape, gpu, batch, density, model)
    n2 = len(idx2)
    idx2 = np.union1d(idx2, np.intersect1d(np.asarray(list(keep), dtype=idx2.dtype), idx1))
    s3 = _time(shape, gpu, _space_table(shape), s1, batch, density, model, idx2)
    order = np.lexsort((idx2, -s1["occ"][idx2], s3["predicted_us"]))  # least time; ties: occupancy, space order
    return {"idx1": idx1, "dm1": dm1, "idx2": idx2, "n_stage2": n2, "s3": s3, "order": order, "density": density}


def _family(tab: dict[str, np.ndarray], i: int) -> tuple[bool, int]:
    """Where the model's bias differs (docs/results/costmodel/fitws-s7.md): kernel family and channels a thread."""
    return bool(tab["wh"][i] * tab["ww"][i] > 1), int(tab["nt"][i])


def _alternatives(tab: dict[str, np.ndarray], r: dict[str, Any], pick: int, n: int) -> list[tuple[int, float]]:
    """Up to n stage-3 configs besides `pick` (a space index), predicted within CANDIDATE_WINDOW of it: first the
    fastest of each family not yet represented (a measurement can only correct the model's bias between families
    if both are measured), then the next fastest. (space index, predicted us) pairs."""
    t = r["s3"]["predicted_us"]
    t_pick = float(t[np.flatnonzero(r["idx2"] == pick)[0]])
    ranked = [(int(r["idx2"][j]), float(t[j])) for j in r["order"]
              if int(r["idx2"][j]) != pick and t[j] <= t_pick * CANDIDATE_WINDOW]
    seen, out = {_family(tab, pick)}, []
    for i, ti in ranked:
        if _family(tab, i) not in seen:
            seen.add(_family(tab, i))
            out.append((i, ti))
    out += [(i, ti) for i, ti in ranked if (i, ti) not in out]
    return out[:n]


def plan_shape(shape: ConvShape, gpu: GPU, batch: int, levels: Iterable[float], model: str = "snn",
               candidates: int = 1) -> dict[float, Choice]:
    """The chosen config and predicted time of one conv shape at each level (ascending).

    The choice is stage 3's fastest config, except that a config already chosen for a lower level
    is kept when it is within REUSE_TOLERANCE of the fastest and still faster than the previous level's
    choice: the model is not precise to a few per cent, and every distinct config is one more kernel to
    compile. Such a config is a stage-3 candidate whenever it passes stage 1 (`_run`'s keep).
    candidates > 1: each choice also carries up to candidates - 1 alternatives (`_alternatives`), for
    `snn-run calibrate` to measure against it."""
    if isinstance(candidates, bool) or not isinstance(candidates, (int, np.integer)) or candidates < 1:
        raise UserError(f"candidates must be a positive integer, got {candidates!r}")
    tab = _space_table(shape)
    out: dict[float, Choice] = {}
    chosen: list[int] = []          # space indices already picked, in order
    prev = math.inf
    for level in sorted(round(float(lv), 2) for lv in levels):
        r = _run(shape, gpu, batch, level, model, keep=chosen)
        t = r["s3"]["predicted_us"]
        pick = int(r["order"][0])
        hits = [np.flatnonzero(r["idx2"] == i) for i in chosen]
        reuse = [(float(t[h[0]]), int(h[0])) for h in hits if len(h)]
        if reuse:
            t_re, j_re = min(reuse)
            if t_re <= t[pick] * (1 + REUSE_TOLERANCE) and t_re < prev:
                pick = j_re
        i = int(r["idx2"][pick])
        if i not in chosen:
            chosen.append(i)
        prev = float(t[pick])
        alts = tuple(Choice(_configs(tab, [j])[0], tj) for j, tj in _alternatives(tab, r, i, candidates - 1)) \
            if candidates > 1 else ()
        out[level] = Choice(_configs(tab, [i])[0], prev, alts)
    return out


def plan_network(net: Network, gpu: GPU, batch: int, levels: Iterable[float] | str = DEFAULT_LEVELS,
                 model: str = "snn", layers: Iterable[str] | None = None, candidates: int = 1) -> Plan:
    """Plan every conv layer of `net` (or only those named in `layers`); identical shapes are
    planned once and share one choices dict. candidates: see plan_shape."""
    _check(model, batch)
    lv = parse_levels(levels)
    convs = list(net.convs)
    if layers is not None:
        wanted = list(layers)
        by_name = {c.name: c for c in convs}
        missing = [n for n in wanted if n not in by_name]
        if missing:
            some = ", ".join(c.name for c in convs[:4])
            raise UserError(f"{net.path}: no conv layer named '{missing[0]}' (conv layers are e.g. {some}, ...; "
                            f"see snn-codegen inspect)")
        convs = [by_name[n] for n in dict.fromkeys(wanted)]
    cache: dict[ConvShape, dict[float, Choice]] = {}
    planned = []
    for c in convs:
        if c.shape not in cache:
            cache[c.shape] = plan_shape(c.shape, gpu, batch, lv, model, candidates)
        planned.append(LayerPlan(c, cache[c.shape]))
    return Plan(net.name, gpu, batch, lv, model, tuple(planned))


def stages(shape: ConvShape, gpu: GPU, batch: int, level: float, model: str = "snn") -> dict[str, list[KernelConfig]]:
    """The configs surviving each stage: 'enumerated', 'launchable', 'stage1', 'stage2' (least data
    movement first) and 'stage3' (all of stage 2, least predicted time first: [0] is the choice)."""
    tab, s1 = _space_table(shape), _stage1(shape, gpu, occupancy_min(model, batch), ws_allowed(model, batch))
    r = _run(shape, gpu, batch, level, model)
    dm_order = np.lexsort((r["idx1"], -s1["occ"][r["idx1"]], r["dm1"]))
    idx2 = set(r["idx2"].tolist())
    return {"enumerated": _configs(tab, range(len(tab["th"]))),
            "launchable": _configs(tab, np.flatnonzero(s1["feasible"])),
            "stage1": _configs(tab, r["idx1"]),
            "stage2": _configs(tab, [i for i in r["idx1"][dm_order] if i in idx2]),
            "stage3": _configs(tab, r["idx2"][r["order"]])}


def data_movement(shape: ConvShape, config: KernelConfig, batch: int, level: float, model: str = "snn") -> float:
    """Stage 2's measure for one config: bytes moved by the whole batch ('paper': Table 2 in fp32
    bytes; 'snn': bytes from L2 into the SMs: halo'd COO* input, weights per block, atomics)."""
    _check(model, batch)
    return float(_data_movement(shape, _config_table(shape, config), batch, 1.0 - level, model, [0])[0])


def evaluate_config(shape: ConvShape, gpu: GPU, batch: int, level: float, config: KernelConfig,
                    model: str = "snn") -> dict[str, Any]:
    """Every number the model has for one config (whether or not it would survive stages 1-2):
    resources, occupancy, data movement and the stage-3 terms, predicted_us among them."""
    _check(model, batch)
    tab = _config_table(shape, config)
    occ = _occupancy(tab, gpu)
    row = {"config": config.to_dict(), "tag": config.tag(), "registers": int(tab["regs"][0]),
           "smem": int(tab["smem"][0]), "blocks_per_sm": int(occ["bps"][0]), "occupancy": float(occ["occ"][0]),
           "launchable": bool(occ["feasible"][0]),
           "data_movement_bytes": float(_data_movement(shape, tab, batch, 1.0 - level, model, [0])[0])}
    if row["launchable"]:
        row.update({k: float(v[0]) for k, v in _time(shape, gpu, tab, occ, batch, 1.0 - level, model, [0]).items()})
    return row


def clear_caches() -> None:
    """Forget cached spaces and stage-1 results (for timing the cold path)."""
    for f in (_space, _space_table, _stage1):
        f.cache_clear()


# =================================================================================================
# --explain

def explain_layer(shape: ConvShape, gpu: GPU, batch: int, level: float, model: str = "snn", top: int = 5,
                  chosen: KernelConfig | None = None) -> dict[str, Any]:
    """How the three stages went for one shape and level: counts surviving each stage and the
    best `top` candidates of stage 3 with their numbers and rank. `chosen` is the plan's pick
    (plan_shape may keep a lower level's config within REUSE_TOLERANCE, even one stage 2 drops here);
    it defaults to rank 1 and is listed even when it is not among the top."""
    tab, s1 = _space_table(shape), _stage1(shape, gpu, occupancy_min(model, batch), ws_allowed(model, batch))
    at = () if chosen is None else _index_of(tab, chosen).tolist()
    r = _run(shape, gpu, batch, level, model, keep=at)
    dm_of = dict(zip(r["idx1"].tolist(), r["dm1"].tolist()))
    rank_of = {int(r["idx2"][j]): k for k, j in enumerate(r["order"])}
    ranks = list(range(min(top, len(r["order"]))))
    if chosen is not None:
        match = [i for i in at if i in rank_of]
        if not match:
            raise ValueError(f"{chosen.tag()} did not survive stage 1 for {shape.tag()} at {level}")
        if rank_of[match[0]] not in ranks:
            ranks.append(rank_of[match[0]])
        chosen_rank = rank_of[match[0]]
    else:
        chosen_rank = 0
    cands = []
    for k in ranks:
        j = r["order"][k]
        i = int(r["idx2"][j])
        cfg = _configs(tab, [i])[0]
        row = {"rank": k + 1, "config": cfg.to_dict(), "tag": cfg.tag(), "registers": int(tab["regs"][i]),
               "smem": int(tab["smem"][i]), "blocks_per_sm": int(s1["bps"][i]), "occupancy": float(s1["occ"][i]),
               "data_movement_bytes": float(dm_of[i]), "chosen": k == chosen_rank}
        row.update({k2: float(v[j]) for k2, v in r["s3"].items()})
        cands.append(row)
    return {"shape": shape_dict(shape), "gpu": gpu.name, "batch": batch, "level": round(float(level), 2),
            "density": round(r["density"], 4), "model": model,
            "counts": {"enumerated": int(len(tab["th"])), "launchable": int(s1["feasible"].sum()),
                       "stage1_occupancy": int(len(r["idx1"])), "stage2_data_movement": int(r["n_stage2"]),
                       "stage3_timed": int(len(r["idx2"]))},
            "stage1_relaxed": bool(s1["relaxed"]), "occupancy_min": occupancy_min(model, batch),
            "chosen": next(c for c in cands if c["chosen"]), "top": cands}


def explain_plan(plan: Plan, top: int = 5) -> list[dict[str, Any]]:
    """explain_layer for every distinct shape of `plan` at each of its levels, marking the plan's
    picks: [{"layers": [names], "levels": {"0.40": explain dict, ...}}, ...]."""
    shapes: dict[ConvShape, tuple[dict, list[str]]] = {}
    for lp in plan.layers:
        shapes.setdefault(lp.layer.shape, (lp.choices, []))[1].append(lp.layer.name)
    return [{"layers": names,
             "levels": {f"{lv:.2f}": explain_layer(shape, plan.gpu, plan.batch, lv, plan.model, top, choices[lv].config)
                        for lv in plan.levels}}
            for shape, (choices, names) in shapes.items()]


# =================================================================================================
# Text output for `snn-codegen plan`

def format_plan(plan: Plan) -> str:
    """One block per distinct shape: its layers, then one row per run of levels sharing a config."""
    from .inspect import render
    by_shape: dict[ConvShape, list[LayerPlan]] = {}
    for lp in plan.layers:
        by_shape.setdefault(lp.layer.shape, []).append(lp)
    head = ("#", "shape", "layers", "levels", "config", "predicted µs per level")
    body = []
    for k, (shape, lps) in enumerate(by_shape.items(), 1):
        names = lps[0].layer.name if len(lps) == 1 else f"{len(lps)}× {lps[0].layer.name} …"
        runs: list[list[float]] = []
        for lv in plan.levels:
            if runs and lps[0].choices[runs[-1][-1]].config == lps[0].choices[lv].config:
                runs[-1].append(lv)
            else:
                runs.append([lv])
        for j, run in enumerate(runs):
            ch = lps[0].choices
            span = f"{run[0]:.2f}" if len(run) == 1 else f"{run[0]:.2f}–{run[-1]:.2f}"
            body.append((str(k) if j == 0 else "", shape.tag() if j == 0 else "", names if j == 0 else "",
                         span, ch[run[0]].config.tag(), " ".join(f"{ch[lv].predicted_us:.1f}" for lv in run)))
    totals = {lv: sum(lp.choices[lv].predicted_us for lp in plan.layers) for lv in plan.levels}
    lines = [render(head, body, right=(0,)), "",
             f"{plan.network} on {plan.gpu.name} ({plan.gpu.arch}), batch {plan.batch}, model '{plan.model}': "
             f"{len(plan.layers)} conv layers, {len(by_shape)} distinct shapes",
             "sum of predicted sparse-conv time per level (µs): "
             + "  ".join(f"{lv:.2f}: {totals[lv]:.0f}" for lv in plan.levels)]
    picks = {(s, ch.config) for s, lps in by_shape.items() for ch in lps[0].choices.values()}
    cands = {(s, c) for s, lps in by_shape.items() for ch in lps[0].choices.values() for c, _ in ch.candidates()}
    if len(cands) > len(picks):
        lines.append(f"with the alternatives (snn-codegen build --candidates): {len(cands)} kernels to build, "
                     f"{len(picks)} for the picks alone")
    return "\n".join(lines)


def format_explain(info: dict[str, Any], layers: Sequence[str] = ()) -> str:
    from .inspect import render
    c = info["counts"]
    who = f" ({', '.join(layers[:3])}{' …' if len(layers) > 3 else ''})" if layers else ""
    out = [f"{info['shape']['tag']}{who} at sparsity {info['level']:.2f} (density {info['density']:.2f}), "
           f"batch {info['batch']}, {info['gpu']}, model '{info['model']}'",
           f"  enumerated {c['enumerated']} → launchable {c['launchable']} → stage 1 occupancy ≥ "
           f"{info['occupancy_min']:.0%}: {c['stage1_occupancy']}"
           + (" (none reached it: kept the best occupancy)" if info["stage1_relaxed"] else "")
           + f" → stage 2 least data movement: {c['stage2_data_movement']} → stage 3 timed: {c['stage3_timed']}"]
    snn = info["model"] != "paper"  # the waves models report compute / memory / atomics
    head = ("rank", "config", "regs", "smem", "blk/SM", "occ", "data MB", "blocks", "waves",
            *(("compute µs", "memory µs", "atomic µs", "edge") if snn else ("kFLOP/blk", "wave µs")), "predicted µs")
    body = []
    for row in info["top"]:
        extra = ((f"{row['compute_us']:.1f}", f"{row['memory_us']:.1f}", f"{row['atomic_us']:.1f}",
                  f"{row['edge_waste']:.0%}") if snn else (f"{row['flops_blk'] / 1e3:.1f}", f"{row['time_wave_us']:.2f}"))
        body.append((f"{row['rank']}{'*' if row['chosen'] else ''}", row["tag"], str(row["registers"]), str(row["smem"]), str(row["blocks_per_sm"]),
                     f"{row['occupancy']:.0%}", f"{row['data_movement_bytes'] / 1e6:.2f}", str(int(row["num_blocks"])),
                     str(int(row["waves"])), *extra, f"{row['predicted_us']:.2f}"))
    out.append("  " + render(head, body, right=tuple(range(2, len(head)))).replace("\n", "\n  "))
    if not info["top"][0]["chosen"]:
        out.append(f"  * the plan keeps {info['chosen']['tag']} from a lower level: within "
                   f"{REUSE_TOLERANCE:.0%} of rank 1 (one kernel fewer to compile)")
    return "\n".join(out)
