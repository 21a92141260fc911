"""The kernel configuration: a small frozen descriptor whose name says what it is."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .spec import ConvShape


@dataclass(frozen=True, order=True)
class KernelConfig:
    """Tile sizes and execution parameters of one sparse-convolution variant.

    th, tw   output rows x cols per thread block, held per thread in registers (for each of its
             output channels): the register tile of Listing 1
    tc       input channels per block (channel tile); partial sums across channel tiles meet in atomics
    threads  threads per block; thread t handles output channels n0 + t + k*threads, k < nt
    nt       output channels per thread (coarsening along N)
    wh, ww   warp-tiled kernel when wh*ww > 1 (sparse_conv_ws.cu.j2): a block of wh x ww warps of `threads`
             (32) threads, each with its own th x tw register tile of one (wh*th) x (ww*tw) block tile,
             sharing the block's staged input and weights
    cluster  a channel split (tc < C) whose tiles_c blocks form one thread-block cluster and sum their
             partial tiles in distributed shared memory, the epilogue fused (kernel_rules.cluster_split;
             sm_90+); otherwise a split adds into a zeroed output with atomics
    out_ld   the kernel stores its output at a pixel pitch it is given at launch (emit.OUT_ARGS), so that it can
             write its channels of a concat's buffer; planned for the layers whose output only concats read
             (spec.ConvLayer.into_concat). Other kernels index a dense output with N a compile-time constant.
    in_bn    the kernel reads its input at a pixel pitch and may apply a batchnorm's scale and shift and a ReLU to it
             as it stages it (emit.IN_BN_ARGS): planned for the layers whose input is such a pre-activation of a
             value others read (spec.ConvLayer.bn_input: DenseNet's norm1 over its block's concat buffer).
    """
    th: int
    tw: int
    tc: int
    threads: int
    nt: int = 1
    wh: int = 1
    ww: int = 1
    cluster: bool = False
    out_ld: bool = False
    in_bn: bool = False

    @property
    def warp_tiled(self) -> bool:
        return self.wh * self.ww > 1

    def tag(self) -> str:
        base = f"th{self.th}tw{self.tw}tc{self.tc}_t{self.threads}n{self.nt}"
        base = f"{base}_w{self.wh}x{self.ww}" if self.warp_tiled else base
        base = f"{base}_cl" if self.cluster else base
        base = f"{base}_ld" if self.out_ld else base
        return f"{base}_bn" if self.in_bn else base

    def name(self, shape: ConvShape, batch: int) -> str:
        """CUTLASS-style kernel name, e.g. sconv_r3s3_str1_pad1_c256n256_h14w14_th4tw7tc8_t128n2_b1."""
        return f"sconv_{shape.tag()}_{self.tag()}_b{batch}"

    def to_dict(self) -> dict:
        d = asdict(self)
        if not self.warp_tiled:  # the classic kernel's dict as it always was
            del d["wh"], d["ww"]
        if not self.cluster:
            del d["cluster"]
        for flag in ("out_ld", "in_bn"):
            if not d[flag]:
                del d[flag]
        return d

    def block_threads(self) -> int:
        return self.threads * self.wh * self.ww

    # Geometry that follows from the config and the layer shape.
    def channels_per_block(self) -> int:
        return self.threads * self.nt

    def in_tile(self, shape: ConvShape) -> tuple[int, int]:
        """Input rows x cols one block reads: its output tile plus the halo."""
        return ((self.th - 1) * shape.stride[0] + shape.R, (self.tw - 1) * shape.stride[1] + shape.S)

    def grid(self, shape: ConvShape, batch: int) -> dict[str, int]:
        """How many tiles of each kind cover the layer (per image for the spatial ones)."""
        return {"tiles_h": math.ceil(shape.P / (self.th * self.wh)),
                "tiles_w": math.ceil(shape.Q / (self.tw * self.ww)),
                "tiles_c": math.ceil(shape.C / self.tc),
                "tiles_n": math.ceil(shape.N / self.channels_per_block()), "batch": batch}

    def num_blocks(self, shape: ConvShape, batch: int) -> int:
        return math.prod(self.grid(shape, batch).values())

    @classmethod
    def from_dict(cls, d: dict) -> "KernelConfig":
        return cls(**{k: int(d[k]) for k in ("th", "tw", "tc", "threads", "nt")},
                   wh=int(d.get("wh", 1)), ww=int(d.get("ww", 1)), cluster=bool(d.get("cluster", False)),
                   out_ld=bool(d.get("out_ld", False)), in_bn=bool(d.get("in_bn", False)))
