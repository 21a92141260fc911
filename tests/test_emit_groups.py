"""In-block channel split (groups = G warp-groups per block): emitter contracts, the NumPy mirror of
the split against a float64 conv, nvcc (0 spills / 0 stack), and G = 1 unchanged."""
import hashlib
import os
import shutil

import numpy as np
import pytest
from nvcc_units import compile_units

from snn.codegen import emit
from snn.codegen import reference as ref
from snn.codegen.config import KernelConfig
from snn.codegen.spec import ConvShape


def S3(c, n, h):
    return ConvShape(c, n, h, h, 3, 3, (1, 1), (1, 1))


def test_g1_source_unchanged():
    """sha256[:16] of the sources rendered by the emitter before groups existed (commit 7c5d9f2)."""
    cases = [
        (S3(256, 256, 14), 1, KernelConfig(7, 7, 32, 64, 2), "mask", "2f419684ca643eb0"),
        (S3(64, 64, 56), 1, KernelConfig(4, 8, 8, 64, 1), "switch", "9bc1d6933dcb79ca"),
        (ConvShape(20, 40, 9, 11, 3, 3, (1, 1), (1, 1)), 1, KernelConfig(4, 4, 20, 32, 1), "mask", "50640e2c79a1b106"),
        (ConvShape(3, 64, 20, 20, 7, 7, (2, 2), (3, 3)), 2, KernelConfig(4, 4, 3, 64, 1), "mask", "025a1d817787a933"),
        (ConvShape(256, 512, 56, 56, 1, 1, (2, 2), (0, 0)), 8, KernelConfig(7, 7, 64, 128, 1), "switch",
         "c24ead922fc7cc11"),
        (S3(128, 32, 7), 1, KernelConfig(4, 7, 4, 32, 1), "mask", "54d6a9a8ffac13cc"),
    ]
    for shape, b, cfg, loop, digest in cases:
        # vec=False: the strided channel mapping of those kernels (nt 2/4 now default to vec), the same
        # source apart from the kernel's name ("_s" added)
        k = emit.render_sparse(shape, b, cfg, loop=loop, vec=False, hoist=False)  # hoist: the default at batch 1 since v8
        assert k == emit.render_sparse(shape, b, cfg, loop=loop, groups=1, vec=False, hoist=False)
        src = k.source.replace(k.name, emit.kernel_name(shape, b, cfg, loop, vec=True if emit.vec_eligible(shape, cfg) else None))
        assert hashlib.sha256(src.encode()).hexdigest()[:16] == digest, k.name
        assert k.steps[-1]["block"] == [cfg.threads, 1, 1] and k.steps[-1]["smem"] == 0
        assert "_g" not in k.name.split("_b")[-1]


def test_groups_cover_c_no_memset_plain_store():
    shape, cfg = S3(64, 64, 56), KernelConfig(4, 8, 16, 64, 1)
    k = emit.render_sparse(shape, 1, cfg, groups=4)
    assert k.name == cfg.name(shape, 1) + "_g4" and k.name != emit.render_sparse(shape, 1, cfg).name
    assert [s["op"] for s in k.steps] == ["launch"]
    launch = k.steps[0]
    assert launch["grid"] == [14 * 7, 1, 1] and launch["block"] == [64, 4, 1]
    assert launch["smem"] == emit.group_layout(shape, cfg, 4)["SMEM"] > 48 * 1024
    assert "atomicAdd(dst" not in k.source and "*dst = v;" in k.source
    assert "extern __shared__" in k.source and "snn_group_sync(THREADS);" in k.source
    assert "__launch_bounds__(THREADS * GROUPS, 1)" in k.source
    sw = emit.render_sparse(shape, 1, cfg, loop="switch", groups=4)
    assert sw.name == k.name + "_switch"


def test_groups_not_covering_c_keep_memset_and_atomics():
    shape, cfg = S3(256, 256, 14), KernelConfig(4, 8, 8, 64, 1)
    k = emit.render_sparse(shape, 1, cfg, groups=4)
    assert [s["op"] for s in k.steps] == ["memset", "launch"]
    assert k.steps[1]["grid"] == [4 * 2, 4 * 8, 1]  # TILES_C = 256 / (4 * 8)
    assert "atomicAdd(dst, v)" in k.source


def test_group_limits_and_default_groups():
    shape = S3(128, 32, 7)
    with pytest.raises(ValueError, match="groups"):
        emit.render_sparse(shape, 1, KernelConfig(4, 7, 8, 32, 1), groups=16)
    with pytest.raises(ValueError, match="1024"):
        emit.render_sparse(S3(256, 256, 14), 1, KernelConfig(4, 8, 8, 128, 1), groups=9)
    assert emit.default_groups(shape, 1, KernelConfig(4, 7, 16, 32, 1)) == 8
    assert emit.default_groups(shape, 1, KernelConfig(4, 7, 128, 32, 1)) == 1          # tc >= C already
    assert emit.default_groups(S3(512, 512, 7), 1, KernelConfig(4, 7, 8, 64, 1)) == 1   # 64 groups: too many
    assert emit.default_groups(S3(64, 64, 56), 8, KernelConfig(4, 8, 16, 64, 1)) == 4
    # 7x7 x nt 2 (98 accumulators) does not fit the 128-register cap of a 512-thread block
    assert emit.default_groups(S3(256, 256, 14), 1, KernelConfig(7, 7, 32, 64, 2)) == 1
    for shape, b, cfg in [(S3(64, 64, 56), 1, KernelConfig(4, 8, 16, 64, 1)),
                          (ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), 1, KernelConfig(7, 7, 128, 64, 1))]:
        g = emit.default_groups(shape, b, cfg)
        assert g == 1 or g * cfg.tc >= shape.C
        if g > 1:
            assert cfg.threads * g <= 512 and emit.group_layout(shape, cfg, g)["SMEM"] <= emit.DYNAMIC_SMEM_LIMIT


# (C, N, H, W, R, S, stride, pad), batch, config(th, tw, tc, threads, nt), groups
MIRROR_CASES = [
    ((20, 24, 9, 11, 3, 3, 1, 1), 1, (4, 4, 4, 32, 1), 3),     # ragged C: 20 = 12 + 8, last group empty
    ((24, 40, 7, 7, 1, 1, 1, 0), 2, (3, 4, 4, 32, 2), 6),      # 1x1, G*tc = C, N not a multiple of 64
    ((16, 24, 9, 11, 3, 3, 2, 1), 1, (2, 3, 4, 32, 1), 2),     # stride 2, 2 channel tiles (atomics)
    ((12, 16, 10, 10, 1, 1, 2, 0), 1, (2, 2, 4, 32, 1), 4),    # 1x1 stride 2, G*tc > C
    ((40, 8, 5, 5, 3, 3, 1, 1), 1, (3, 2, 8, 32, 1), 2),       # ragged P/Q tiles, 3 channel tiles
]


@pytest.mark.parametrize("sparsity", [0.0, 0.7])
@pytest.mark.parametrize("case", MIRROR_CASES, ids=lambda c: "x".join(map(str, c[0][:6])) + f"_g{c[3]}")
def test_mirror_of_group_split_matches_direct(case, sparsity):
    (C, N, H, W, R, S, st, pd), batch, cfg, groups = case
    shape = ConvShape(C, N, H, W, R, S, (st, st), (pd, pd))
    cfg = KernelConfig(*cfg)
    rng = np.random.default_rng(C * 1000 + N + int(sparsity * 10))
    x = ref.relu_sparse_input(rng, (batch, H, W, C), sparsity)
    w = rng.standard_normal((C, R, S, N)).astype(np.float32)
    want = ref.conv2d_direct(x, w, shape)
    got = ref.sparse_conv_fused(x, w, shape, cfg, groups=groups)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    emit.render_sparse(shape, batch, cfg, groups=groups)  # the emitter accepts what the mirror checks


def group_kernels():
    """G > 1 kernels of every kind the bench uses: 3x3 and 1x1, covering C or not, both loops."""
    r152 = lambda c, n, h: ConvShape(c, n, h, h, 1, 1, (1, 1), (0, 0))  # noqa: E731
    cases = [(S3(64, 64, 56), KernelConfig(4, 8, 16, 64, 1), 4),
             (S3(128, 128, 28), KernelConfig(4, 8, 16, 64, 1), 8),
             (S3(256, 256, 14), KernelConfig(4, 8, 8, 64, 1), 4),
             (S3(512, 512, 7), KernelConfig(4, 7, 16, 64, 2), 4),
             (S3(128, 32, 7), KernelConfig(4, 7, 16, 32, 1), 8),
             (S3(128, 32, 28), KernelConfig(7, 7, 16, 32, 1), 8),
             (r152(1024, 256, 14), KernelConfig(7, 7, 64, 64, 1), 8),
             (r152(128, 512, 28), KernelConfig(4, 8, 16, 64, 2), 8),
             (ConvShape(20, 40, 9, 11, 3, 3, (2, 2), (1, 1)), KernelConfig(2, 3, 4, 32, 1), 5)]
    ks = []
    for shape, cfg, g in cases:
        for loop in emit.LOOPS:
            ks.append(emit.render_sparse(shape, 1, cfg, loop=loop, groups=g))
    ks.append(emit.render_sparse(S3(64, 64, 56), 8, KernelConfig(7, 7, 16, 64, 1), groups=4))
    return ks


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (install the CUDA toolkit to run)")
def test_group_kernels_compile_without_spills():
    kernels = group_kernels()
    names = {k.name for k in kernels}
    assert len(names) == len(kernels)
    report = compile_units([k.source for k in kernels], max(1, min(8, os.cpu_count() or 1)))
    assert set(report) == names
    bad = {n: r for n, r in report.items() if r["stack"] or r["spill_stores"] or r["spill_loads"]}
    assert not bad, f"kernels with stack or spills: {bad}"
    # dynamic shared memory only: the static part ptxas reports is 0
    assert all(r["smem_static"] == 0 for r in report.values()), report
