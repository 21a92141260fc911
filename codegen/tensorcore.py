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

from .dense import ksum_bytes
from .spec import ConvShape

BK = 32                # channels a pipeline chunk; C % BK == 0 keeps a chunk inside one filter tap
THREADS = 128          # 2 x 2 warps
CLUSTER_MAX = 8        # the portable cluster size
# at batch 8 cuDNN's own tiles fill the GPU and this kernel took 1.5-3x its time on every ResNet-152 layer
MAX_BATCH = 4
SMEM_MAX = 200 * 1024  # a block's pipeline with every chunk of its K range in flight, where it fits
PIPELINE = 3           # stages of the candidates' pipelines: measured best at batch 1 (deeper ones wait longer)
# the kernel's launch arguments, in order (runtime/kernels.py fills them)
ARGS = ["input", "weight", "output", "bias", "residual", "relu"]


@dataclass(frozen=True, order=True)
class TcConfig:
    bm: int        # pixels a block tile (32 or 64)
    bn: int        # output channels a block tile (32 or 64)
    ks: int        # blocks of a cluster splitting the K range (1: no cluster)
    stages: int    # cp.async pipeline depth
    bk: int = BK   # channels a chunk (C % bk == 0)

    def tag(self) -> str:
        return f"m{self.bm}n{self.bn}k{self.ks}s{self.stages}" + (f"c{self.bk}" if self.bk != BK else "")


def eligible(shape: ConvShape, groups: int = 1) -> bool:
    """16-byte copies of BK-channel chunks and 32-wide output tiles."""
    return groups == 1 and shape.C % BK == 0 and shape.N % 32 == 0


def chunks(shape: ConvShape, bk: int = BK) -> int:
    return shape.R * shape.S * shape.C // bk


def smem_bytes(cfg: TcConfig) -> int:
    """The pipeline's stages, then a K split's received partial sums (KS x SHARE float4s of the tile), which other
    blocks push while this one may still be in its main loop."""
    pipeline = cfg.stages * (cfg.bm + cfg.bn) * (cfg.bk + 8) * 2
    return pipeline + (ksum_bytes(cfg.bm, cfg.bn, cfg.ks) if cfg.ks > 1 else 0)


def chunk_widths(shape: ConvShape) -> tuple[int, ...]:
    """Chunk widths (channels) the shape takes: 64 halves the pipeline's steps and barriers where C allows."""
    return (BK, 2 * BK) if shape.C % (2 * BK) == 0 else (BK,)


def configs(shape: ConvShape) -> list[TcConfig]:
    """Every config the kernel supports for this shape: tile, chunk width, K split, and a pipeline of
    PIPELINE stages or every chunk of the block's K range in flight at once (where shared memory allows)."""
    out = []
    for bm in (32, 64):
        for bn in (32, 64):
            if shape.N % bn:
                continue
            for bk in chunk_widths(shape):
                nk = chunks(shape, bk)
                per_stage = (bm + bn) * (bk + 8) * 2
                for ks in range(1, min(CLUSTER_MAX, nk) + 1):
                    per_block = math.ceil(nk / ks)
                    for stages in sorted({min(PIPELINE, per_block), min(per_block, SMEM_MAX // per_stage)}):
                        out.append(TcConfig(bm, bn, ks, max(2, stages), bk))
    return sorted(set(out))


def grid(shape: ConvShape, batch: int, cfg: TcConfig) -> list[int]:
    m = batch * shape.P * shape.Q
    return [math.ceil(m / cfg.bm), shape.N // cfg.bn, cfg.ks]


def candidates(shape: ConvShape, batch: int, sms: int = 132) -> list[TcConfig]:
    """The configs the runtime measures against cuDNN (runtime/tensorcore.py): the widest chunk the shape takes
    and a PIPELINE-stage pipeline; per tile shape the largest K split whose blocks fit one wave of one block an
    SM (the batch-1 kernel is latency-bound: fewer chunks a block, and no second wave), and for 64 x 64 tiles
    the two splits below it. Measured on the H100 at batch 1 in ResNet-152's BF16 graph, summed over the network
    these came within 1.005x of the best of the 30-46 configs measured a layer; per layer their best took
    0.83-1.04x the time of the earlier candidates' (32-channel chunks, every chunk in flight) (docs/kernels.md)."""
    bk = max(chunk_widths(shape))
    nk = chunks(shape, bk)
    out = []
    for bm, bn in ((64, 64), (32, 64), (64, 32), (32, 32)):
        if shape.N % bn:
            continue
        splits = range(1, min(CLUSTER_MAX, nk) + 1)
        fit = [ks for ks in splits if math.ceil(batch * shape.P * shape.Q / bm) * (shape.N // bn) * ks <= sms]
        best = max(fit, default=1)
        for ks in ([best, best - 1, best - 2] if (bm, bn) == (64, 64) else [best]):
            if ks >= 1:
                out.append(TcConfig(bm, bn, ks, max(2, min(PIPELINE, math.ceil(nk / ks))), bk))
    return out


def name(shape: ConvShape, batch: int, cfg: TcConfig, precision: str) -> str:
    return f"tconv_{shape.tag()}_{cfg.tag()}_b{batch}_{precision}"


def render(shape: ConvShape, batch: int, cfg: TcConfig, precision: str) -> tuple[str, str]:
    """(function name, CUDA source)."""
    from .emit import _env
    if precision not in ("bf16", "fp16"):
        raise ValueError(f"the tensor-core kernel is 16-bit only, got {precision!r}")
    if not eligible(shape) or shape.C % cfg.bk:
        raise ValueError(f"{shape.tag()}: the tensor-core kernel needs C % {cfg.bk} == 0 and N % 32 == 0")
    fn = name(shape, batch, cfg, precision)
    g = {"C": shape.C, "N": shape.N, "H": shape.H, "W": shape.W, "P": shape.P, "Q": shape.Q, "R": shape.R,
         "S": shape.S, "SH": shape.stride[0], "SW": shape.stride[1], "PH": shape.padding[0],
         "PW": shape.padding[1], "M": batch * shape.P * shape.Q, "K": shape.R * shape.S * shape.C,
         "BM": cfg.bm, "BN": cfg.bn, "BK": cfg.bk, "KS": cfg.ks, "STAGES": cfg.stages, "B": batch, "PREC": precision}
    src = _env().get_template("conv16_mma.cu.j2").render(name=fn, shape_tag=shape.tag(), g=g)
    return fn, src
