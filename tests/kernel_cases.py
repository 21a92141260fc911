"""The kernels the tests compile with nvcc (tests/test_emit*.py) and check on the GPU against float64
(tests/gpu/test_kernels.py), rendered exactly as `snn-codegen build` renders them. The shapes and configs
are picked to reach every branch of the templates: ragged C, N, P and Q; atomics (tc < C), a cluster's
sum (tc < C, `cluster`: one round and several, float4 and scalar) and direct stores; nt 1, 2, 4 and 8, strided and thread-contiguous channels; hoisted (batch 1) and plain loads;
1x1, 3x3, 5x5 and 7x7 filters, strides 1 and 2.

Each case is (EmittedKernel, ConvShape, batch).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from snn.codegen import dense, direct, emit, pair
from snn.codegen.config import KernelConfig
from snn.codegen.spec import ConvShape, load_spec

RESNET50 = Path(__file__).resolve().parents[1] / "network_specs" / "resnet50.yaml"


def example_configs(shape: ConvShape) -> list[KernelConfig]:
    """Two hand-picked classic configs per shape (the planner picks for real).

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


def resnet50_cases(batches=(1,)) -> list[tuple]:
    """example_configs on every distinct ResNet-50 conv shape, at each batch."""
    return [(emit.render_sparse(sh, b, cfg), sh, b) for sh in load_spec(RESNET50).conv_shapes()
            for cfg in example_configs(sh) for b in batches]


def classic_cases() -> list[tuple]:
    """resnet50_cases at batch 1 (hoisted loads where they fit) and, for the first config, batch 3 (plain
    loads, a batch past one image); ragged and strided shapes; nt 8 (two float4 a tap and pixel), atomics and
    direct stores, at batch 1 and 3."""
    out = []
    ragged = [ConvShape(20, 40, 9, 11, 3, 3, (2, 2), (1, 1)), ConvShape(40, 36, 13, 13, 1, 1, (1, 1), (0, 0))]
    for sh in load_spec(RESNET50).conv_shapes() + ragged:
        for i, cfg in enumerate(example_configs(sh)):
            out += [(emit.render_sparse(sh, b, cfg), sh, b) for b in ((1, 3) if i == 0 or sh in ragged else (1,))]
    for sh in (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)),
               ConvShape(256, 512, 56, 56, 1, 1, (2, 2), (0, 0)), ConvShape(40, 256, 9, 11, 3, 3, (2, 2), (1, 1))):
        for cfg in (KernelConfig(2, 4, min(32, sh.C), 32, 8), KernelConfig(1, 7, sh.C, 32, 8)):
            cfg = KernelConfig(min(cfg.th, sh.P), min(cfg.tw, sh.Q), cfg.tc, cfg.threads, cfg.nt)
            out += [(emit.render_sparse(sh, b, cfg), sh, b) for b in (1, 3)]
    return out


def cluster_cases() -> list[tuple]:
    """Channel splits summed through a thread-block cluster (sm_90+), both families: several rounds (a 1x7 nt 4
    tile of 896 floats through 736), N % 4 != 0 (scalar sums), ragged C, P and Q, 2 to 8 blocks a cluster."""
    cases = [(ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), KernelConfig(1, 7, 128, 32, 4, cluster=True)),
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), KernelConfig(2, 7, 32, 32, 1, cluster=True)),
             (ConvShape(60, 30, 13, 11, 3, 3, (2, 2), (1, 1)), KernelConfig(2, 3, 16, 32, 1, cluster=True)),
             (ConvShape(40, 36, 13, 13, 1, 1, (1, 1), (0, 0)), KernelConfig(4, 4, 16, 32, 2, cluster=True)),
             (ConvShape(512, 128, 28, 28, 1, 1, (1, 1), (0, 0)), KernelConfig(1, 7, 64, 32, 2, 7, 1, cluster=True)),
             (ConvShape(64, 64, 56, 56, 3, 3, (1, 1), (1, 1)), KernelConfig(2, 4, 8, 32, 2, 4, 2, cluster=True)),
             (ConvShape(36, 40, 9, 11, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 16, 32, 1, 2, 2, cluster=True))]
    return [(emit.render_sparse(sh, b, cfg), sh, b) for sh, cfg in cases for b in (1, 3)]


def warp_tiled_cases() -> list[tuple]:
    """Warp-tiled kernels: ragged C (a chunk past C), N (past the last block's channels) and P/Q (warps
    past the output), atomics and direct stores, nt 1/2/4/8, a 5x5 filter, a 1x1 conv, one-row tiles, batch 1 and 3."""
    cases = [(ConvShape(36, 40, 9, 11, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 32, 32, 1, 2, 2)),
             (ConvShape(36, 40, 9, 11, 3, 3, (1, 1), (1, 1)), KernelConfig(2, 4, 36, 32, 1, 4, 2)),
             (ConvShape(64, 72, 7, 7, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 16, 32, 2, 1, 2)),
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 64, 32, 4, 2, 2)),
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 256, 32, 4, 2, 4)),
             (ConvShape(512, 512, 7, 7, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 128, 32, 8, 2, 2)),
             (ConvShape(128, 32, 28, 28, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 8, 128, 32, 1, 2, 4)),
             (ConvShape(128, 128, 28, 28, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 7, 32, 32, 4, 2, 2)),
             (ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), KernelConfig(1, 7, 128, 32, 8, 2, 2)),
             (ConvShape(16, 32, 12, 12, 5, 5, (1, 1), (2, 2)), KernelConfig(4, 4, 16, 32, 1, 2, 2)),
             # one-row warp tiles (space.ROW_TILES_B1): 7 x 2 warps, nt 2 and 4; 7 x 1 on a ragged map
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), KernelConfig(1, 7, 8, 32, 2, 7, 2)),
             (ConvShape(128, 128, 28, 28, 3, 3, (1, 1), (1, 1)), KernelConfig(1, 7, 8, 32, 4, 7, 2)),
             (ConvShape(64, 72, 9, 11, 3, 3, (1, 1), (1, 1)), KernelConfig(1, 7, 8, 32, 2, 7, 1))]
    return [(emit.render_sparse(sh, b, cfg), sh, b) for sh, cfg in cases for b in (1, 3)]


def concat_slice_cases() -> list[tuple]:
    """Kernels that store at a pitch they are given (KernelConfig.out_ld: a concat's channel slice): DenseNet's
    conv2 shapes (3x3, 128 -> 32) as splits and as direct stores, classic and warp-tiled, a ragged N and P/Q, a 1x1
    conv, batch 1 and 3; and the dense kernel's 32-channel tiles on those shapes (in and out of a cluster, slices)."""
    cases = [(ConvShape(128, 32, 56, 56, 3, 3, (1, 1), (1, 1)), KernelConfig(2, 7, 8, 32, 1, 7, 1)),
             (ConvShape(128, 32, 28, 28, 3, 3, (1, 1), (1, 1)), KernelConfig(3, 4, 4, 32, 1)),
             (ConvShape(128, 32, 14, 14, 3, 3, (1, 1), (1, 1)), KernelConfig(2, 7, 128, 32, 1)),
             (ConvShape(128, 32, 7, 7, 3, 3, (1, 1), (1, 1)), KernelConfig(2, 4, 4, 32, 1)),
             (ConvShape(128, 32, 28, 28, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 8, 128, 32, 1, 2, 4)),
             (ConvShape(36, 40, 9, 11, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 32, 32, 1, 2, 2)),
             (ConvShape(40, 36, 13, 13, 1, 1, (1, 1), (0, 0)), KernelConfig(4, 4, 40, 32, 2))]
    dense_cases = [(ConvShape(128, 32, 14, 14, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(16, 32, 8)),
                   (ConvShape(128, 32, 7, 7, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(32, 32, 4)),
                   (ConvShape(128, 32, 28, 28, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(64, 32, 1, 128, 2)),
                   (ConvShape(128, 32, 28, 28, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(64, 32, 8, 32, 8)),
                   (ConvShape(128, 32, 14, 14, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(16, 32, 8, mma=True)),
                   (ConvShape(128, 64, 28, 28, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(32, 64, 2, 128, 2, mma=True))]
    return ([(emit.render_sparse(sh, b, dataclasses.replace(cfg, out_ld=True)), sh, b) for sh, cfg in cases
             for b in (1, 3)]
            + [(dense.emitted(sh, b, dataclasses.replace(cfg, out_ld=True)), sh, b) for sh, cfg in dense_cases
               for b in (1, 3)])


def pre_activation_cases() -> list[tuple]:
    """Kernels that read a pre-activation's input at a pitch and apply its batchnorm while staging (KernelConfig.in_bn):
    DenseNet's conv1 shapes (1x1 into 128 channels; a transition's 1x1) as splits and direct stores, classic and
    warp-tiled, a ragged C (scalar copies), a 3x3 warp-tiled one with a ragged chunk, batch 1 and 3."""
    cases = [(ConvShape(1024, 128, 14, 14, 1, 1, (1, 1), (0, 0)), KernelConfig(1, 14, 16, 64, 2)),
             (ConvShape(256, 128, 56, 56, 1, 1, (1, 1), (0, 0)), KernelConfig(2, 7, 32, 32, 4, 2, 2)),
             (ConvShape(512, 128, 7, 7, 1, 1, (1, 1), (0, 0)), KernelConfig(1, 7, 512, 32, 4)),
             (ConvShape(896, 448, 14, 14, 1, 1, (1, 1), (0, 0)), KernelConfig(2, 7, 64, 32, 4, 2, 2)),
             (ConvShape(30, 40, 9, 11, 1, 1, (1, 1), (0, 0)), KernelConfig(3, 4, 30, 32, 1)),
             (ConvShape(36, 40, 9, 11, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 32, 32, 1, 2, 2))]
    return [(emit.render_sparse(sh, b, dataclasses.replace(cfg, in_bn=True)), sh, b) for sh, cfg in cases
            for b in (1, 3)]


def sixteen_bit_cases() -> list[tuple]:
    """16-bit activations (BF16 and FP16; FP32 weights and sums): atomics into the FP32 accumulator and fused
    16-bit stores with a 16-bit residual, nt 1 (strided), 2, 4 and 8, cp.async tiles (C % 8 == 0) and plain
    copies (ragged C 20), hoisted (batch 1) and plain loads (batch 3), strides 1 and 2."""
    cases = [(ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), KernelConfig(1, 7, 32, 64, 4)),
             (ConvShape(256, 1024, 14, 14, 1, 1, (1, 1), (0, 0)), KernelConfig(2, 4, 256, 32, 8)),
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), KernelConfig(2, 7, 256, 64, 2)),
             (ConvShape(64, 64, 56, 56, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 8, 16, 32, 2)),
             (ConvShape(20, 40, 9, 11, 3, 3, (2, 2), (1, 1)), KernelConfig(3, 4, 20, 32, 1)),
             (ConvShape(20, 40, 9, 11, 3, 3, (2, 2), (1, 1)), KernelConfig(3, 4, 8, 32, 2))]
    return [(emit.render_sparse(sh, b, cfg, p), sh, b) for p in ("bf16", "fp16") for sh, cfg in cases for b in (1, 3)]


def dense_cases() -> list[tuple]:
    """The dense FP32 kernel (codegen/dense.py): every tile it takes, K split in and out of a cluster (2 to 8 blocks),
    ragged M (rows past the batch's pixels), stride 2, a 5x5 filter, padding, slices, batch 1 and 3."""
    cases = [(ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(32, 64, 4)),
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(32, 128, 8)),
             (ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(64, 64, 8, 256)),
             (ConvShape(64, 128, 9, 11, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(64, 128, 2)),
             (ConvShape(64, 64, 13, 13, 3, 3, (2, 2), (1, 1)), dense.DenseConfig(64, 64, 1)),
             (ConvShape(512, 2048, 7, 7, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(32, 128, 2)),
             (ConvShape(32, 64, 12, 12, 5, 5, (1, 1), (2, 2)), dense.DenseConfig(32, 64, 3)),
             # slices: a cluster's and a lone block's, ragged M, more threads than the A tile has segments
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(32, 128, 8, 128, 4)),
             (ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(64, 64, 4, 128, 2)),
             (ConvShape(64, 128, 9, 11, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(32, 64, 1, 128, 4)),
             (ConvShape(64, 64, 13, 13, 3, 3, (2, 2), (1, 1)), dense.DenseConfig(64, 64, 1, 128, 2)),
             # 32-channel tiles (8 threads along N): DenseNet's 3x3 and a 7x7 map's 1x1, ragged M, a lone block
             (ConvShape(128, 32, 14, 14, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(16, 32, 8)),
             (ConvShape(1024, 128, 7, 7, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(32, 32, 8)),
             (ConvShape(64, 96, 9, 11, 3, 3, (2, 2), (1, 1)), dense.DenseConfig(64, 32, 1, 128, 2)),
             # warp tiles (a warp the whole tile over its slice of each chunk): 4 and 8 warps, in and out of a
             # cluster, ragged M, stride 2, 32 to 128 channels wide
             (ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(32, 64, 8, 32, 4)),
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(64, 32, 2, 32, 8)),
             (ConvShape(64, 128, 9, 11, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(16, 128, 1, 32, 4)),
             (ConvShape(64, 96, 9, 11, 3, 3, (2, 2), (1, 1)), dense.DenseConfig(32, 32, 1, 32, 4)),
             (ConvShape(128, 32, 7, 7, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(16, 32, 8, 32, 4)),
             # 3xTF32 tiles (tensor cores): in and out of a cluster, slices, ragged M, stride 2, a 5x5 filter,
             # 32 to 128 channels wide
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(32, 128, 8, mma=True)),
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(32, 64, 4, 128, 2, mma=True)),
             (ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(64, 64, 8, 128, 2, mma=True)),
             (ConvShape(64, 128, 9, 11, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(32, 128, 1, 128, 4, mma=True)),
             (ConvShape(64, 64, 13, 13, 3, 3, (2, 2), (1, 1)), dense.DenseConfig(64, 64, 1, mma=True)),
             (ConvShape(32, 64, 12, 12, 5, 5, (1, 1), (2, 2)), dense.DenseConfig(16, 64, 3, mma=True)),
             (ConvShape(128, 32, 14, 14, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(16, 32, 8, mma=True))]
    return [(dense.emitted(sh, b, cfg), sh, b) for sh, cfg in cases for b in (1, 3)]


def dense_pre_activation_cases() -> list[tuple]:
    """The dense kernel for a layer that reads a pre-activation (DenseConfig.in_bn): DenseNet's conv1 and
    transition shapes in and out of a cluster, slices, the deeper pipeline, a 3x3 with padding and ragged M (the
    padding stays zero: the batchnorm applies to the image alone), batch 1 and 3."""
    cases = [(ConvShape(1024, 128, 14, 14, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(32, 64, 8, 128, 2)),
             (ConvShape(256, 128, 56, 56, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(32, 128, 1, stages=4)),
             (ConvShape(512, 256, 28, 28, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(64, 64, 4, 128, 2)),
             (ConvShape(1792, 896, 7, 7, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(64, 128, 2, 128, 2)),
             (ConvShape(64, 64, 9, 11, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(32, 64, 2)),
             (ConvShape(1888, 128, 7, 7, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(16, 32, 8)),
             (ConvShape(1024, 128, 14, 14, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(32, 64, 8, 32, 8)),
             (ConvShape(64, 64, 9, 11, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(32, 64, 1, 32, 4)),
             # 48 KB of dynamic shared memory beside the split's mbarrier: past the limit without the opt-in
             (ConvShape(320, 128, 28, 28, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(32, 64, 2, 128, 2)),
             # 3xTF32 tiles: in and out of a cluster, slices, a 3x3 with padding and ragged M
             (ConvShape(1024, 128, 14, 14, 1, 1, (1, 1), (0, 0)), dense.DenseConfig(32, 128, 8, mma=True)),
             (ConvShape(64, 64, 9, 11, 3, 3, (1, 1), (1, 1)), dense.DenseConfig(32, 64, 1, 128, 2, mma=True))]
    return [(dense.emitted(sh, b, dataclasses.replace(cfg, in_bn=True)), sh, b) for sh, cfg in cases for b in (1, 3)]


def pair_cases() -> list[tuple]:
    """Two 1x1 convs in one launch (codegen/pair.py): ResNet-152's block boundaries at 14x14 (16 blocks a cluster,
    non-portable, and 8),
    28x28 (4) and 56x56 (2: a 64-channel second conv, one float4 a thread), one and two slices, a two-stage
    pipeline, the first conv's K split over the warps (with one or two slices, and over groups of several warps),
    64-channel chunks, the second's 32 or 64 threads along N, 28-pixel tiles (14x14 and 28x28), ragged M (batch 3; a
    9x11 map), the W2 share streamed (7x7, and 28x28 with 256 y channels). Each case is (EmittedKernel, first, second,
    batch)."""
    def s(c, n, h, w):
        return ConvShape(c, n, h, w, 1, 1, (1, 1), (0, 0))
    cases = [(s(256, 1024, 14, 14), s(1024, 256, 14, 14), pair.PairConfig(32, 64)),
             (s(256, 1024, 14, 14), s(1024, 256, 14, 14), pair.PairConfig(16, 128)),
             (s(256, 1024, 14, 14), s(1024, 256, 14, 14), pair.PairConfig(16, 128, slices=1)),
             (s(128, 512, 28, 28), s(512, 128, 28, 28), pair.PairConfig(16, 128, stages=2)),
             (s(64, 256, 56, 56), s(256, 64, 56, 56), pair.PairConfig(16, 128)),
             (s(64, 256, 9, 11), s(256, 128, 9, 11), pair.PairConfig(16, 64, slices=1)),
             # the first conv's K split over the warps; the second's 32 threads along N
             (s(256, 1024, 14, 14), s(1024, 256, 14, 14), pair.PairConfig(32, 64, 128, 1, 3, True, 32)),
             (s(128, 512, 28, 28), s(512, 128, 28, 28), pair.PairConfig(32, 64, 128, 1, 3, True)),
             (s(64, 256, 56, 56), s(256, 64, 56, 56), pair.PairConfig(32, 64, 128, 2, 2, True)),
             (s(64, 256, 9, 11), s(256, 128, 9, 11), pair.PairConfig(32, 64, 128, 1, 2, True, 32)),
             # two slices, the second's 32 threads along N (its slices' partials added before the cluster's sum)
             (s(256, 1024, 14, 14), s(1024, 256, 14, 14), pair.PairConfig(32, 64, 128, 2, 2, False, 32)),
             # the first conv's 4 groups of two and four warps (kg; 512 threads); 64-channel chunks
             (s(256, 1024, 14, 14), s(1024, 256, 14, 14), pair.PairConfig(32, 64, 256, 1, 2, True, 32, 4)),
             (s(128, 512, 28, 28), s(512, 128, 28, 28), pair.PairConfig(32, 64, 256, 2, 2, True, 32, 4)),
             (s(64, 256, 9, 11), s(256, 128, 9, 11), pair.PairConfig(32, 64, 256, 1, 2, True, 16, 4)),
             (s(256, 1024, 14, 14), s(1024, 256, 14, 14), pair.PairConfig(32, 64, 128, 1, 2, True, 32, 0, 64)),
             (s(64, 256, 9, 11), s(256, 128, 9, 11), pair.PairConfig(32, 64, 256, 1, 2, True, 32, 4, 64)),
             # 28-pixel tiles (a tile's A rows not a multiple of the copy's), 64 threads along N for the second conv
             (s(256, 1024, 14, 14), s(1024, 256, 14, 14), pair.PairConfig(28, 64, 256, 1, 2, True, 64, 0, 64)),
             (s(256, 1024, 14, 14), s(1024, 256, 14, 14), pair.PairConfig(28, 64, 256, 1, 2, False, 64, 4, 64)),
             (s(64, 256, 9, 11), s(256, 256, 9, 11), pair.PairConfig(28, 64, 256, 1, 2, True, 64, 0, 64)),
             (s(128, 512, 28, 28), s(512, 128, 28, 28), pair.PairConfig(28, 128, 128, 1, 2, False, 32, 2, 64)),
             (s(128, 512, 28, 28), s(512, 256, 28, 28), pair.PairConfig(28, 128, 128, 1, 2, False, 32, 2, 64)),
             (s(64, 256, 9, 11), s(256, 128, 9, 11), pair.PairConfig(28, 128, 128, 1, 2, False, 32, 2)),
             # the W2 share streamed through a ring of 3 and 4 slots (7x7: 128 x 512 floats a block)
             (s(512, 2048, 7, 7), s(2048, 512, 7, 7), pair.PairConfig(8, 128, 128, 1, 3, True, 32, 4, 64)),
             (s(512, 2048, 7, 7), s(2048, 512, 7, 7), pair.PairConfig(16, 128, 256, 1, 3, True, 32, 4))]
    return [(pair.emitted(a, b, batch, cfg), a, b, batch) for a, b, cfg in cases for batch in (1, 3)]


def direct_cases() -> list[tuple]:
    """The direct kernel for the image's conv (codegen/direct.py): ResNet's 7x7 stem at batch 1 and 2, VGG's 3x3,
    ragged tiles with two 64-channel tiles, a 5x5 over 4 channels; the four epilogue forms over the six; each reading
    its input NCHW, and the first and last NHWC too."""
    cases = [(ConvShape(3, 64, 224, 224, 7, 7, (2, 2), (3, 3)), 1), (ConvShape(3, 64, 224, 224, 7, 7, (2, 2), (3, 3)), 2),
             (ConvShape(3, 64, 224, 224, 3, 3, (1, 1), (1, 1)), 1), (ConvShape(3, 128, 13, 11, 3, 3, (2, 2), (1, 1)), 1),
             (ConvShape(3, 128, 13, 11, 3, 3, (2, 2), (1, 1)), 3), (ConvShape(4, 64, 9, 10, 5, 5, (1, 1), (2, 2)), 2)]
    image = dataclasses.replace(direct.CONFIG, nchw=True)     # reading the image NCHW, as the build emits it
    return ([(direct.emitted(sh, b, image), sh, b) for sh, b in cases]
            + [(direct.emitted(sh, b), sh, b) for sh, b in (cases[0], cases[-1])])   # and NHWC
