"""The NumPy mirror of the kernels' index arithmetic against a direct float64 convolution."""
import numpy as np
import pytest

from snn.codegen import emit
from snn.codegen import reference as ref
from snn.codegen.config import KernelConfig
from snn.codegen.spec import ConvShape

# (C, N, H, W, R, S, stride, pad), batch, config(th, tw, tc, threads, nt)
CASES = [
    ((16, 24, 9, 11, 3, 3, 1, 1), 2, (4, 4, 8, 32, 1)),      # odd H/W, channel tiles, B > 1
    ((16, 24, 9, 11, 3, 3, 2, 1), 2, (2, 3, 8, 32, 1)),      # stride 2
    ((20, 40, 7, 7, 1, 1, 1, 0), 1, (3, 4, 16, 32, 2)),      # 1x1, C not a multiple of tc, N of 32*nt
    ((12, 16, 10, 10, 1, 1, 2, 0), 3, (2, 2, 12, 32, 1)),    # 1x1 stride 2 (skipped halo pixels)
    ((3, 8, 15, 13, 7, 7, 2, 3), 1, (2, 3, 4, 32, 1)),       # 7x7 stride 2, C=3 < tc
    ((8, 8, 6, 6, 3, 3, 1, 0), 1, (4, 4, 8, 32, 1)),         # no padding, whole C in one tile
    ((40, 8, 5, 5, 3, 3, 1, 2), 2, (3, 2, 40, 32, 1)),       # padding 2, KC chunks (40 -> 20)
    ((6, 33, 8, 9, 3, 3, (1, 2), (0, 1)), 1, (3, 3, 6, 32, 1)),  # asymmetric stride/pad
]


def _shape(c):
    C, N, H, W, R, S, st, pd = c
    st = st if isinstance(st, tuple) else (st, st)
    pd = pd if isinstance(pd, tuple) else (pd, pd)
    return ConvShape(C, N, H, W, R, S, st, pd)


@pytest.mark.parametrize("sparsity", [0.0, 0.6, 0.99])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0][:6])) + f"_b{c[1]}")
def test_fused_matches_direct(case, sparsity):
    dims, batch, cfg = case
    shape, cfg = _shape(dims), KernelConfig(*cfg)
    rng = np.random.default_rng(hash((dims, sparsity)) % 2**32)
    x = ref.relu_sparse_input(rng, (batch, shape.H, shape.W, shape.C), sparsity)
    w = rng.standard_normal((shape.C, shape.R, shape.S, shape.N)).astype(np.float32)
    want = ref.conv2d_direct(x, w, shape)
    assert want.shape == (batch, shape.P, shape.Q, shape.N)
    got = ref.sparse_conv_fused(x, w, shape, cfg)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_all_zero_input_gives_zero():
    shape, cfg = _shape((8, 8, 6, 6, 3, 3, 1, 1)), KernelConfig(3, 3, 8, 32, 1)
    x = np.zeros((1, 6, 6, 8), np.float32)
    w = np.ones((8, 3, 3, 8), np.float32)
    assert not ref.sparse_conv_fused(x, w, shape, cfg).any()


@pytest.mark.parametrize("dims,cfg", [((4, 4, 9, 9, 3, 3, 1, 1), (4, 4, 4, 32, 1)),
                                      ((4, 4, 9, 9, 3, 3, 2, 1), (2, 3, 4, 32, 1)),
                                      ((4, 4, 9, 9, 7, 7, 2, 3), (2, 2, 4, 32, 1)),
                                      ((4, 4, 9, 9, 1, 1, 2, 0), (3, 3, 4, 32, 1))])
def test_tile_taps_cover_each_output_tap_once(dims, cfg):
    shape, cfg = _shape(dims), KernelConfig(*cfg)
    taps = emit.tile_taps(shape, cfg)
    ih, iw = cfg.in_tile(shape)
    assert len(taps) == ih * iw
    got = sorted((rs, oy, ox) for lst in taps for rs, oy, ox in lst)
    want = sorted((r * shape.S + s, oy, ox) for r in range(shape.R) for s in range(shape.S)
                  for oy in range(cfg.th) for ox in range(cfg.tw))
    assert got == want
    for p, lst in enumerate(taps):  # and each tap reads the right pixel
        for rs, oy, ox in lst:
            r, s = divmod(rs, shape.S)
            assert p == (oy * shape.stride[0] + r) * iw + ox * shape.stride[1] + s


def test_epilogue_mirror():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 3, 8))
    scale, shift = rng.standard_normal(8), rng.standard_normal(8)
    res = rng.standard_normal(x.shape)
    out, zeros = ref.epilogue(x, scale, shift, res, relu=True)
    want = np.maximum(x * scale + shift + res, 0)
    np.testing.assert_allclose(out, want)
    assert zeros == np.count_nonzero(want == 0) > 0
    out2, _ = ref.epilogue(x, scale, shift, None, relu=False)
    assert (out2 < 0).any()


# (C, N, H, W, R, S, stride, pad), batch, config: kernels that take their producer's epilogue (stride 1, same size)
IN_EPI_CASES = [
    ((16, 24, 9, 11, 3, 3, 1, 1), 2, KernelConfig(4, 4, 8, 32, 1)),         # ragged tiles, channel tiles
    ((20, 40, 7, 7, 1, 1, 1, 0), 1, KernelConfig(3, 4, 16, 32, 2)),         # 1x1, C not a multiple of tc
    ((12, 64, 14, 14, 3, 3, 1, 1), 1, KernelConfig(2, 7, 4, 32, 1, 7, 1)),  # warp-tiled: the block tile owns
    ((8, 32, 10, 9, 1, 1, 1, 0), 2, KernelConfig(1, 4, 8, 32, 1, 4, 2)),    # warp-tiled 1x1, ragged
]


@pytest.mark.parametrize("case", IN_EPI_CASES, ids=lambda c: "x".join(map(str, c[0][:6])) + c[2].tag())
def test_input_epilogue_counts_each_pixel_once(case):
    """The blocks of a kernel that applies its producer's epilogue count every input value's zero exactly once
    (each pixel in its own block's output tile, n tile 0, the block's channels), ragged edges included."""
    dims, batch, cfg = case
    shape = _shape(dims)
    assert emit.input_epilogue(shape, cfg) and (shape.P, shape.Q) == (shape.H, shape.W)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((batch, shape.H, shape.W, shape.C)).astype(np.float32)
    shift = rng.standard_normal(shape.C).astype(np.float32)
    want = int(np.count_nonzero(np.maximum(x + shift, 0) == 0))
    assert 0 < want < x.size
    assert ref.input_epilogue_zeros(x, shift, shape, cfg) == want


def test_input_epilogue_only_where_each_pixel_has_one_owner():
    s3 = ConvShape(16, 16, 8, 8, 3, 3, (1, 1), (1, 1))
    assert emit.input_epilogue(s3, KernelConfig(2, 2, 8, 32, 1))
    assert not emit.input_epilogue(ConvShape(16, 16, 8, 8, 3, 3, (2, 2), (1, 1)), KernelConfig(2, 2, 8, 32, 1))
    assert not emit.input_epilogue(ConvShape(16, 16, 8, 8, 3, 3, (1, 1), (0, 0)), KernelConfig(2, 2, 8, 32, 1))
    assert not emit.input_epilogue(s3, KernelConfig(2, 2, 8, 32, 1), "bf16")
    assert not emit.input_epilogue(s3, KernelConfig(2, 2, 8, 32, 1, cluster=True))
