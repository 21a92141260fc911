"""Render CUDA sources from the jinja2 templates in codegen/templates/.

- `render_sparse`: the sparse convolution (dense NHWC input compacted in shared memory inside the
  conv kernel itself: no separate conversion pass), its epilogue (bias, residual, ReLU, zero count) fused
  into the store where one block owns all input channels (one launch a conv); configs with wh*ww > 1 go to
  `render_sparse_ws`, the warp-tiled variant (several register tiles a block).
- `render_epilogue`: scale/shift (+ residual) + ReLU + zero counter, for what no conv kernel fuses (the
  cuDNN path, pre-activation batchnorms).
- `render_selector`: the device-side dense/sparse selector.

Exactly what `snn-codegen build` emits: one kernel per (shape, batch, config), named by the config.
Every size is a compile-time constant; the static geometry (which in-tile pixel feeds which output
of the register tile through which filter tap) is computed here once, in `tile_taps`, and shared
with the NumPy mirror in codegen/reference.py so both do the same index arithmetic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import jinja2

from .config import KernelConfig
# register_cap: re-exported with the rules the emitter renders with (tests check the cost model against them here)
from .kernel_rules import (CLUSTER_MAX, WS_MAX_WORDS, WS_SMEM_LIMIT, chunk_channels, cluster_split,  # noqa: F401
                           cluster_stage_floats, min_blocks, register_cap, weight_ring_depth, ws_eligible,
                           ws_params)
from .spec import ConvShape

TEMPLATES = Path(__file__).parent / "templates"


# The activations' type per precision: 16-bit kernels read and write 16-bit NHWC tensors (input, residual,
# a fused output) and keep FP32 weights (holding 16-bit values), FP32 sums and an FP32 accumulator.
PRECISIONS = {"fp32": "float", "bf16": "__nv_bfloat16", "fp16": "__half"}


def kernel_name(shape: ConvShape, batch: int, config: KernelConfig, precision: str = "fp32") -> str:
    """config.name, with the precision appended where it is not FP32."""
    base = config.name(shape, batch)
    return base if precision == "fp32" else f"{base}_{precision}"


@dataclass(frozen=True)
class EmittedKernel:
    name: str
    source: str
    steps: list = field(hash=False)
    workspace: dict = field(hash=False)
    weight_layout: str = "CRSN"
    epilogue: bool = False   # the launch applies bias / residual / ReLU / zero count itself (CONV_ARGS)
    precision: str = "fp32"  # the activations' (PRECISIONS)
    input_layout: str = "NHWC"   # the activations it reads: NCHW for the image's direct kernel (codegen/direct.py)


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


# ---------------------------------------------------------------- static geometry (shared with reference.py)

def in_tile(shape: ConvShape, cfg: KernelConfig) -> tuple[int, int]:
    return cfg.in_tile(shape)


def tile_taps(shape: ConvShape, cfg: KernelConfig) -> list[list[tuple[int, int, int]]]:
    """For each in-tile pixel p = iy*IW + ix: the (rs, oy, ox) it feeds, rs = r*S + s.

    Output (oy, ox) of the tile reads in-tile pixel (oy*sh + r, ox*sw + s); inverted here so the
    kernel loops over pixels and every register index is a compile-time constant.
    """
    sh, sw = shape.stride
    ih, iw = in_tile(shape, cfg)
    taps = []
    for iy in range(ih):
        for ix in range(iw):
            lst = []
            for r in range(shape.R):
                dy = iy - r
                if dy < 0 or dy % sh or dy // sh >= cfg.th:
                    continue
                for s in range(shape.S):
                    dx = ix - s
                    if dx < 0 or dx % sw or dx // sw >= cfg.tw:
                        continue
                    lst.append((r * shape.S + s, dy // sh, dx // sw))
            taps.append(lst)
    return taps


def used_pixels(shape: ConvShape, cfg: KernelConfig) -> int:
    """In-tile pixels that feed at least one output of the register tile (one test each, one register
    each when hoisted)."""
    return sum(1 for lst in tile_taps(shape, cfg) if lst)


def geometry(shape: ConvShape, batch: int, cfg: KernelConfig, precision: str = "fp32") -> dict:
    """The classic kernel's compile-time constants (sparse_conv.cu.j2); DT: the activations' C type."""
    ih, iw = in_tile(shape, cfg)
    g = cfg.grid(shape, batch)
    npix = ih * iw
    return dict(B=batch, C=shape.C, N=shape.N, H=shape.H, W=shape.W, P=shape.P, Q=shape.Q,
                R=shape.R, S=shape.S, SH=shape.stride[0], SW=shape.stride[1],
                PH=shape.padding[0], PW=shape.padding[1], TH=cfg.th, TW=cfg.tw, TC=cfg.tc,
                THREADS=cfg.threads, NT=cfg.nt, NB=cfg.threads * cfg.nt, KC=chunk_channels(shape, cfg), IH=ih,
                IW=iw, NPIX=npix, NWORDS=math.ceil(npix / 32), WD=weight_ring_depth(shape, cfg),
                MINB=min_blocks(shape, cfg), TILES_H=g["tiles_h"], TILES_W=g["tiles_w"],
                TILES_C=g["tiles_c"], TILES_N=g["tiles_n"], VEC=vec_eligible(shape, cfg),
                VW=store_vector(shape.N, cfg), SMEM=0,
                DT=PRECISIONS[precision], IN_EPI=input_epilogue(shape, cfg, precision),
                IN_RES=input_residual(shape, cfg, precision), OUT_LD=output_pitch(shape, cfg, precision),
                IN_BN=cfg.in_bn, **cluster_geometry(shape, cfg))


def cluster_geometry(shape: ConvShape, cfg: KernelConfig) -> dict:
    """CLUSTER: blocks of a cluster's channel split (0: none); CL_PIX: block-tile pixels each round of its sum
    passes through shared memory (kernel_rules.cluster_fits)."""
    if not cfg.cluster:
        return {"CLUSTER": 0, "CL_PIX": 0}
    pixels = cfg.th * cfg.wh * cfg.tw * cfg.ww
    return {"CLUSTER": math.ceil(shape.C / cfg.tc),
            "CL_PIX": min(pixels, cluster_stage_floats(shape, cfg) // (cfg.threads * cfg.nt))}


def check_config(shape: ConvShape, cfg: KernelConfig) -> None:
    if cfg.out_ld and cfg.cluster:
        raise ValueError(f"{cfg.tag()}: a cluster's store indexes a dense output (no out_ld)")
    if cfg.in_bn and not input_epilogue(shape, cfg):
        raise ValueError(f"{cfg.tag()}: in_bn stages its input with its producer's epilogue, which needs stride 1, an "
                         f"output the input's size and no cluster ({shape.tag()})")
    if cfg.cluster and not cluster_split(shape, cfg):
        raise ValueError(f"{cfg.tag()}: no cluster reduction for {shape.tag()} (it needs 1 < tiles_c <= {CLUSTER_MAX} "
                         f"and the partial tile within the staging's shared memory)")
    if cfg.threads % 32 or not 32 <= cfg.block_threads() <= 1024 or min(cfg.wh, cfg.ww) < 1:
        raise ValueError(f"{cfg.tag()}: threads must be a multiple of 32 in [32, 1024]")
    if min(cfg.th, cfg.tw, cfg.tc, cfg.nt) < 1:
        raise ValueError(f"{cfg.tag()}: tile sizes must be >= 1")
    if cfg.th > shape.P or cfg.tw > shape.Q:
        raise ValueError(f"{cfg.tag()}: tile larger than the {shape.P}x{shape.Q} output")


def vec_eligible(shape: ConvShape, cfg: KernelConfig) -> bool:
    """Thread-contiguous output channels (8/16-byte copies, loads and stores per tap/pixel) where nt is 2, 4 or 8
    and N a multiple of nt (a thread's channels are all in range or all out): measured 0.93x the time of the
    strided mapping over 488 configs. Otherwise thread t owns channels n0 + t + k*threads."""
    return _vec_nt(shape.N, cfg.nt)


def _vec_nt(n: int, nt: int) -> bool:
    return nt in (2, 4, 8) and n % nt == 0


def store_vector(n: int, cfg: KernelConfig) -> int:
    """Channels a sparse kernel with N = n copies, loads, stores and adds as one vector at a tap or pixel (its
    templates' VW): warp-tiled by nt, classic by nt where vec_eligible, else one. The runtime reads it too: a concat
    slice's pitch and offset must be multiples of it (runtime/kernels.py, slice_aligned)."""
    if cfg.warp_tiled:
        return 1 if cfg.nt == 1 else 2 if cfg.nt == 2 else 4
    return (2 if cfg.nt == 2 else 4) if _vec_nt(n, cfg.nt) else 1


HOIST_REGS_MAX = 160  # accumulators + one channel's taps + hoisted values: 7x7-tile kernels past it spilled


def hoist_default(shape: ConvShape, batch: int, cfg: KernelConfig) -> bool:
    """Hoisted value loads at batch 1 (latency-bound: 0.96x the time over 36 measured cells, 1.01x at
    batch 32, so not there), where the values' registers fit beside the accumulators and taps."""
    need = used_pixels(shape, cfg) + cfg.th * cfg.tw * cfg.nt + shape.R * shape.S * cfg.nt
    return batch == 1 and need <= HOIST_REGS_MAX


# ---------------------------------------------------------------- renderers

def render_sparse(shape: ConvShape, batch: int, config: KernelConfig, precision: str = "fp32") -> EmittedKernel:
    """The fused sparse convolution for one (shape, batch, config), named config.name(shape, batch).

    A channel's non-zero pixels are visited by an unrolled pass over all in-tile pixels that feed an
    output, with a warp-uniform bit test each (every index static). Output channels are
    thread-contiguous where `vec_eligible` (one 8/16-byte cp.async and one vector shared load per tap,
    one vector store or sm_90 vector atomic per pixel). At batch 1 (`hoist_default`) every used pixel's
    value of a channel is loaded before its first bit test, so the loads overlap instead of paying one
    shared-memory latency per non-zero pixel.

    precision "bf16" / "fp16" (PRECISIONS): 16-bit activations, FP32 weights and sums; the classic kernel
    without clusters only.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision != "fp32" and (config.warp_tiled or config.cluster or config.out_ld or config.in_bn):
        raise ValueError(f"{config.tag()}: {precision} kernels are classic kernels without clusters, out_ld or in_bn")
    if config.warp_tiled:
        return render_sparse_ws(shape, batch, config)
    check_config(shape, config)
    g = geometry(shape, batch, config, precision)
    name = kernel_name(shape, batch, config, precision)
    taps = tile_taps(shape, config)
    pixels = [(p, p // 32, p % 32, 1 << (p % 32), lst) for p, lst in enumerate(taps) if lst]
    src = _env().get_template("sparse_conv.cu.j2").render(name=name, g=g, pixels=pixels,
                                                           hoist=hoist_default(shape, batch, config),
                                                           shape_tag=shape.tag(), cfg_tag=config.tag())
    return _kernel(name, src, g, batch, [config.threads, 1, 1], precision)


# The launch arguments of a conv kernel (templates/_epilogue.cu.j2); the runtime passes null for an absent
# bias, residual or counter, and 0 or 1 for relu.
CONV_ARGS = ["input", "weight", "output", "bias", "residual", "zeros", "relu"]


# The producer's epilogue in the consumer's staging: a kernel that can take it (`input_epilogue`; the dense kernel's
# dense.input_epilogue, without IN_RES_ARGS) also takes
# these. in_shift non-null: its input holds the producing conv's raw sums (a split's, added into a runtime
# buffer), and each staged value in the image becomes relu(value + in_shift[c] (+ in_res[pixel][c])) before its
# mask is built; the block's own pixels (its output tile's, at n tile 0) count their zeros into in_zeros and,
# where in_out is non-null, store the value there (dense NHWC: the producer's output for its later readers, a
# ResNet block's residual), so the producer needs no epilogue launch. Null: the input is used as it is.
IN_ARGS = ["in_shift", "in_zeros"]
# in_res, in_out: rendered into 1x1 kernels only (`input_residual`): a residual block's output feeds 1x1 convs in
# the shipped networks, and the two extra pointers cost the 3x3 kernels registers (a block of occupancy).
IN_RES_ARGS = ["in_res", "in_out"]
# and, last, a range of floats to zero after its wait (null / 0: none): the graph's sums regions that the kernel
# before it has read, cleared in a launch the graph makes anyway (no fill kernel). The manifest names them.
ZERO_ARGS = ["zero", "zero_total"]
# The output's pixel pitch, last, in kernels whose config asks for it (`output_pitch`): a store (or a split's
# atomics) puts pixel i's channels at output + i * out_ld, so a conv can write the channel slice of a wider NHWC
# tensor, a concat's buffer (runtime/lower.py), with no copy; out_ld = N for a dense output. The residual (read at
# the same offsets) must then be dense: the runtime passes one only where out_ld == N.
OUT_ARGS = ["out_ld"]
# A pre-activation's input, last, in kernels whose config asks for it (KernelConfig.in_bn, an input_epilogue kernel):
# the input's pixels lie in_ld elements apart (the first channels of a concat's buffer: DenseNet's norm1 reads its
# block's), and where in_scale is non-null each staged value becomes relu(value * in_scale[c] + in_shift[c]) (a
# batchnorm + ReLU that no conv folds), its zeros counted as IN_ARGS says; null: relu(value + in_shift[c]) as before.
IN_BN_ARGS = ["in_scale", "in_ld"]


def output_pitch(shape: ConvShape, cfg: KernelConfig, precision: str = "fp32") -> bool:
    """Whether the kernel takes OUT_ARGS: its config says so (KernelConfig.out_ld: the layers whose output only
    concats read). Every other kernel keeps N a compile-time constant, its store offsets immediates: a runtime
    pitch changes how ptxas allocates the registers of kernels that never need it."""
    return cfg.out_ld


def input_residual(shape: ConvShape, cfg: KernelConfig, precision: str = "fp32") -> bool:
    """Whether the kernel also takes IN_RES_ARGS: an input_epilogue kernel of a 1x1 conv."""
    return input_epilogue(shape, cfg, precision) and (shape.R, shape.S) == (1, 1)


def input_epilogue(shape: ConvShape, cfg: KernelConfig, precision: str = "fp32") -> bool:
    """Whether the kernel for (shape, cfg) takes IN_ARGS: FP32, no cluster, stride 1 and an output the size of
    its input (each input pixel then lies in exactly one block's output tile: that block counts it)."""
    return (precision == "fp32" and not cfg.cluster and shape.stride == (1, 1)
            and (shape.P, shape.Q) == (shape.H, shape.W))


# A channel split that adds with atomics adds into this buffer instead of `output`: the runtime's zeroed FP32
# accumulator (one per backend, shared by the layers), which its epilogue launch reads into `output` and
# leaves zeroed again (snn_epilogue's `clear`), so no memset step is needed.
ACCUMULATOR = "accumulator"


# Every kernel emitted here waits for its stream predecessor in-kernel (templates: griddepcontrol.wait before
# its first dependent access), so the runtime may launch it as a programmatic dependent (sm_90+): its launch
# and prologue overlap the previous kernel's tail. The manifest marks such launches ("pdl"); a cubin built
# before the wait existed lacks the mark and is launched plainly.
PDL = True


def _kernel(name: str, src: str, g: dict, batch: int, block: list[int], precision: str = "fp32") -> EmittedKernel:
    """One launch that applies the conv's epilogue itself (a cluster's split too: its grid's clusters are
    compiled in, __cluster_dims__); a channel split that adds with atomics adds into the runtime's
    accumulator instead of the output, and the epilogue is left to the runtime (epilogue=False)."""
    split = g["TILES_C"] > 1 and not g["CLUSTER"]
    args = ([ACCUMULATOR if a == "output" and split else a for a in CONV_ARGS] + (IN_ARGS if g["IN_EPI"] else [])
            + (IN_RES_ARGS if g["IN_RES"] else []) + (ZERO_ARGS if g["IN_EPI"] else []) + (OUT_ARGS if g["OUT_LD"] else [])
            + (IN_BN_ARGS if g["IN_BN"] else []))
    steps = [{"op": "launch", "function": name,
              "grid": [g["TILES_H"] * g["TILES_W"], g["TILES_N"] * g["TILES_C"], batch],
              "block": block, "smem": g["SMEM"], "args": args, "pdl": PDL}]
    return EmittedKernel(name, src, steps, {}, "CRSN", epilogue=not split, precision=precision)


# snn_epilogue also zeroes a second range it is given (`zero`, `zero_total`): the buffer the consumers of moved
# epilogues (IN_ARGS) read, cleared in a launch the graph makes anyway. The manifest marks it ("zero_range").
EPILOGUE_ZERO_RANGE = True
# and reads an input whose pixels lie `in_ld` elements apart (the first channels of a concat chain's buffer,
# runtime/lower.py) where it would otherwise need a dense copy. The manifest marks it ("in_ld").
EPILOGUE_IN_LD = True


# The 16-bit types' pieces per precision (epilogue16.cu.j2, maxpool.cu.j2): header, pair type, pair -> float2,
# two floats -> pair, one float -> both halves of a pair
_SIXTEEN = {"bf16": ("cuda_bf16.h", "__nv_bfloat162", "__bfloat1622float2", "__floats2bfloat162_rn",
                     "__float2bfloat162_rn"),
            "fp16": ("cuda_fp16.h", "__half2", "__half22float2", "__floats2half2_rn", "__float2half2_rn")}
# values a thread of the 16-bit epilogue handles at once (16 bytes); the manifest's "vector" tells the runtime
EPILOGUE16_VECTOR = 8


def _function(kernel: str, precision: str) -> str:
    """A bundle kernel's name (and its source's) in `precision`: snn_<kernel>, snn_<kernel>_bf16, ..."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return f"snn_{kernel}" if precision == "fp32" else f"snn_{kernel}_{precision}"


def epilogue_function(precision: str = "fp32") -> str:
    """The epilogue kernel's name (and its source's): snn_epilogue, snn_epilogue_bf16, snn_epilogue_fp16."""
    return _function("epilogue", precision)


def render_epilogue(precision: str = "fp32") -> tuple[str, str]:
    """(name, source) of the epilogue kernel for `precision`'s activations (PRECISIONS): the same launch
    arguments in every precision, the activations, scale and shift of that type (the zero range stays FP32)."""
    name = epilogue_function(precision)
    if precision == "fp32":
        return name, _env().get_template("epilogue.cu.j2").render(THREADS=256)
    header, dt2, to_f2, from_f2, _ = _SIXTEEN[precision]
    return name, _env().get_template("epilogue16.cu.j2").render(
        NAME=name, DT=PRECISIONS[precision], DT2=dt2, HEADER=header, TO_F2=to_f2, FROM_F2=from_f2,
        VEC=EPILOGUE16_VECTOR)


# The max-pool kernel (maxpool.cu.j2): one a bundle, 16 bytes of channels a thread
MAXPOOL_THREADS = 256
MAXPOOL_VECTOR = {"fp32": 4, "bf16": 8, "fp16": 8}
# precisions whose max-pool kernel takes its producer's shift + ReLU and counts its zeros (shift, relu, zeros)
MAXPOOL_EPILOGUE = {"fp32": True, "bf16": False, "fp16": False}


# precisions whose pool source also defines the average pool (batchnorm + ReLU applied as it reads, zeros counted)
AVGPOOL = {"fp32": True, "bf16": False, "fp16": False}


def maxpool_function(precision: str = "fp32") -> str:
    return _function("maxpool", precision)


def avgpool_function(precision: str = "fp32") -> str | None:
    return _function("avgpool", precision) if AVGPOOL[precision] else None


def render_maxpool(precision: str = "fp32") -> tuple[str, str]:
    """(name, source) of the bundle's pool kernels for `precision`'s activations: the max pool (NHWC, any window,
    stride, padding, batch: the sizes are launch arguments, runtime/kernels.py) and, where AVGPOOL, the average
    pool beside it (avgpool_function)."""
    name = maxpool_function(precision)
    header, dt2, _, _, from_f = _SIXTEEN.get(precision, (None,) * 5)
    return name, _env().get_template("maxpool.cu.j2").render(
        NAME=name, DT=PRECISIONS[precision], DT2=dt2, HEADER=header, FROM_F=from_f,
        VEC=MAXPOOL_VECTOR[precision], THREADS=MAXPOOL_THREADS, EPI=MAXPOOL_EPILOGUE[precision],
        AVG=avgpool_function(precision))


def render_selector() -> tuple[str, str]:
    """The device-side dense/sparse selector (runtime/graph.py); EPS must be runtime/dispatch.py's _EPS
    (a test checks it; codegen does not import the runtime)."""
    return "snn_select", _env().get_template("selector.cu.j2").render(EPS=repr(1e-9))


# ---------------------------------------------------------------- warp-tiled blocks

def ws_geometry(shape: ConvShape, batch: int, cfg: KernelConfig) -> dict:
    """Geometry of the warp-tiled kernel (cfg.wh x cfg.ww warps, each a th x tw register tile of 32 x nt
    channels, one (wh*th) x (ww*tw) block tile); resources from kernel_rules.ws_params."""
    ih, iw = in_tile(shape, cfg)
    nb = cfg.threads * cfg.nt
    rs = shape.R * shape.S
    r = ws_params(shape, cfg)
    if r["KC"] == 0:
        raise ValueError(f"{cfg.tag()}: no channel chunk of tc {cfg.tc} fits {WS_SMEM_LIMIT} bytes of shared memory")
    if not r["REGS_OK"]:
        raise ValueError(f"{cfg.tag()}: {cfg.block_threads()} threads a block leave {r['REG_CAP']} registers, fewer "
                         f"than its tile needs")
    g = cfg.grid(shape, batch)
    wrows_step = r["NTHR"] // (nb // 4)
    xiter = -(-(r["BIH"] * r["BIW"] * r["KC"] // 4) // r["NTHR"])
    return dict(B=batch, C=shape.C, N=shape.N, H=shape.H, W=shape.W, P=shape.P, Q=shape.Q, R=shape.R, S=shape.S,
                SH=shape.stride[0], SW=shape.stride[1], PH=shape.padding[0], PW=shape.padding[1], TH=cfg.th, TW=cfg.tw,
                WH=cfg.wh, WW=cfg.ww, WARPS=cfg.wh * cfg.ww, BTH=cfg.th * cfg.wh, BTW=cfg.tw * cfg.ww, IW=iw,
                NPIX=ih * iw, NWORDS=math.ceil(ih * iw / 32), TC=cfg.tc, THREADS=cfg.threads, NT=cfg.nt, NB=nb,
                VW=store_vector(shape.N, cfg),
                XITER=xiter, WITER=-(-(r["KC"] * rs) // wrows_step), WROWS_STEP=wrows_step,
                XFAST=r["KC"] % 4 == 0 and shape.C % 4 == 0 and xiter <= 4, TILES_H=g["tiles_h"],
                TILES_W=g["tiles_w"], TILES_C=g["tiles_c"], TILES_N=g["tiles_n"], DT="float",
                IN_EPI=input_epilogue(shape, cfg), IN_RES=input_residual(shape, cfg), OUT_LD=output_pitch(shape, cfg),
                IN_BN=cfg.in_bn, **cluster_geometry(shape, cfg),
                **{k: r[k] for k in ("MINB", "KC", "XSTR", "XS_FLOATS", "WS_FLOATS", "SMEM", "BIH", "BIW")})


def render_sparse_ws(shape: ConvShape, batch: int, config: KernelConfig) -> EmittedKernel:
    """The warp-tiled sparse convolution (sparse_conv_ws.cu.j2): a block of config.wh x config.ww warps,
    each with the th x tw register tile of `config`, shares one staged input tile and one copy of the
    weights per chunk of KC channels (two stages: the next chunk is copied while this one is used), so a
    block reads its weights once for wh*ww register tiles; each warp builds a channel's pixel bitmask with
    ballots."""
    check_config(shape, config)
    if not config.warp_tiled or not ws_eligible(shape, config):
        raise ValueError(f"{config.tag()}: the warp-tiled kernel needs wh*ww > 1, 32 threads, nt 1/2/4/8, "
                         f"N % 4 == 0 and a warp in-tile of <= {WS_MAX_WORDS * 32} pixels")
    g = ws_geometry(shape, batch, config)
    if g["SMEM"] > WS_SMEM_LIMIT:
        raise ValueError(f"{config.tag()}: {g['SMEM']} bytes of shared memory > {WS_SMEM_LIMIT}")
    name = config.name(shape, batch)
    taps = tile_taps(shape, config)
    iw, xstr, biw = g["IW"], g["XSTR"], g["BIW"]
    pixels = [(p, ((p // iw) * biw + p % iw) * xstr, p // 32, 1 << (p % 32), lst) for p, lst in enumerate(taps) if lst]
    src = _env().get_template("sparse_conv_ws.cu.j2").render(name=name, g=g, pixels=pixels, shape_tag=shape.tag(),
                                                              cfg_tag=config.tag())
    return _kernel(name, src, g, batch, [config.threads, g["WARPS"], 1])
