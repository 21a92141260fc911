"""Thread-contiguous output channels (vec): a thread's nt channels are adjacent, so a tap's weights come
as one 8/16-byte cp.async and one vector shared load, and the outputs leave as one vector store or
sm_90 vector atomic; hoisted value loads at batch 1. Emitter contracts and nvcc (0 spills / 0 stack)."""
import os
import shutil

import pytest
from nvcc_units import compile_units

from snn.codegen import emit
from snn.codegen.config import KernelConfig
from snn.codegen.spec import ConvShape

S3 = ConvShape(128, 128, 28, 28, 3, 3, (1, 1), (1, 1))


def test_vec_eligibility_and_name():
    assert emit.vec_eligible(S3, KernelConfig(4, 4, 32, 32, 4)) and emit.vec_eligible(S3, KernelConfig(4, 8, 32, 64, 2))
    assert not emit.vec_eligible(S3, KernelConfig(4, 8, 32, 64, 1))                          # nt 1: already adjacent
    assert not emit.vec_eligible(ConvShape(20, 42, 9, 11, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 20, 32, 4))  # 42 % 4
    cfg = KernelConfig(4, 4, 32, 32, 4)
    k = emit.render_sparse(S3, 8, cfg)                                                       # vec where eligible
    assert k.name == cfg.name(S3, 8)
    assert "snn_cp16(wmine + ((slot * RS + rs) * 1 + 0) * THREADS * 4" in k.source
    assert "atomicAdd(reinterpret_cast<float4*>(output + e), o);" in k.source     # tc 32 < C: vector atomics
    whole = emit.render_sparse(S3, 8, KernelConfig(4, 8, 128, 64, 2))
    assert "snn_cp8(" in whole.source and "*reinterpret_cast<float2*>(output + e) = o;" in whole.source
    assert "atomicAdd(reinterpret_cast" not in whole.source
    ragged = emit.render_sparse(ConvShape(20, 40, 9, 11, 3, 3, (2, 2), (1, 1)), 3, KernelConfig(2, 3, 4, 32, 4))
    assert "if (n0 + 0 * THREADS < N)" in ragged.source and "n0 + 0 * THREADS * 4 < N ? wp + rs * N + 0 * THREADS * 4 : weight" in ragged.source
    strided = emit.render_sparse(ConvShape(20, 42, 9, 11, 3, 3, (1, 1), (1, 1)), 3, KernelConfig(4, 4, 20, 32, 4))
    assert "const int n0 = tile_n * NB + threadIdx.x;" in strided.source and "float4 o" not in strided.source
    assert "const size_t e = e0 + 3 * THREADS;" in strided.source    # nt 4 scalar: channel n0 + 3 * THREADS


def test_vec_nt8_two_vectors_per_tap_and_pixel():
    """nt 8: two float4 per tap and pixel, vector v of thread t holding channels n0 + v*THREADS*4 + [0, 4) so that
    each copy, load and atomic of a warp covers 512 contiguous bytes; bodies of 8 FMAs stay branches (ptxas
    predicates 4-FMA ones)."""
    sh = ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0))
    cfg = KernelConfig(1, 14, 128, 32, 8)
    assert emit.vec_eligible(sh, cfg) and not emit.vec_eligible(ConvShape(64, 36, 8, 8, 1, 1, (1, 1), (0, 0)), cfg)
    src = emit.render_sparse(sh, 32, cfg).source
    for v in (0, 1):
        assert f"snn_cp16(wmine + ((slot * RS + rs) * 2 + {v}) * THREADS * 4, wp + rs * N + {v} * THREADS * 4, 16);" in src
        assert f"const size_t e = e0 + {4 * v} * THREADS;" in src
    assert "wr[rs][7] = w1.w;" in src and "const int n0 = tile_n * NB + threadIdx.x * 4;" in src


def test_hoist_loads_every_used_pixel_before_the_tests_at_batch_1():
    cfg = KernelConfig(4, 4, 32, 32, 4)
    hoisted, plain = emit.render_sparse(S3, 1, cfg), emit.render_sparse(S3, 32, cfg)
    assert hoisted.name == cfg.name(S3, 1) and emit.hoist_default(S3, 1, cfg) and not emit.hoist_default(S3, 32, cfg)
    assert hoisted.source.count("ld.volatile.shared.f32") == 36 and "const float v = xv35;" in hoisted.source
    assert "ld.volatile" not in plain.source and "const float v = xc[35 * KC];" in plain.source
    big = KernelConfig(7, 7, 32, 32, 2)                  # 81 values + 98 accumulators + 18 taps: past HOIST_REGS_MAX
    assert not emit.hoist_default(S3, 1, big) and "ld.volatile" not in emit.render_sparse(S3, 1, big).source


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (install the CUDA toolkit to run)")
def test_vec_kernels_compile_without_spills():
    cases = [(S3, 32, KernelConfig(4, 4, 32, 32, 4)), (S3, 8, KernelConfig(4, 8, 128, 64, 2)),
             (ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), 32, KernelConfig(4, 4, 128, 32, 4)),
             (ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), 32, KernelConfig(1, 14, 128, 32, 8)),
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), 1, KernelConfig(2, 4, 16, 32, 8)),
             (ConvShape(20, 40, 9, 11, 3, 3, (2, 2), (1, 1)), 3, KernelConfig(2, 3, 4, 32, 4))]
    ks = [emit.render_sparse(sh, b, c) for sh, b, c in cases]
    assert all(emit.vec_eligible(sh, c) for sh, _, c in cases)
    report = compile_units([k.source for k in ks], max(1, min(8, os.cpu_count() or 1)))
    assert set(report) == {k.name for k in ks}
    assert not {n: r for n, r in report.items() if r["stack"] or r["spill_stores"] or r["spill_loads"]}
