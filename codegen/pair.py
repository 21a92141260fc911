"""Two 1x1 convolutions in one launch (templates/dense_pair.cu.j2): a ResNet block's last conv and the next block's
first, x = relu(input * W1 + bias + residual) then y = relu(x * W2 + bias2), with x stored as well.

At batch 1 a conv kernel pays 2.6-3.3 us of launch, wait, pipeline fill, cluster sum and store whatever its size
(docs/performance.md); a bottleneck chain of 1x1 -> 3x3 -> 1x1 pays it three times for ~7 us of FFMAs. Here the
blocks of one cluster own a tile of pixels: each computes a slice of x's channels over the first conv's whole K
range, keeps it in shared memory, and that slice is its share of the second conv's K range, summed with the
cluster's in distributed shared memory as the dense kernel's K split is (codegen/dense.py). x never travels
back from L2 for the second conv, and the second conv's weights arrive while the first runs.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .dense import BK, SMEM_LIMIT
from .spec import ConvShape

STAGES = 3
W2C = 16             # W2 rows a bulk copy where the W2 share is streamed (w2_ring)
W2R_MAX = 4
TX = 16              # threads along N (4 channels each): the second conv's tile (and the first's without warp_k)
TX1 = 8              # the first conv's threads along N with warp_k (8 channels each, two float4 runs)
# blocks a cluster: sm_90 allows 16 where the function asks for a non-portable size (runtime/cuda.py does), so a
# 1024-channel x splits into 64-channel slices over 32-pixel tiles: half the weight traffic of 16-pixel tiles in
# clusters of 8, and the fastest at 14x14 (14.7 against 17.2 us a pair, docs/results/fusion/h200/pair/probe.log)
CLUSTER_MAX = 16
PORTABLE = 8         # a larger cluster is given at launch (manifest step "cluster"), not compiled in
ACCUMULATORS = 64    # a conv's accumulators a thread at most with warp_k or tx2 32 (registers beside the other's)
# batches the build offers it at: at batch 8 the best config took 1.16-1.48x the two dense kernels' time
# (docs/results/fusion/h200/pair/probe.log)
MAX_BATCH = 1
# the configs offered (PairConfig's fields): 32-pixel tiles with a two-stage pipeline, the fastest of the configs
# the probe measured on ResNet-152's pairs at batch 1 (docs/results/fusion/pair_probe.py), among them the same tile
# with the first conv's K split over the warps, and with 32 threads along N for the second where N allows (at 28x28
# the fastest: fusion/h200/pair/probe.log, phases.log), and that over 8 warps in 4 groups with 64-channel chunks (at
# 14x14 the fastest); the engine times them against the two convs' own kernels at load and keeps the fastest
# (runtime/pairs.py)
CANDIDATES = ((32, 64, 128, 1, 2), (32, 64, 128, 2, 2), (32, 128, 128, 2, 2), (32, 64, 128, 1, 2, True),
              (32, 64, 128, 1, 2, True, 2 * TX),
              (32, 64, 256, 1, 2, True, 2 * TX, 4, 2 * BK),
              # 28-pixel tiles (two rows of a 14-wide map): the 196 pixels of a 14x14 map in 7 whole tiles where 32-pixel
              # ones leave the seventh cluster 4 pixels, so each thread does 7/8 of the FFMAs on the same 112 SMs; the
              # first conv's K over a group a warp (7 x 8 accumulators a thread) or 4 groups of two warps (7 x 4), the
              # second's 64 threads along N (7 x 4). The second took ResNet-152's layer-3 pairs 13.4 -> 12.6 us alone
              # and its batch-1 replay 1.23 -> 1.19 ms (docs/results/fusion/h200/tiles/)
              (28, 64, 256, 1, 2, True, 4 * TX, 0, 2 * BK), (28, 64, 256, 1, 2, False, 4 * TX, 4, 2 * BK),
              # and for 28x28 maps (28 whole tiles of 4 blocks on 112 SMs, where 32-pixel tiles make 24.5): 128 channels
              # a block, the first conv's K over 2 groups of two warps (7 x 8), the second's 32 threads along N. At
              # load it wins the layer-2 to layer-3 pair (15.5 against 16.8 us), not layer 2's own (64-channel chunks:
              # never; docs/results/fusion/h200/tiles/28x28/)
              (28, 128, 128, 1, 2, False, 2 * TX, 2))
# and where none of those fits, an 8-pixel tile over 128-channel slices with the W2 share streamed (w2_ring):
# ResNet's 7x7 pairs, where 2048 x channels need 128 a block and a 32-pixel tile would leave most SMs idle. At load
# it took 17.4-18.0 us against 21.5-23.5 with 32-channel chunks, a 2- or 4-stage pipeline or the K over 2 groups, and
# 30.4-31.3 on a 16-pixel tile over 64 SMs (docs/results/fusion/h200/streamed/; fusion/h200/branch-first/ at 06722d3)
STREAMED = ((8, 128, 128, 1, 3, True, 2 * TX, 4, 2 * BK),)


@dataclass(frozen=True, order=True)
class PairConfig:
    bm: int          # pixels a cluster's tile
    bn1: int         # x channels a block (the cluster has N1 / bn1 blocks)
    threads: int = 128   # threads that hold the tile (a slice)
    slices: int = 2      # slices a block
    stages: int = STAGES
    # the first conv's K range split over the warps: each warp the whole x tile (8 channels a thread) over its
    # share of every chunk's channels (False: over the slices, 4 channels a thread, as the second conv)
    warp_k: bool = False
    tx2: int = TX        # the second conv's threads along N (4 channels each; 32: two float4 runs a thread)
    # the first conv's thread groups where not the default (one a warp with warp_k, else one a slice): with warp_k
    # and 8 warps a block (256 threads, one or two slices), 4 groups of two warps each hold half the accumulators of
    # a warp-sized group, two warps a scheduler without spilling (8 groups of 64 accumulators a thread spilled)
    kg: int = 0
    bk: int = BK         # the first conv's channels a pipeline chunk (a multiple of BK): 64 halves the chunks' waits

    def tag(self) -> str:
        return f"m{self.bm}n{self.bn1}t{self.threads}s{self.slices}" + (
            f"p{self.stages}" if self.stages != STAGES else "") + ("w" if self.warp_k else "") + (
            f"x{self.tx2}" if self.tx2 != TX else "") + (f"k{self.kg}" if self.kg else "") + (
            f"c{self.bk}" if self.bk != BK else "")

    @property
    def kg1(self) -> int:
        """The first conv's thread groups, each the whole x tile over its share of a chunk's channels."""
        return self.kg or (self.block_threads // 32 if self.warp_k else self.slices)

    @property
    def tx1(self) -> int:
        return TX1 if self.warp_k else TX

    @property
    def block_threads(self) -> int:
        return self.threads * self.slices

    def name(self, first: ConvShape, second: ConvShape, batch: int) -> str:
        return f"dpair_{first.tag()}_n{second.N}_{self.tag()}_b{batch}"

    def to_dict(self) -> dict:
        return {"family": "pair", **asdict(self)}


def _plain_1x1(s: ConvShape) -> bool:
    return (s.R, s.S) == (1, 1) and s.stride == (1, 1) and s.padding == (0, 0)


def eligible(first: ConvShape, second: ConvShape) -> bool:
    """Two stride-1 1x1 convs, the second reading the first's output: whole chunks and whole float4 runs."""
    return (_plain_1x1(first) and _plain_1x1(second) and second.C == first.N and (second.H, second.W) == (first.H, first.W)
            and first.C % BK == 0 and second.N % (4 * TX) == 0)


def stage_floats(cfg: PairConfig) -> int:
    """The stages, which the first conv's groups' x partials overwrite afterwards: the larger of the two."""
    return max(cfg.stages * cfg.bm * (cfg.bk + 4) + cfg.stages * cfg.bk * cfg.bn1, cfg.kg1 * cfg.bm * (cfg.bn1 + 4))


def _floats(first: ConvShape, second: ConvShape, cfg: PairConfig, w2_floats: int) -> int:
    ks = first.N // cfg.bn1
    share = math.ceil(cfg.bm * second.N // 4 / ks)
    return stage_floats(cfg) + first.C + w2_floats + cfg.bm * (cfg.bn1 + 4) + ks * share * 4


def w2_ring(first: ConvShape, second: ConvShape, cfg: PairConfig) -> int:
    """0 where the block's W2 share fits in shared memory whole; else the ring slots (the most that fit, W2R_MAX at
    most) it streams through, W2C rows a slot: ResNet's 7x7 pairs, whose share is 128 x 512 floats."""
    if 4 * _floats(first, second, cfg, cfg.bn1 * second.N) <= SMEM_LIMIT:
        return 0
    for r in range(min(W2R_MAX, cfg.bn1 // W2C), 1, -1):
        if 4 * _floats(first, second, cfg, r * W2C * second.N) <= SMEM_LIMIT:
            return r
    return 0


def smem_floats(first: ConvShape, second: ConvShape, cfg: PairConfig) -> int:
    """The stages, the producer's shift, the W2 share (or its ring), x, the pushed y partials
    (templates/dense_pair.cu.j2)."""
    ring = w2_ring(first, second, cfg)
    return _floats(first, second, cfg, (ring * W2C if ring else cfg.bn1) * second.N)


def red2_fits(first: ConvShape, second: ConvShape, cfg: PairConfig) -> bool:
    """Whether the slices' partial y tiles, added before the push, fit over the stages, the shift and the W2 share."""
    return cfg.slices == 1 or cfg.slices * cfg.bm * (second.N + 4) <= stage_floats(cfg) + first.C + cfg.bn1 * second.N


def smem_bytes(first: ConvShape, second: ConvShape, cfg: PairConfig) -> int:
    return 4 * smem_floats(first, second, cfg)


def check(first: ConvShape, second: ConvShape, cfg: PairConfig) -> None:
    if not eligible(first, second):
        raise ValueError(f"{first.tag()} -> {second.tag()}: two stride-1 1x1 convs, C % {BK} == 0 and "
                         f"N % {4 * TX} == 0")
    if cfg.bk not in (BK, 2 * BK) or first.C % cfg.bk:
        raise ValueError(f"{cfg.tag()}: chunks of {BK} or {2 * BK} channels that divide C = {first.C}")
    # the first conv's thread groups: tt1 threads each, ty1 rows of tx1 (the x tile's rows must divide among them)
    kps, tt1 = cfg.bk // cfg.kg1, cfg.block_threads // cfg.kg1
    ty1, br = tt1 // cfg.tx1, cfg.block_threads // (cfg.bn1 // 4)
    if cfg.threads not in (128, 256) or cfg.bm % ty1 or not br or cfg.bk % br:
        raise ValueError(f"{cfg.tag()}: 128 or 256 threads a slice and bm a multiple of {ty1}")
    if cfg.bn1 % (4 * TX) or first.N % cfg.bn1 or not 2 <= first.N // cfg.bn1 <= CLUSTER_MAX:
        raise ValueError(f"{cfg.tag()}: {first.N} x channels in 2..{CLUSTER_MAX} blocks of {cfg.bn1}")
    if cfg.slices not in (1, 2, 4) or cfg.block_threads > 512 or (cfg.bk // cfg.slices) % 4 or (
            cfg.bn1 // cfg.slices) % 4:
        raise ValueError(f"{cfg.tag()}: 1, 2 or 4 slices, 512 threads a block at most")
    if cfg.kg and (cfg.kg not in (1, 2, 4, 8, 16) or kps % 4 or tt1 < 32 or tt1 % cfg.tx1):
        raise ValueError(f"{cfg.tag()}: {cfg.kg} groups of {tt1} threads cannot hold the {cfg.bm}-pixel x tile")
    if cfg.warp_k and (kps % 4 or cfg.bn1 % (4 * TX1) or cfg.bm * cfg.bn1 // tt1 > ACCUMULATORS):
        raise ValueError(f"{cfg.tag()}: {cfg.kg1} groups cannot split the {cfg.bm} x {cfg.bn1} x tile's chunks "
                         f"({ACCUMULATORS} accumulators of 8 channels a thread at most)")
    if cfg.tx2 not in (TX, 2 * TX, 4 * TX) or second.N % (4 * cfg.tx2) or cfg.bm % (cfg.threads // cfg.tx2) or (
            cfg.tx2 != TX and cfg.bm * second.N // cfg.threads > ACCUMULATORS):
        raise ValueError(f"{cfg.tag()}: {second.N} y channels over {cfg.tx2} threads of {cfg.threads}")
    if w2_ring(first, second, cfg) and (cfg.slices != 1 or cfg.bn1 % W2C):
        raise ValueError(f"{cfg.tag()}: a streamed W2 share needs one slice and {W2C}-row chunks")
    if not red2_fits(first, second, cfg):
        raise ValueError(f"{cfg.tag()}: {cfg.slices} partial {cfg.bm} x {second.N} tiles do not fit over the stages "
                         f"and the W2 share")
    if smem_bytes(first, second, cfg) > SMEM_LIMIT:
        raise ValueError(f"{cfg.tag()}: {smem_bytes(first, second, cfg)} bytes of shared memory, over {SMEM_LIMIT}")


def grid(first: ConvShape, batch: int, cfg: PairConfig) -> list[int]:
    return [math.ceil(batch * first.H * first.W / cfg.bm), 1, first.N // cfg.bn1]


def candidates(first: ConvShape, second: ConvShape, batch: int, clusters: bool = True) -> list[PairConfig]:
    """The configs of CANDIDATES that fit the pair (or of STREAMED, where none does), at batches up to MAX_BATCH on
    GPUs with clusters."""
    if batch > MAX_BATCH or not clusters or not eligible(first, second):
        return []
    out = []
    for group in (CANDIDATES, STREAMED):
        for fields in group:
            cfg = PairConfig(*fields)
            try:
                check(first, second, cfg)
            except ValueError:
                continue
            out.append(cfg)
        if out:
            break
    return out


# the launch arguments after emit.CONV_ARGS + IN_ARGS + ZERO_ARGS (the first conv's): the second conv's
SECOND_ARGS = ["weight2", "output2", "bias2", "zeros2", "relu2"]


def emitted(first: ConvShape, second: ConvShape, batch: int, cfg: PairConfig):
    from .emit import CONV_ARGS, IN_ARGS, PDL, ZERO_ARGS, EmittedKernel
    fn, src = render(first, second, batch, cfg)
    ks = first.N // cfg.bn1
    steps = [{"op": "launch", "function": fn, "grid": grid(first, batch, cfg), "block": [cfg.block_threads, 1, 1],
              "smem": smem_bytes(first, second, cfg), "args": CONV_ARGS + IN_ARGS + ZERO_ARGS + SECOND_ARGS,
              "pdl": PDL, **({"cluster": ks} if ks > PORTABLE else {})}]
    return EmittedKernel(fn, src, steps, {}, "CRSN", epilogue=True)


def render(first: ConvShape, second: ConvShape, batch: int, cfg: PairConfig) -> tuple[str, str]:
    """(function name, CUDA source)."""
    from .emit import _env
    check(first, second, cfg)
    fn = cfg.name(first, second, batch)
    g = {"C1": first.C, "N1": first.N, "N2": second.N, "M": batch * first.H * first.W, "BM": cfg.bm,
         "BN1": cfg.bn1, "BK": cfg.bk, "KS": first.N // cfg.bn1, "TT": cfg.threads, "SLICES": cfg.slices, "TX": cfg.tx2,
         "STAGES": cfg.stages, "B": batch, "IN_EPI": True, "IN_RES": False, "OUT_LD": False, "IN_BN": False,
         "KG1": cfg.kg1, "TX1": cfg.tx1, "OFF_SH": stage_floats(cfg), "W2R": w2_ring(first, second, cfg), "W2C": W2C}
    return fn, _env().get_template("dense_pair.cu.j2").render(name=fn, tag1=first.tag(), tag2=second.tag(), g=g)
