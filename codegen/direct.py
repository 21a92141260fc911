"""A direct FP32 convolution for the few-channel convs that read the image (templates/direct_conv.cu.j2).

A network's first conv reads the image (3 channels), not a ReLU's output, so it always runs dense, and the dense FP32
kernel (codegen/dense.py) cannot take it: its chunks are 32 channels of one filter tap. cuDNN's FP32 engines for
ResNet's 7x7 stem took 17-29 us at batch 1 on the H200, whichever its benchmark mode picked in that process, against
a 3.5 us FFMA floor. This kernel keeps a block's weights (C x R x S x 64 floats) and its input tile (halo included)
in shared memory; a thread holds a few pixels x 8 output channels in registers over every tap, then applies the
conv's epilogue (bias, residual, ReLU, the zero count) and stores NHWC. Where the conv reads the network's input it
reads it NCHW, as callers hold images (the manifest entry's "input_layout"): the pass then begins with this kernel,
not with a copy of the image to channels-last (2.8 us at batch 1). The build emits it for every such conv in an
FP32 bundle, per batch (the manifest's "direct"), and the runtime runs it instead of cuDNN (runtime/executor.py).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .spec import ConvShape

NB = 64              # output channels a block: 8 threads of 2 float4s, 32 channels apart
MAX_C = 4            # input channels it takes: an image's (more are the sparse and dense kernels')
SMEM_LIMIT = 48 * 1024   # static shared memory


# 2 pixels a thread in 4 x 8 tiles, 128 threads: 12.2 us for ResNet's 7x7 stem at batch 1 on the H200 (cuDNN 17.5).
# 8 pixels a thread in 8 x 8 tiles of 64 threads (fewer shared-memory loads a FMA, 243 registers) took 53 us
# (docs/results/fusion/h200/stem at dc30727, in git history).
@dataclass(frozen=True, order=True)
class DirectConfig:
    th: int = 4         # output rows a block
    tw: int = 8         # output columns a block
    threads: int = 128  # 8 channel groups x threads / 8 pixel groups: tw divides the groups, th * tw / groups pixels a thread
    nchw: bool = False  # reads its input NCHW: the network's image as the caller gives it, with no copy to NHWC first

    def tag(self) -> str:
        return f"t{self.th}x{self.tw}n{self.threads}" + ("nchw" if self.nchw else "")

    def name(self, shape: ConvShape, batch: int) -> str:
        return f"dirconv_{shape.tag()}_{self.tag()}_b{batch}"

    def to_dict(self) -> dict:
        return {"family": "direct", **asdict(self)}

    def groups(self) -> int:
        """Pixel groups (threads of one channel group)."""
        return self.threads // 8

    def pixels(self) -> int:
        """Output pixels a thread."""
        return self.th * self.tw // self.groups()


CONFIG = DirectConfig()


def in_tile(shape: ConvShape, cfg: DirectConfig = CONFIG) -> tuple[int, int]:
    """Input rows x cols a block stages: its output tile plus the halo."""
    return (cfg.th - 1) * shape.stride[0] + shape.R, (cfg.tw - 1) * shape.stride[1] + shape.S


def smem_bytes(shape: ConvShape, cfg: DirectConfig = CONFIG) -> int:
    ih, iw = in_tile(shape, cfg)
    return (shape.C * shape.R * shape.S * NB + shape.C * ih * iw) * 4


def eligible(shape: ConvShape, groups: int = 1) -> bool:
    """An image's few channels, whole 64-channel tiles, and a tile that fits static shared memory."""
    return groups == 1 and shape.C <= MAX_C and shape.N % NB == 0 and smem_bytes(shape) <= SMEM_LIMIT


def grid(shape: ConvShape, batch: int, cfg: DirectConfig = CONFIG) -> list[int]:
    return [math.ceil(shape.Q / cfg.tw), math.ceil(shape.P / cfg.th), batch * (shape.N // NB)]


def emitted(shape: ConvShape, batch: int, cfg: DirectConfig = CONFIG):
    """The kernel as the build bundles it (emit.EmittedKernel): one launch with the conv kernels' arguments
    (emit.CONV_ARGS) and CRSN weights, its epilogue fused."""
    from .emit import CONV_ARGS, PDL, EmittedKernel
    fn, src = render(shape, batch, cfg)
    steps = [{"op": "launch", "function": fn, "grid": grid(shape, batch, cfg), "block": [cfg.threads, 1, 1],
              "smem": 0, "args": list(CONV_ARGS), "pdl": PDL}]
    return EmittedKernel(fn, src, steps, {}, "CRSN", epilogue=True, input_layout="NCHW" if cfg.nchw else "NHWC")


def render(shape: ConvShape, batch: int, cfg: DirectConfig = CONFIG) -> tuple[str, str]:
    """(function name, CUDA source)."""
    from .emit import _env
    if not eligible(shape):
        raise ValueError(f"{shape.tag()}: the direct kernel takes C <= {MAX_C}, N % {NB} == 0 and "
                         f"{SMEM_LIMIT} bytes of shared memory ({smem_bytes(shape)} here)")
    if cfg.threads % 32 or cfg.groups() % cfg.tw or (cfg.th * cfg.tw) % cfg.groups():
        raise ValueError(f"{cfg.tag()}: the direct kernel's {cfg.groups()} pixel groups need whole warps, tw | groups "
                         f"and groups | th * tw")
    fn = cfg.name(shape, batch)
    ih, iw = in_tile(shape, cfg)
    g = {"B": batch, "C": shape.C, "N": shape.N, "H": shape.H, "W": shape.W, "P": shape.P, "Q": shape.Q,
         "R": shape.R, "S": shape.S, "SH": shape.stride[0], "SW": shape.stride[1], "PH": shape.padding[0],
         "PW": shape.padding[1], "TH": cfg.th, "TW": cfg.tw, "PX": cfg.pixels(), "IH": ih, "IW": iw, "NB": NB,
         "THREADS": cfg.threads, "GROUPS": cfg.groups(), "NCHW": cfg.nchw}
    return fn, _env().get_template("direct_conv.cu.j2").render(name=fn, shape_tag=shape.tag(), g=g)
