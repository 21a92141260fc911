"""The 16-bit tensor-core conv kernel's configs and rendering (codegen/tensorcore.py); its arithmetic is checked
against float64 on the GPU (tests/gpu/test_tensorcore_gpu.py)."""
import math
import re

import pytest

from snn.codegen import tensorcore as tc
from snn.codegen.spec import ConvShape

from test_precision import needs_nvcc

R3 = ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1))
R1 = ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0))
S2 = ConvShape(128, 128, 56, 56, 3, 3, (2, 2), (1, 1))


def test_eligibility_needs_whole_chunks_and_tiles():
    assert tc.eligible(R3) and tc.eligible(R1)
    assert not tc.eligible(ConvShape(3, 64, 224, 224, 7, 7, (2, 2), (3, 3)))     # a stem: C % 32
    assert not tc.eligible(ConvShape(64, 48, 14, 14, 1, 1, (1, 1), (0, 0)))      # N % 32
    assert not tc.eligible(R3, groups=2)
    with pytest.raises(ValueError, match="C % 32 == 0"):
        tc.render(ConvShape(16, 32, 8, 8, 1, 1, (1, 1), (0, 0)), 1, tc.TcConfig(32, 32, 1, 2), "bf16")
    with pytest.raises(ValueError, match="16-bit only"):
        tc.render(R3, 1, tc.TcConfig(32, 32, 1, 2), "fp32")


@pytest.mark.parametrize("shape", [R3, R1, S2])
def test_every_config_splits_k_into_whole_chunks_and_fits_shared_memory(shape):
    for c in tc.configs(shape):
        assert 1 <= c.ks <= min(tc.CLUSTER_MAX, tc.chunks(shape)) and shape.N % c.bn == 0
        assert c.stages >= 2 and tc.smem_bytes(c) <= max(tc.SMEM_MAX, 4 * (c.bm + c.bn) * 40 * 2)
        # the cluster's sum reuses the pipeline's shared memory
        assert c.ks == 1 or tc.smem_bytes(c) >= c.bm * (c.bn + 4) * 4
        g = tc.grid(shape, 2, c)
        assert g[0] * c.bm >= 2 * shape.P * shape.Q > (g[0] - 1) * c.bm and g[1] * c.bn == shape.N and g[2] == c.ks


def test_candidates_fill_one_wave_with_the_largest_split():
    cands = tc.candidates(R3, 1)
    assert cands[0] == tc.TcConfig(64, 64, 8, 9)   # 16 tiles x 8 = 128 blocks on 132 SMs
    assert {c.ks for c in cands if (c.bm, c.bn) == (64, 64)} == {8, 7, 6}
    for c in cands:
        assert math.prod(tc.grid(R3, 1, c)) <= 132
    # a batch whose tiles alone fill the GPU: no split
    assert all(c.ks == 1 for c in tc.candidates(R3, 8))
    assert len(set(cands)) == len(cands) and set(cands) <= set(tc.configs(R3))


def test_render_names_and_sizes():
    cfg = tc.TcConfig(64, 64, 8, 9)
    fn, src = tc.render(R3, 1, cfg, "bf16")
    assert fn == "tconv_r3s3_str1_pad1_c256n256_h14w14_m64n64k8s9_b1_bf16"
    assert f"void __cluster_dims__(1, 1, 8) __launch_bounds__(128)\n{fn}(" in src
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src and "cuda_bf16.h" in src
    assert re.search(r"#define M 196\b", src) and re.search(r"#define K 2304\b", src)
    fn16, src16 = tc.render(R3, 1, tc.TcConfig(32, 32, 1, 4), "fp16")
    assert fn16.endswith("_m32n32k1s4_b1_fp16") and ".f16.f16.f32" in src16 and "__cluster_dims__" not in src16
    assert "cluster.sync" not in src16 and "__float22half2_rn" in src16


@needs_nvcc
def test_kernels_compile_without_spills(tmp_path):
    from snn.codegen.cache import CubinCache
    from snn.codegen.compile import Compiler, problems
    sources = dict(tc.render(shape, 1, cfg, prec) for shape, cfg, prec in
                   [(R3, tc.TcConfig(64, 64, 8, 9), "bf16"), (S2, tc.TcConfig(32, 64, 1, 26), "fp16")])
    records = Compiler(CubinCache(tmp_path)).compile(sources, "sm_90").records
    for fn, rec in records.items():
        assert not problems(rec), (fn, problems(rec))
        assert fn in rec["functions"] and rec["functions"][fn]["entry"]
