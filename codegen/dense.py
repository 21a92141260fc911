"""The dense FP32 convolution for small batches (templates/dense_conv.cu.j2): config, eligibility, candidates, render.

At batch 1 the sparse kernels are bound by what is not an FMA (a bit test and a branch per pixel, a channel's
header, small register tiles: the 3x3 256 @14 kernel issues 7 instructions per useful FFMA), and cuDNN's FP32
kernels leave most SMs idle. This kernel is an implicit GEMM with a TM x TN register tile a thread (about 90 %
of its instructions FFMAs), the K range split over the KS blocks of a thread-block cluster and summed in
distributed shared memory in a fixed order, so one launch fills the GPU and still applies bias, residual, ReLU
and the zero count the next layer's dispatch reads. It takes the sparse kernels' launch arguments (emit.CONV_ARGS)
and CRSN weights, so the build offers it as one more candidate at every level and `snn-run calibrate` keeps it
where it measured faster (docs/kernels.md, "Dense FP32 convolution"). Where stride 1 keeps the output the size of
the input it also takes its producer's epilogue (emit.IN_ARGS), so a channel split before it needs no epilogue
launch in a graph (runtime/handoff.py), and for a layer that reads a pre-activation (DenseNet's conv1: a
batchnorm + ReLU of a concat buffer's first channels) it reads that buffer in place and applies
the batchnorm while staging (DenseConfig.in_bn, emit.IN_BN_ARGS), and for a layer whose output only a concat reads
(DenseNet's growth convs) it stores into the concat buffer's channel slice (DenseConfig.out_ld, emit.OUT_ARGS), as
the sparse kernels of such layers do.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .spec import ConvShape

BK = 32              # channels a pipeline chunk; C % BK == 0 keeps a chunk inside one filter tap
STAGES = 3           # cp.async pipeline depth
CLUSTER_MAX = 8      # the portable cluster size
# batches the build offers it at: beyond, the sparse kernels' larger tiles and cuDNN fill the GPU themselves
MAX_BATCH = 8
# (bm, bn, threads, slices) the kernel takes; the build offers CANDIDATE_TILES (and NARROW_TILES)
TILES = tuple((bm, bn, t, s) for bm, bn, t in ((32, 64, 128), (64, 64, 128), (32, 128, 128), (64, 128, 128),
                                            (64, 64, 256), (16, 32, 128), (32, 32, 128), (64, 32, 128))
              for s in (1, 2, 4) if t * s <= 512)
# the three whose best per layer came closest to all fourteen's on ResNet-152 at batch 1 and 8 (probe.py), slices
# paying on the 3x3 layers at batch 8 (one block an SM: more warps to hide the loads behind), and 64 x 64 in two
# slices: the fastest at batch 1 on five of ResNet-152's twelve stride-1 shapes, up to 1.45x the other three
# (docs/results/dense/h100/variants.*)
CANDIDATE_TILES = ((32, 64, 128, 2), (32, 128, 128, 1), (64, 128, 128, 2), (64, 64, 128, 2))
# a block that takes the whole K range at batch 1 runs the most chunks: four stages measured 9-13 % faster than
# three there, within 3 % either way where the K range is split (variants.*); the warp tiles, one warp a scheduler
# waiting out each chunk's copies, take four too (DenseNet-201's replay 1.230 / 1.244 -> 1.222 / 1.223 ms,
# docs/results/fusion/h200/deep, in git history at afc4fe0)
DEEP_STAGES = 4
# 32-channel tiles (8 threads along N): the only ones for 32 output channels (DenseNet's growth convs), and more
# blocks where the wide tiles leave most SMs idle (a 7x7 map: 49 pixels); offered there only (narrow_wanted), at
# batch 1: at batch 8 calibrate picked them for DenseNet-201's 3x3 convs at 7x7 and 56x56, and in the graph those
# took longer than the sparse kernels they replaced (replay 3.692 -> 3.769 ms; 1.501 -> 1.419 at batch 1; the run
# is docs/results/fusion/h100/not-kept/narrow-batch8 at 9f36111, in git history)
NARROW_TILES = ((16, 32, 128, 1), (32, 32, 128, 1), (64, 32, 128, 2))
NARROW_MAX_BATCH = 1
SLICES = (1, 2, 4)
# warp tiles (threads = 32): each warp the whole tile over its slice of every chunk's channels, 8 threads along N
# of 4-channel runs (WARP_TX), up to WARP_ACC accumulators a thread. At batch 1 the 128-thread tiles (16 threads of
# 4 channels along N) issue a shared load every few FFMAs, the two half-warps loading the same weights, at two warps
# a scheduler: Nsight Compute puts short_scoreboard first among the stalls of DenseNet-201's 14x14 layers. Offered
# at batch 1 (WARP_MAX_BATCH) where the K range is split at least WARP_MIN_SPLIT ways, so that a block runs a few
# chunks (there the graph ran faster with them, docs/results/fusion/h200/warp in git history at afc4fe0): WARP_TILES where N allows,
# WARP_NARROW_TILES where the narrow tiles are (narrow_wanted). Unsplit, a block runs the whole K range at one warp a
# scheduler, where the 128-thread tiles' second warp hides more of each chunk's wait.
WARP_TILES = ((32, 64, 32, 4), (16, 128, 32, 4))
WARP_NARROW_TILES = ((64, 32, 32, 4), (32, 32, 32, 4), (16, 32, 32, 4))
WARP_SLICES = (4, 8)
WARP_TX = 8
WARP_ACC = 64
WARP_MAX_BATCH = 1
WARP_MIN_SPLIT = 4
# 3xTF32 tiles (mma): the tile's products on the tensor cores, each FP32 operand split into two TF32 parts and three
# m16n8k8 products summed in FP32 (the rest x rest product, ~2^-22 of each, dropped: FP32's accuracy, not its
# rounding, hence an option: `snn-codegen build --tf32x3`). The FFMA tile's main loop is bound by issuing its FFMAs
# (one warp a scheduler at batch 1); the tensor cores take a k8 step of a 16 x 8 fragment in three instructions
# where the FFMAs take 32. Four warps a slice, each the tile's pixels x a quarter of its channels (bn / 4: whole n8
# fragments); offered beside the FFMA tiles at every batch the kernel is, with the same K splits. Measured on the H200
# (docs/results/fusion/h200/tf32x3, in git history at 620bd5b): ResNet-152 1.40 -> 1.33 ms at batch 1, 5.39 -> 5.20 at batch 8; DenseNet-201
# no faster.
MMA_TILES = ((32, 128, 128, 1), (32, 128, 128, 2), (32, 64, 128, 2), (64, 64, 128, 2))
MMA_MACS_PER_CLOCK = 512   # TF32 multiply-adds an SM a clock through mma.sync (about half the datasheet's rate)
STORE_VECTOR = 4     # channels a store moves (float4): a concat slice's pitch and offset are multiples of it
SMEM_LIMIT = 227 * 1024   # a block's dynamic shared memory on sm_90 (opt-in), where the K splits run


@dataclass(frozen=True, order=True)
class DenseConfig:
    bm: int          # pixels a block tile
    bn: int          # output channels a block tile (32, 64 or 128: 8 threads of 4, 16 of 4 or 8 channels)
    ks: int          # blocks of a cluster splitting the K range (1: no cluster)
    threads: int = 128   # threads that hold the tile (a slice)
    slices: int = 1      # slices a block, each over its share of every chunk's channels (threads * slices in all)
    stages: int = STAGES # chunks in the cp.async pipeline
    in_bn: bool = False  # reads its input at a pitch, a pre-activation's batchnorm applied while staging
    out_ld: bool = False # stores its output at a pitch it is given (a concat buffer's channel slice)
    mma: bool = False    # products on the tensor cores in 3xTF32 (MMA_TILES), not FFMAs

    def tag(self) -> str:
        return (f"m{self.bm}n{self.bn}k{self.ks}t{self.threads}" + (f"s{self.slices}" if self.slices > 1 else "")
                + (f"p{self.stages}" if self.stages != STAGES else "") + ("bn" if self.in_bn else "")
                + ("ld" if self.out_ld else "") + ("x3" if self.mma else ""))

    @property
    def block_threads(self) -> int:
        return self.threads * self.slices

    @property
    def tx(self) -> int:
        """Threads along N, 4 channels each (then 4 * tx apart where the tile is wider)."""
        return WARP_TX if self.threads == 32 else min(16, self.bn // 4)

    def name(self, shape: ConvShape, batch: int) -> str:
        return f"dconv_{shape.tag()}_{self.tag()}_b{batch}"

    def to_dict(self) -> dict:
        return {"family": "dense", **asdict(self)}


def eligible(shape: ConvShape, groups: int = 1) -> bool:
    """16-byte copies of BK-channel chunks and whole 32-channel tiles."""
    return groups == 1 and shape.C % BK == 0 and shape.N % 32 == 0


def input_epilogue(shape: ConvShape) -> bool:
    """Whether the kernel takes its producer's epilogue (emit.IN_ARGS and ZERO_ARGS; runtime/handoff.py): stride 1
    and an output the size of its input, so the centre tap's staged pixels are the block's own output pixels."""
    return shape.stride == (1, 1) and (shape.P, shape.Q) == (shape.H, shape.W)


def chunks(shape: ConvShape) -> int:
    return shape.R * shape.S * shape.C // BK


def ksum_bytes(bm: int, bn: int, ks: int) -> int:
    """What a block of a K split receives (templates/_ksum.cu.j2; this kernel's and the tensor-core kernel's): every
    block's partial sums (its slices added first) of its share of the bm x bn tile (SHARE float4s)."""
    return ks * math.ceil(bm * bn // 4 / ks) * 16


def recv_bytes(cfg: DenseConfig) -> int:
    """A K split's received partial sums (ksum_bytes: a block's slices are added before it pushes), pushed while
    this block may still run its main loop: beside the pipeline, not over it."""
    return ksum_bytes(cfg.bm, cfg.bn, cfg.ks) if cfg.ks > 1 else 0


def smem_bytes(cfg: DenseConfig, shape: ConvShape | None = None) -> int:
    """Dynamic shared memory: the pipeline's stages (and the producer's shift where the kernel for `shape` takes
    its epilogue), or the slices' partial tiles summed at the end over them where larger; then a K split's
    received partial sums (recv_bytes)."""
    staged = (2 if cfg.in_bn else 1) * shape.C * 4 if shape and input_epilogue(shape) else 0   # shift (and scale)
    ldb = cfg.bn + 8 if cfg.mma else cfg.bn     # the mma tile pads a weight row: its fragment loads conflict-free
    pipeline = cfg.stages * (cfg.bm * (BK + 4) + BK * ldb) * 4 + staged
    reduce = cfg.slices * cfg.bm * (cfg.bn + 4) * 4 if cfg.slices > 1 or cfg.mma else 0
    return max(pipeline, reduce) + recv_bytes(cfg)


def grid(shape: ConvShape, batch: int, cfg: DenseConfig) -> list[int]:
    return [math.ceil(batch * shape.P * shape.Q / cfg.bm), shape.N // cfg.bn, cfg.ks]


def check(shape: ConvShape, cfg: DenseConfig) -> None:
    if cfg.bn not in (32, 64, 128):
        raise ValueError(f"{cfg.tag()}: the dense kernel takes bn 32, 64 or 128")
    ty = cfg.threads // cfg.tx
    if not eligible(shape) or shape.N % cfg.bn:
        raise ValueError(f"{shape.tag()}: the dense kernel needs C % {BK} == 0 and N % {cfg.bn} == 0")
    if cfg.mma and (cfg.threads != 128 or cfg.bm % 16):   # its slices: checked as any 128-thread tile's below
        raise ValueError(f"{cfg.tag()}: a 3xTF32 tile takes four warps a slice and bm a multiple of 16")
    if cfg.threads == 32:     # a warp tile
        if cfg.slices not in WARP_SLICES or cfg.bm % ty or cfg.bm * cfg.bn // 32 > WARP_ACC:
            raise ValueError(f"{cfg.tag()}: a warp tile takes {' or '.join(map(str, WARP_SLICES))} slices, bm a "
                             f"multiple of {ty} and {WARP_ACC} accumulators a thread at most")
    elif cfg.threads not in (128, 256) or cfg.bm % ty or cfg.bm % (cfg.threads // (BK // 4)):
        raise ValueError(f"{cfg.tag()}: the dense kernel takes 32, 128 or 256 threads and bm a multiple "
                         f"of {max(ty, cfg.threads // (BK // 4))}")
    elif cfg.slices not in SLICES or cfg.block_threads > 512:
        raise ValueError(f"{cfg.tag()}: the dense kernel takes {', '.join(map(str, SLICES))} slices, "
                         f"512 threads a block at most")
    if (BK * cfg.bn // 4) % cfg.block_threads:   # the template's copy plan (BC = BK / BR copies a thread)
        raise ValueError(f"{cfg.tag()}: a chunk's {BK} x {cfg.bn} weights do not split into whole 16-byte copies "
                         f"over {cfg.block_threads} threads")
    if not 1 <= cfg.ks <= min(CLUSTER_MAX, chunks(shape)):
        raise ValueError(f"{cfg.tag()}: K split {cfg.ks} outside 1..{min(CLUSTER_MAX, chunks(shape))}")
    if smem_bytes(cfg, shape) > SMEM_LIMIT:
        raise ValueError(f"{cfg.tag()}: {smem_bytes(cfg, shape)} bytes of shared memory for {shape.tag()}, over "
                         f"{SMEM_LIMIT}")
    if cfg.in_bn and not input_epilogue(shape):
        raise ValueError(f"{shape.tag()}: a pre-activation is applied while staging only at stride 1, output the "
                         f"size of the input")


def _split(shape: ConvShape, batch: int, bm: int, bn: int, sms: int, clusters: bool) -> tuple[int, int]:
    """(tiles, the largest K split whose blocks fit one wave of one block an SM); no split without clusters."""
    tiles = math.ceil(batch * shape.P * shape.Q / bm) * (shape.N // bn)
    splits = range(1, min(CLUSTER_MAX if clusters else 1, chunks(shape)) + 1)
    return tiles, max((ks for ks in splits if tiles * ks <= sms), default=1)


def narrow_wanted(shape: ConvShape, batch: int, sms: int = 132, clusters: bool = True) -> bool:
    """Whether NARROW_TILES are offered (up to NARROW_MAX_BATCH): where no wider tile fits N, or where the wider
    tiles' blocks, split as far as a cluster goes, fill less than half the SMs."""
    if batch > NARROW_MAX_BATCH:
        return False
    wide = [_split(shape, batch, bm, bn, sms, clusters) for bm, bn, _, _ in CANDIDATE_TILES if shape.N % bn == 0]
    return not wide or max(t * ks for t, ks in wide) < sms / 2


def candidates(shape: ConvShape, batch: int, sms: int = 132, clusters: bool = True,
               tiles=None, in_bn: bool = False, out_ld: bool = False, mma_tiles=()) -> list[DenseConfig]:
    """Per tile shape (CANDIDATE_TILES, NARROW_TILES where narrow_wanted, at batch 1 WARP_TILES and likewise
    WARP_NARROW_TILES where split WARP_MIN_SPLIT ways) the largest K split whose blocks fit one wave of one block an
    SM (batch 1 is latency-bound: fewer chunks a block, no second wave), where the kernel takes it (check: a warp
    tile's partial sums may outgrow shared memory); without clusters (before sm_90) no split; and mma_tiles
    (MMA_TILES: `snn-codegen build --tf32x3`) so, as 3xTF32 tiles. in_bn: for a layer that reads a pre-activation
    (none where the kernel cannot apply it: stride 2); out_ld: for a layer that stores into a concat's buffer."""
    if batch > MAX_BATCH or not eligible(shape) or (in_bn and not input_epilogue(shape)):
        return []
    if tiles is None:
        narrow, warp = narrow_wanted(shape, batch, sms, clusters), batch <= WARP_MAX_BATCH
        tiles = CANDIDATE_TILES + (NARROW_TILES if narrow else ()) + (WARP_TILES if warp else ()) \
            + (WARP_NARROW_TILES if warp and narrow else ())
    out = []
    for bm, bn, threads, slices, mma in [t + (False,) for t in tiles] + [t + (True,) for t in mma_tiles]:
        if shape.N % bn:
            continue
        _, ks = _split(shape, batch, bm, bn, sms, clusters)
        stages = DEEP_STAGES if batch == 1 and (ks == 1 or threads == 32) else STAGES
        if threads == 32 and ks < WARP_MIN_SPLIT:
            continue
        cfg = DenseConfig(bm, bn, ks, threads, slices, stages, in_bn, out_ld, mma)
        try:
            check(shape, cfg)
        except ValueError:
            continue
        out.append(cfg)
    return sorted(set(out))


def predict_us(shape: ConvShape, batch: int, cfg: DenseConfig, sms: int = 132, clock_ghz: float = 1.755) -> float:
    """A rough time for the manifest (calibrate measures it): each SM's FFMAs at 128 a clock (a 3xTF32 tile's
    three products at MMA_MACS_PER_CLOCK), in waves, plus a fixed 3 us of launch, pipeline fill and store."""
    blocks = math.prod(grid(shape, batch, cfg))
    per_block = cfg.bm * cfg.bn * shape.R * shape.S * shape.C / cfg.ks
    rate = MMA_MACS_PER_CLOCK / 3 if cfg.mma else 128
    return math.ceil(blocks / sms) * per_block / rate / clock_ghz / 1e3 + 3.0


def emitted(shape: ConvShape, batch: int, cfg: DenseConfig):
    """The kernel as the build bundles it (emit.EmittedKernel): one launch with the sparse kernels' arguments
    (emit.CONV_ARGS) and CRSN weights, its epilogue fused."""
    from .emit import CONV_ARGS, IN_ARGS, IN_BN_ARGS, OUT_ARGS, PDL, ZERO_ARGS, EmittedKernel
    fn, src = render(shape, batch, cfg)
    args = (CONV_ARGS + (IN_ARGS + ZERO_ARGS if input_epilogue(shape) else []) + (OUT_ARGS if cfg.out_ld else [])
            + (IN_BN_ARGS if cfg.in_bn else []))
    steps = [{"op": "launch", "function": fn, "grid": grid(shape, batch, cfg), "block": [cfg.block_threads, 1, 1],
              "smem": smem_bytes(cfg, shape), "args": args, "pdl": PDL}]
    return EmittedKernel(fn, src, steps, {}, "CRSN", epilogue=True)


def render(shape: ConvShape, batch: int, cfg: DenseConfig) -> tuple[str, str]:
    """(function name, CUDA source)."""
    from .emit import _env
    check(shape, cfg)
    fn = cfg.name(shape, batch)
    g = {"C": shape.C, "N": shape.N, "H": shape.H, "W": shape.W, "P": shape.P, "Q": shape.Q, "R": shape.R,
         "S": shape.S, "SH": shape.stride[0], "SW": shape.stride[1], "PH": shape.padding[0],
         "PW": shape.padding[1], "M": batch * shape.P * shape.Q, "BM": cfg.bm, "BN": cfg.bn, "BK": BK,
         "KS": cfg.ks, "STAGES": cfg.stages, "NK": chunks(shape), "TT": cfg.threads, "TX": cfg.tx, "SLICES": cfg.slices,
         "B": batch, "IN_EPI": input_epilogue(shape), "IN_RES": False, "OUT_LD": cfg.out_ld, "IN_BN": cfg.in_bn,
         "MMA": cfg.mma}
    return fn, _env().get_template("dense_conv.cu.j2").render(name=fn, shape_tag=shape.tag(), g=g)
