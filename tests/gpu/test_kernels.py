"""Rendered kernels on the GPU against torch in float64 (snn.runtime.check), compiled through the cubin cache
($SNN_CACHE_DIR, else a temporary folder of the pytest run): the cases of tests/kernel_cases.py."""
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cuda.bindings.driver")

from kernel_cases import (classic_cases, cluster_cases, concat_slice_cases, dense_cases,  # noqa: E402
                          dense_pre_activation_cases, direct_cases, pair_cases, pre_activation_cases,
                          sixteen_bit_cases, warp_tiled_cases)

from snn.codegen.cache import ENV, CubinCache  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")]


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from snn.runtime.check import KernelRunner
    cache = None if os.environ.get(ENV) else CubinCache(tmp_path_factory.getbasetemp() / "cubins")
    return KernelRunner(cache)


def _assert_match(runner, cases):
    """Compile the cases' kernels (no stack, no spills), then each against float64 (outputs poisoned first)."""
    bad = runner.compile([k for k, *_ in cases])
    assert not bad, bad
    rows = runner.check_convs(cases)
    wrong = [r for r in rows if not r["ok"]]
    assert len(rows) == len(cases) and not wrong, wrong[:5]


def test_classic_kernels_match_float64(runner):
    """Every ResNet-50 shape, ragged and strided shapes, nt 1-8, hoisted and plain loads, atomics and stores."""
    _assert_match(runner, classic_cases())


def test_warp_tiled_kernels_match_float64(runner):
    """Warp-tiled blocks: ragged C, N and P/Q, atomics and direct stores, nt 1-8, dynamic shared memory."""
    _assert_match(runner, warp_tiled_cases())


def test_dense_kernels_match_float64(runner):
    """The dense FP32 kernel: each tile, K split in and out of a cluster, ragged M, stride 2, a 5x5 filter; bias,
    residual and ReLU fused in the four forms, the zeros it counts those it stored."""
    cases = dense_cases()
    assert {k.steps[0]["grid"][2] > 1 for k, *_ in cases} == {True, False}
    _assert_match(runner, cases)


def test_direct_kernels_match_float64(runner):
    """The image's conv (codegen/direct.py): 7x7 stride 2, 3x3, 5x5, ragged tiles, two channel tiles, batch 1-3; bias,
    residual and ReLU fused in the four forms, the zeros it counts those it stored."""
    _assert_match(runner, direct_cases())


def test_kernels_apply_their_producers_epilogue(runner):
    """Kernels that take a producer's epilogue (stride 1, same size: runtime/handoff.py), classic and warp-tiled,
    on signed raw sums: relu(x + shift) applied while staging, its zeros counted exactly once."""
    cases = classic_cases() + warp_tiled_cases()
    bad = runner.compile([k for k, *_ in cases])
    assert not bad, bad
    rows = runner.check_convs(cases, seed=1, handoff=True)
    assert len(rows) >= 8 and any("_w" in r["kernel"] for r in rows) and any("_w" not in r["kernel"] for r in rows)
    wrong = [r for r in rows if not r["ok"]]
    assert not wrong, wrong[:5]


def test_dense_kernels_apply_their_producers_epilogue(runner):
    """The dense kernel on a producer's signed raw sums: relu(x + shift) on each staged chunk, its zeros counted
    exactly once across a cluster's K split and at a 3x3's and a 5x5's centre tap, slices in and out of a cluster,
    the range it is given cleared."""
    cases = dense_cases()
    bad = runner.compile([k for k, *_ in cases])
    assert not bad, bad
    rows = runner.check_convs(cases, seed=1, handoff=True)
    names = [r["kernel"] for r in rows]
    assert len(rows) >= 12 and any("r5s5" in n for n in names) and any("k8t128s4" in n for n in names)
    assert not any("str2" in n for n in names)   # stride 2 takes no producer's epilogue
    wrong = [r for r in rows if not r["ok"]]
    assert not wrong, wrong[:5]


def test_dense_kernels_apply_a_pre_activation(runner):
    """The dense kernel for a layer that reads a pre-activation: a batchnorm's signed input read in place as the first
    C channels of a NaN-poisoned wider buffer, relu(x * scale + shift) applied while staging (negative scales too),
    its zeros counted exactly once across a cluster's split; and, without a scale, a producer's raw sums."""
    cases = dense_pre_activation_cases()
    bad = runner.compile([k for k, *_ in cases])
    assert not bad, bad
    rows = runner.check_convs(cases, seed=5, preact=True) + runner.check_convs(cases, seed=6, handoff=True)
    assert len(rows) == 2 * len(cases) and any(k.steps[0]["grid"][2] > 1 for k, *_ in cases)
    wrong = [r for r in rows if not r["ok"]]
    assert not wrong, wrong[:5]


def test_kernels_write_a_concat_slice(runner):
    """Kernels that take out_ld (emit.OUT_ARGS), classic, warp-tiled and dense, fused stores (bias + ReLU, zeros
    counted) and splits adding with atomics: into channels [4, 4 + N) of a NaN-poisoned buffer N + 12 wide, every other
    channel left NaN."""
    cases = concat_slice_cases()
    bad = runner.compile([k for k, *_ in cases])
    assert not bad, bad
    rows = runner.check_convs(cases, seed=2, sliced=True)
    assert len(rows) == len(cases) and any("_w" in r["kernel"] for r in rows) and {r["relu"] for r in rows} == {True, False}
    assert any(r["kernel"].startswith("dconv_") for r in rows)
    wrong = [r for r in rows if not r["ok"]]
    assert not wrong, wrong[:5]


def test_kernels_apply_a_pre_activation(runner):
    """Kernels that take in_bn (emit.IN_BN_ARGS), classic and warp-tiled, splits and fused stores: a batchnorm's
    signed input read in place as the first C channels of a NaN-poisoned wider buffer, relu(x * scale + shift)
    applied while staging (negative scales too), its zeros counted exactly once; and, without a scale, a producer's
    raw sums as any hand-off kernel (relu(x + shift))."""
    cases = pre_activation_cases()
    bad = runner.compile([k for k, *_ in cases])
    assert not bad, bad
    rows = runner.check_convs(cases, seed=3, preact=True) + runner.check_convs(cases, seed=4, handoff=True)
    assert len(rows) == 2 * len(cases) and any("_w" in r["kernel"] for r in rows)
    wrong = [r for r in rows if not r["ok"]]
    assert not wrong, wrong[:5]


def test_cluster_kernels_match_float64(runner):
    """Channel splits summed in a thread-block cluster (sm_90+): one round and several, float4 and scalar sums."""
    major, _ = torch.cuda.get_device_capability()
    if major < 9:
        pytest.skip("thread-block clusters need sm_90")
    _assert_match(runner, cluster_cases())


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_epilogue_matches_float64(runner, precision):
    """Every precision's epilogue kernel: dense and pitched input, residual, in place, vector and scalar rows."""
    rows = runner.check_epilogue(precision=precision)
    assert rows and all(r["ok"] for r in rows), rows


def test_sixteen_bit_kernels_match_float64(runner):
    """BF16 and FP16 activations: fused 16-bit stores within one rounding of float64 on the same 16-bit inputs
    (and their zero count exact), splits' FP32 sums within TOLERANCE."""
    _assert_match(runner, sixteen_bit_cases())


@pytest.mark.parametrize("handoff", [False, True])
def test_pair_kernels_match_float64(runner, handoff):
    """Two 1x1 convs in one launch: both outputs (each poisoned first) against float64, each zero count exact; with
    handoff the input is a producer's raw sums, finished and counted once while staging, the zero range cleared."""
    cases = pair_cases()
    bad = runner.compile([k for k, *_ in cases])
    assert not bad, bad
    gen = torch.Generator(device="cuda").manual_seed(3)
    rows = [runner.check_pair(k, a, b, batch, 0.4 + 0.1 * i % 0.5, gen, handoff)
            for i, (k, a, b, batch) in enumerate(cases)]
    wrong = [r for r in rows if not r["ok"]]
    assert not wrong, wrong[:3]
