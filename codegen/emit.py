"""Render CUDA sources from the jinja2 templates in codegen/templates/.

Three kernel families:
- `render_sparse`: the sparse convolution (dense NHWC input compacted in shared memory inside the
  conv kernel itself: no separate conversion pass, no memset when one block owns all of C); configs with
  wh*ww > 1 go to `render_sparse_ws`, the warp-tiled variant (several register tiles a block).
- `render_coo`: the standalone dense -> COO* conversion (Algorithm 1), halo duplicated per tile.
- `render_epilogue`: scale/shift (+ residual) + ReLU + zero counter, the dense/sparse selector.

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
from .kernel_rules import (DYNAMIC_SMEM_LIMIT, GROUP_MAX_THREADS, GROUP_REG_MARGIN, MAX_GROUPS,  # noqa: F401
                           REG_MARGIN, STATIC_SMEM_LIMIT, WEIGHT_RING_DEPTH, WEIGHT_RING_LIMIT, WS_MAX_WORDS,
                           WS_SMEM_LIMIT, check_groups, chunk_channels, group_budget, group_layout, min_blocks,
                           register_cap, tile_smem_bytes, weight_ring_depth, ws_eligible, ws_params)
from .spec import ConvShape

TEMPLATES = Path(__file__).parent / "templates"
LOOPS = ("mask", "switch")


@dataclass(frozen=True)
class EmittedKernel:
    name: str
    source: str
    steps: list = field(hash=False)
    workspace: dict = field(hash=False)
    weight_layout: str = "CRSN"


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


def default_groups(shape: ConvShape, batch: int, cfg: KernelConfig, max_threads: int = 512) -> int:
    """Proposed G for an in-block channel split: the smallest G with G * tc >= C (one block covers all
    of C: no memset, no global atomics), if the block stays <= max_threads threads, its register cap
    at one block per SM covers accumulators + taps + GROUP_REG_MARGIN, and shared memory fits;
    otherwise 1. Pure function of its arguments (batch is accepted for a later rule; not used)."""
    del batch
    need = -(-shape.C // cfg.tc)
    if need <= 1 or need > MAX_GROUPS or cfg.threads * need > min(max_threads, GROUP_MAX_THREADS):
        return 1
    regs = cfg.th * cfg.tw * cfg.nt + shape.R * shape.S * cfg.nt + GROUP_REG_MARGIN
    if register_cap(cfg.threads * need, 1) < min(regs, 255):
        return 1
    try:
        check_groups(shape, cfg, need)
    except ValueError:
        return 1
    return need


def geometry(shape: ConvShape, batch: int, cfg: KernelConfig, groups: int = 1) -> dict:
    ih, iw = in_tile(shape, cfg)
    g = cfg.grid(shape, batch)
    kc = chunk_channels(shape, cfg, group_budget(groups))
    npix = ih * iw
    geo = dict(B=batch, C=shape.C, N=shape.N, H=shape.H, W=shape.W, P=shape.P, Q=shape.Q,
               R=shape.R, S=shape.S, SH=shape.stride[0], SW=shape.stride[1],
               PH=shape.padding[0], PW=shape.padding[1], TH=cfg.th, TW=cfg.tw, TC=cfg.tc,
               THREADS=cfg.threads, NT=cfg.nt, NB=cfg.threads * cfg.nt, KC=kc, IH=ih, IW=iw,
               NPIX=npix, NWORDS=math.ceil(npix / 32), WD=weight_ring_depth(shape, cfg),
               MINB=min_blocks(shape, cfg, groups), TILES_H=g["tiles_h"], TILES_W=g["tiles_w"],
               TILES_C=g["tiles_c"], TILES_N=g["tiles_n"], G=groups, VEC=False, SMEM=0)
    if groups > 1:  # a block covers G * tc channels; group g (threadIdx.y) the g-th tc of them
        geo.update(group_layout(shape, cfg, groups))
        geo["TILES_C"] = math.ceil(shape.C / (groups * cfg.tc))
    return geo


def check_config(shape: ConvShape, cfg: KernelConfig) -> None:
    if cfg.threads % 32 or not 32 <= cfg.block_threads() <= 1024 or min(cfg.wh, cfg.ww) < 1:
        raise ValueError(f"{cfg.tag()}: threads must be a multiple of 32 in [32, 1024]")
    if min(cfg.th, cfg.tw, cfg.tc, cfg.nt) < 1:
        raise ValueError(f"{cfg.tag()}: tile sizes must be >= 1")
    if cfg.th > shape.P or cfg.tw > shape.Q:
        raise ValueError(f"{cfg.tag()}: tile larger than the {shape.P}x{shape.Q} output")


# ---------------------------------------------------------------- renderers


def vec_eligible(shape: ConvShape, cfg: KernelConfig, groups: int = 1) -> bool:
    """Thread-contiguous output channels (8/16-byte copies, loads and stores per tap/pixel): nt 2, 4 or 8,
    N a multiple of nt (a thread's channels are all in range or all out), one warp-group."""
    return groups == 1 and cfg.nt in (2, 4, 8) and shape.N % cfg.nt == 0


def used_pixels(shape: ConvShape, cfg: KernelConfig) -> int:
    """In-tile pixels that feed at least one output of the register tile (one register each when hoisted)."""
    return sum(1 for lst in tile_taps(shape, cfg) if lst)


HOIST_REGS_MAX = 160  # accumulators + one channel's taps + hoisted values: 7x7-tile kernels past it spilled


def hoist_default(shape: ConvShape, batch: int, cfg: KernelConfig, loop: str = "mask") -> bool:
    """Hoisted value loads by default: at batch 1 (latency-bound: 0.96x the time over 36 measured cells,
    1.01x at batch 32, docs/results/kernels/run10-inner), with the mask loop, where the values' registers
    fit beside the accumulators and taps."""
    need = used_pixels(shape, cfg) + cfg.th * cfg.tw * cfg.nt + shape.R * shape.S * cfg.nt
    return batch == 1 and loop == "mask" and need <= HOIST_REGS_MAX


def kernel_name(shape: ConvShape, batch: int, cfg: KernelConfig, loop: str = "mask", groups: int = 1,
                vec: bool | None = None) -> str:
    base = cfg.name(shape, batch)
    if vec is False and vec_eligible(shape, cfg, groups):
        base = f"{base}_s"  # strided channels where the default is contiguous
    if groups > 1:
        base = f"{base}_g{groups}"
    return base if loop == "mask" else f"{base}_{loop}"


def render_sparse(shape: ConvShape, batch: int, config: KernelConfig, *, loop: str = "mask",
                  groups: int = 1, vec: bool | None = None, hoist: bool | None = None,
                  wd: int | None = None, kc: int | None = None) -> EmittedKernel:
    """The fused sparse convolution for one (shape, batch, config).

    loop: how a channel's non-zero pixels are visited. "mask": an unrolled pass over all in-tile
    pixels with a warp-uniform bit test each; "switch": find-first-set over the mask and a jump table
    of per-pixel bodies (cost only per non-zero, more per visit). Both keep all indices static.
    groups: G warp-groups per block (block [threads, G, 1]) split the block's G * tc channels, each
    walking its tc with its own tile, masks and weight ring (dynamic shared memory), then reduce
    through shared memory; no memset and no global atomics when G * tc >= C. G = 1 is the classic
    kernel (same source as before groups existed).
    vec: thread t owns output channels n0 + t*nt .. + nt - 1 (adjacent) instead of n0 + t + k*threads:
    one 8/16-byte cp.async and one vector shared load per tap, one vector store or sm_90 vector atomic
    per pixel. None (the default) = wherever vec_eligible (measured 0.93x the time over 488 configs,
    docs/results/kernels/run9-vec); False keeps the strided mapping (name suffix "_s").
    hoist: load every used pixel's value of a channel before its first bit test: the
    loads overlap instead of one shared-memory latency per non-zero pixel, at the cost of loading the
    zeros too. None (the default) = hoist_default; the non-default choice is suffixed "_h" / "_nh".
    wd, kc: weight ring depth and channels staged per chunk other than kernel_rules' (experiments; suffixed
    "_wdN" / "_kcN").
    """
    if config.warp_tiled:
        if loop != "mask" or groups != 1 or vec is False or wd is not None:
            raise ValueError(f"{config.tag()}: the warp-tiled kernel has the mask loop, vector channels, no groups, "
                             "no ring")
        return render_sparse_ws(shape, batch, config, kc=kc, hoist=bool(hoist))
    if loop not in LOOPS:
        raise ValueError(f"loop must be one of {LOOPS}")
    check_config(shape, config)
    check_groups(shape, config, groups)
    if vec is None:
        vec = vec_eligible(shape, config, groups)
    if vec and not vec_eligible(shape, config, groups):
        raise ValueError(f"{config.tag()}: vec needs nt 2, 4 or 8, N % nt == 0 and groups 1")
    g = geometry(shape, batch, config, groups)
    g["VEC"] = vec
    tuned = ""  # WD / KC other than kernel_rules': experiments (tools/check_kernels.py), named by suffix
    if wd is not None and wd != g["WD"]:
        if groups > 1 or not 1 <= wd <= config.tc:
            raise ValueError(f"{config.tag()}: wd must be in [1, tc] and groups 1")
        g["WD"], tuned = wd, tuned + f"_wd{wd}"
    if kc is not None and kc != g["KC"]:
        if groups > 1 or config.tc % kc:
            raise ValueError(f"{config.tag()}: kc must divide tc, groups 1")
        g["KC"], tuned = kc, tuned + f"_kc{kc}"
    if tuned:
        smem = tile_smem_bytes(g["NPIX"], g["KC"], g["NWORDS"], 4 * g["WD"] * g["R"] * g["S"] * g["NB"])
        if smem > STATIC_SMEM_LIMIT:
            raise ValueError(f"{config.tag()}{tuned}: {smem} bytes of static shared memory > {STATIC_SMEM_LIMIT}")
    default_hoist = groups == 1 and hoist_default(shape, batch, config, loop)  # G > 1: measured without
    if hoist is None:
        hoist = default_hoist
    if hoist and loop != "mask":
        raise ValueError("hoist applies to the mask loop only")
    # like vec: the default variant keeps the config's name (the build's contract), the other is suffixed
    name = (kernel_name(shape, batch, config, loop, groups, vec) + ("" if hoist == default_hoist else "_h" if hoist else "_nh")
            + tuned)
    taps = tile_taps(shape, config)
    pixels = [(p, p // 32, p % 32, 1 << (p % 32), lst) for p, lst in enumerate(taps) if lst]
    useful = [0] * g["NWORDS"]
    for _, word, bit, _, _ in pixels:
        useful[word] |= 1 << bit
    src = _env().get_template("sparse_conv.cu.j2").render(name=name, g=g, pixels=pixels, useful=useful, loop=loop, hoist=hoist,
                                                           shape_tag=shape.tag(), cfg_tag=config.tag())
    steps = []
    if g["TILES_C"] > 1:  # several blocks add into one output element
        steps.append({"op": "memset", "buffer": "output"})
    steps.append({"op": "launch", "function": name,
                  "grid": [g["TILES_H"] * g["TILES_W"], g["TILES_N"] * g["TILES_C"], batch],
                  "block": [config.threads, groups, 1], "smem": g["SMEM"], "args": ["input", "weight", "output"]})
    return EmittedKernel(name, src, steps, {}, "CRSN")


def coo_layout(shape: ConvShape, batch: int, config: KernelConfig) -> dict:
    """Sizes of the COO* buffers: one segment per (image, tile_h, tile_w, tile_c), dense worst case."""
    g = geometry(shape, batch, config)
    tiles = batch * g["TILES_H"] * g["TILES_W"] * g["TILES_C"]
    cap = g["NPIX"] * g["TC"]
    return {"tiles": tiles, "capacity": cap,
            "workspace": {"coo_count": 4 * tiles, "coo_vals": 4 * tiles * cap, "coo_pos": 4 * tiles * cap}}


def render_coo(shape: ConvShape, batch: int, config: KernelConfig, threads: int = 256) -> EmittedKernel:
    """Standalone dense NHWC -> COO* conversion (Algorithm 1) for the tiling of `config`.

    Tile t = ((b*TILES_H + th)*TILES_W + tw)*TILES_C + tc covers the in-tile (halo included) of one
    output tile and TC channels. coo_count[t] = non-zeros; coo_vals/coo_pos[t*CAP + j] hold them in
    (pixel, channel) order, pos = (iy*IW + ix)*TC + c_local. Written without atomics: a block owns a tile.
    """
    check_config(shape, config)
    g = geometry(shape, batch, config)
    lay = coo_layout(shape, batch, config)
    name = f"coo_{shape.tag()}_th{config.th}tw{config.tw}tc{config.tc}_b{batch}"
    src = _env().get_template("coo_convert.cu.j2").render(name=name, g=g, CAP=lay["capacity"], THREADS=threads)
    steps = [{"op": "launch", "function": name, "grid": [g["TILES_H"] * g["TILES_W"], g["TILES_C"], batch],
              "block": [threads, 1, 1], "smem": 0, "args": ["input", "coo_count", "coo_vals", "coo_pos"]}]
    return EmittedKernel(name, src, steps, lay["workspace"], "none")


def render_epilogue() -> tuple[str, str]:
    return "snn_epilogue", _env().get_template("epilogue.cu.j2").render(THREADS=256)


def render_selector() -> tuple[str, str]:
    """The device-side dense/sparse selector (runtime/graph.py); EPS must be runtime/dispatch.py's _EPS
    (a test checks it; codegen does not import the runtime)."""
    return "snn_select", _env().get_template("selector.cu.j2").render(EPS=repr(1e-9))


def example_configs(shape: ConvShape) -> list[KernelConfig]:
    """Two hand-picked configs per shape for tests and GPU checks (the planner picks for real).

    Registers: th*tw*nt accumulators + R*S*nt weights stay well under 255. The first config splits C
    into tiles of 32 (atomics); the second keeps all of C in one block where C <= 256 (direct store).
    """
    rs = shape.R * shape.S
    if rs >= 49:
        tiles = [(4, 4, 1), (4, 8, 1)]
    elif rs > 1:
        tiles = [(4, 8, 2), (7, 7, 2)]
    else:
        tiles = [(4, 4, 4), (7, 7, 2)]
    out = []
    for i, (th, tw, nt) in enumerate(tiles):
        th, tw = min(th, shape.P), min(tw, shape.Q)
        threads = max(32, min(128, (shape.N // nt) // 32 * 32))
        tc = min(shape.C, 32) if i == 0 else (shape.C if shape.C <= 256 else 64)
        out.append(KernelConfig(th, tw, tc, threads, nt))
    return out


# ---------------------------------------------------------------- warp-tiled blocks (v9)

def ws_geometry(shape: ConvShape, batch: int, cfg: KernelConfig, kc: int | None = None, minb: int | None = None,
                hoist: bool = False) -> dict:
    """Geometry of the warp-tiled kernel (cfg.wh x cfg.ww warps, each a th x tw register tile of 32 x nt
    channels, one (wh*th) x (ww*tw) block tile); resources from kernel_rules.ws_params."""
    ih, iw = in_tile(shape, cfg)
    nb = cfg.threads * cfg.nt
    rs = shape.R * shape.S
    r = ws_params(shape, cfg, kc, minb, used_pixels(shape, cfg) if hoist else 0)
    if r["KC"] == 0:
        raise ValueError(f"{cfg.tag()}: no channel chunk of tc {cfg.tc} fits {WS_SMEM_LIMIT} bytes of shared memory")
    if not r["REGS_OK"] and minb is None:
        raise ValueError(f"{cfg.tag()}: {cfg.block_threads()} threads a block leave {r['REG_CAP']} registers, fewer "
                         f"than its tile needs")
    g = cfg.grid(shape, batch)
    wrows_step = r["NTHR"] // (nb // 4)
    xiter = -(-(r["BIH"] * r["BIW"] * r["KC"] // 4) // r["NTHR"])
    return dict(B=batch, C=shape.C, N=shape.N, H=shape.H, W=shape.W, P=shape.P, Q=shape.Q, R=shape.R, S=shape.S,
                SH=shape.stride[0], SW=shape.stride[1], PH=shape.padding[0], PW=shape.padding[1], TH=cfg.th, TW=cfg.tw,
                WH=cfg.wh, WW=cfg.ww, WARPS=cfg.wh * cfg.ww, BTH=cfg.th * cfg.wh, BTW=cfg.tw * cfg.ww, IW=iw,
                NPIX=ih * iw, NWORDS=math.ceil(ih * iw / 32), TC=cfg.tc, THREADS=cfg.threads, NT=cfg.nt, NB=nb,
                XITER=xiter, WITER=-(-(r["KC"] * rs) // wrows_step), WROWS_STEP=wrows_step,
                XFAST=r["KC"] % 4 == 0 and shape.C % 4 == 0 and xiter <= 4, TILES_H=g["tiles_h"],
                TILES_W=g["tiles_w"], TILES_C=g["tiles_c"], TILES_N=g["tiles_n"],
                **{k: r[k] for k in ("MINB", "KC", "XSTR", "XS_FLOATS", "WS_FLOATS", "SMEM", "BIH", "BIW")})


def render_sparse_ws(shape: ConvShape, batch: int, config: KernelConfig, *, kc: int | None = None,
                     hoist: bool = False, minb: int | None = None, variant: str = "") -> EmittedKernel:
    """The warp-tiled sparse convolution (sparse_conv_ws.cu.j2): a block of config.wh x config.ww warps,
    each with the th x tw register tile of `config`, shares one staged input tile and one copy of the
    weights per chunk of KC channels (two stages: the next chunk is copied while this one is used), so a
    block reads its weights once for wh*ww register tiles; each warp builds a channel's pixel bitmask with
    ballots. kc, hoist, minb, variant: experiments (tools/check_kernels.py), named by suffix "_k{kc}", "_h",
    "_m{minb}", "_v{variant}"; variant is the channel loop's: "pre<k>" / "cpre<k>" load each pixel's value k pixels
    ahead of its test (cpre: predicated on its bit), "nz" jumps once per non-zero pixel (run22-ws-inner)."""
    check_config(shape, config)
    if not config.warp_tiled or not ws_eligible(shape, config):
        raise ValueError(f"{config.tag()}: the warp-tiled kernel needs wh*ww > 1, 32 threads, nt 1/2/4/8, "
                         f"N % 4 == 0 and a warp in-tile of <= {WS_MAX_WORDS * 32} pixels")
    g = ws_geometry(shape, batch, config, kc, minb, hoist)
    if config.tc % g["KC"]:
        raise ValueError(f"{config.tag()}: kc {g['KC']} must divide tc")
    if g["SMEM"] > WS_SMEM_LIMIT:
        raise ValueError(f"{config.tag()}: {g['SMEM']} bytes of shared memory > {WS_SMEM_LIMIT}")
    name = (config.name(shape, batch) + (f"_k{kc}" if kc is not None else "") + ("_h" if hoist else "")
            + (f"_m{minb}" if minb is not None else "") + (f"_v{variant}" if variant else ""))
    taps = tile_taps(shape, config)
    iw, xstr, biw = g["IW"], g["XSTR"], g["BIW"]
    pixels = [(p, ((p // iw) * biw + p % iw) * xstr, p // 32, 1 << (p % 32), lst) for p, lst in enumerate(taps) if lst]
    src = _env().get_template("sparse_conv_ws.cu.j2").render(name=name, g=g, pixels=pixels, hoist=hoist,
                                                              variant=variant, shape_tag=shape.tag(),
                                                              cfg_tag=config.tag())
    steps = []
    if g["TILES_C"] > 1:
        steps.append({"op": "memset", "buffer": "output"})
    steps.append({"op": "launch", "function": name,
                  "grid": [g["TILES_H"] * g["TILES_W"], g["TILES_N"] * g["TILES_C"], batch],
                  "block": [config.threads, g["WARPS"], 1], "smem": g["SMEM"], "args": ["input", "weight", "output"]})
    return EmittedKernel(name, src, steps, {}, "CRSN")
