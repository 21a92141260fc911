"""The 16-bit dense convolution on the tensor cores (templates/conv16_mma.cu.j2): config, eligibility, render.

An implicit GEMM over (pixels of the batch) x (output channels) x (R*S*C), 2 x 2 warps of mma.sync m16n8k16
with FP32 sums. At small batches cuDNN's kernels leave most SMs idle on the 14x14 and 7x7 layers (16 blocks
on 132 SMs for ResNet's 3x3 256 @14 at batch 1); this kernel splits the K range over the KS blocks of a
thread-block cluster and sums the partial tiles in distributed shared memory, so one launch fills the GPU
and still applies bias, residual and ReLU in its store.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .spec import ConvShape

BK = 32                # channels a pipeline chunk; C % BK == 0 keeps a chunk inside one filter tap
THREADS = 128          # 2 x 2 warps
CLUSTER_MAX = 8        # the portable cluster size
# at batch 8 cuDNN's own tiles fill the GPU and this kernel took 1.5-3x its time on every ResNet-152 layer
MAX_BATCH = 4
SMEM_MAX = 200 * 1024  # a block's pipeline: every chunk of its K range in flight at once where it fits
# the kernel's launch arguments, in order (runtime/kernels.py fills them)
ARGS = ["input", "weight", "output", "bias", "residual", "relu"]


@dataclass(frozen=True, order=True)
class TcConfig:
    bm: int        # pixels a block tile (32 or 64)
    bn: int        # output channels a block tile (32 or 64)
    ks: int        # blocks of a cluster splitting the K range (1: no cluster)
    stages: int    # cp.async pipeline depth

    def tag(self) -> str:
        return f"m{self.bm}n{self.bn}k{self.ks}s{self.stages}"


def eligible(shape: ConvShape, groups: int = 1) -> bool:
    """16-byte copies of BK-channel chunks and 32-wide output tiles."""
    return groups == 1 and shape.C % BK == 0 and shape.N % 32 == 0


def chunks(shape: ConvShape) -> int:
    return shape.R * shape.S * shape.C // BK


def smem_bytes(cfg: TcConfig) -> int:
    pipeline = cfg.stages * (cfg.bm + cfg.bn) * (BK + 8) * 2
    reduce = cfg.bm * (cfg.bn + 4) * 4 if cfg.ks > 1 else 0
    return max(pipeline, reduce)


def configs(shape: ConvShape) -> list[TcConfig]:
    """Every config the kernel supports for this shape."""
    nk = chunks(shape)
    out = []
    for bm in (32, 64):
        for bn in (32, 64):
            if shape.N % bn:
                continue
            for ks in range(1, CLUSTER_MAX + 1):
                if ks > nk:
                    break
                # batch-1 blocks are latency-bound: all their chunks requested at once where shared memory allows
                per_stage = (bm + bn) * (BK + 8) * 2
                stages = max(2, min(math.ceil(nk / ks), SMEM_MAX // per_stage))
                out.append(TcConfig(bm, bn, ks, stages))
    return out


def grid(shape: ConvShape, batch: int, cfg: TcConfig) -> list[int]:
    m = batch * shape.P * shape.Q
    return [math.ceil(m / cfg.bm), shape.N // cfg.bn, cfg.ks]


def candidates(shape: ConvShape, batch: int, sms: int = 132) -> list[TcConfig]:
    """The configs the runtime measures against cuDNN (runtime/tensorcore.py): per tile shape the largest K split
    whose blocks fit one wave of one block an SM (the batch-1 kernel is latency-bound: fewer chunks a block, and
    no second wave), and for 64 x 64 tiles the two splits below it (measured best on ResNet-152's 3x3 convs).
    Measured on the H100 at batch 1 (docs/results/h100/sixteen-bit/tensorcore_layers.py), the best of these was
    within 1.01x of the best config of every ResNet-152 layer."""
    by_tile: dict[tuple[int, int], list[TcConfig]] = {}
    for c in configs(shape):
        by_tile.setdefault((c.bm, c.bn), []).append(c)
    out = []
    for tile in ((64, 64), (32, 64), (64, 32), (32, 32)):
        cs = by_tile.get(tile)
        if not cs:
            continue
        fit = [c for c in cs if math.prod(grid(shape, batch, c)) <= sms]
        best = max(fit, key=lambda c: c.ks) if fit else cs[0]
        out.append(best)
        if tile == (64, 64):
            out += [c for c in cs if c.ks in (best.ks - 1, best.ks - 2)]
    return out


def name(shape: ConvShape, batch: int, cfg: TcConfig, precision: str) -> str:
    return f"tconv_{shape.tag()}_{cfg.tag()}_b{batch}_{precision}"


def render(shape: ConvShape, batch: int, cfg: TcConfig, precision: str) -> tuple[str, str]:
    """(function name, CUDA source)."""
    from .emit import _env
    if precision not in ("bf16", "fp16"):
        raise ValueError(f"the tensor-core kernel is 16-bit only, got {precision!r}")
    if not eligible(shape):
        raise ValueError(f"{shape.tag()}: the tensor-core kernel needs C % {BK} == 0 and N % 32 == 0")
    fn = name(shape, batch, cfg, precision)
    g = {"C": shape.C, "N": shape.N, "H": shape.H, "W": shape.W, "P": shape.P, "Q": shape.Q, "R": shape.R,
         "S": shape.S, "SH": shape.stride[0], "SW": shape.stride[1], "PH": shape.padding[0],
         "PW": shape.padding[1], "M": batch * shape.P * shape.Q, "K": shape.R * shape.S * shape.C,
         "BM": cfg.bm, "BN": cfg.bn, "KS": cfg.ks, "STAGES": cfg.stages, "B": batch, "PREC": precision}
    src = _env().get_template("conv16_mma.cu.j2").render(name=fn, shape_tag=shape.tag(), g=g)
    return fn, src
