"""The 16-bit tensor-core conv kernel's configs and rendering (codegen/tensorcore.py); its arithmetic is checked
against float64 on the GPU (tests/gpu/test_tensorcore_gpu.py)."""
import math
import re

import pytest

from snn.codegen import tensorcore as tc
from snn.codegen.spec import ConvShape

from buildfakes import pretend_spilled
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
    cfgs = tc.configs(shape)
    assert {c.bk for c in cfgs} == {32, 64} and tc.PIPELINE in {c.stages for c in cfgs}
    for c in cfgs:
        assert shape.C % c.bk == 0 and 1 <= c.ks <= min(tc.CLUSTER_MAX, tc.chunks(shape, c.bk)) and shape.N % c.bn == 0
        assert 2 <= c.stages <= max(2, math.ceil(tc.chunks(shape, c.bk) / c.ks))
        # a split's block receives the cluster's partial sums of its share beside the pipeline; all within sm_90's
        # 227 KiB
        pipeline = c.stages * (c.bm + c.bn) * (c.bk + 8) * 2
        assert tc.smem_bytes(c) >= pipeline + (c.bm * c.bn * 4 if c.ks > 1 else 0)
        assert tc.smem_bytes(c) <= 227 * 1024 and pipeline <= max(tc.SMEM_MAX, 4 * (c.bm + c.bn) * (c.bk + 8) * 2)
        g = tc.grid(shape, 2, c)
        assert g[0] * c.bm >= 2 * shape.P * shape.Q > (g[0] - 1) * c.bm and g[1] * c.bn == shape.N and g[2] == c.ks


def test_candidates_fill_one_wave_with_the_largest_split():
    cands = tc.candidates(R3, 1)
    # 16 tiles x 8 = 128 blocks on 132 SMs; 64-channel chunks (36 of them, 5 a block) through a 3-stage pipeline
    assert cands[0] == tc.TcConfig(64, 64, 8, 3, 64)
    assert {c.ks for c in cands if (c.bm, c.bn) == (64, 64)} == {8, 7, 6}
    assert all(c.bk == 64 and c.stages == tc.PIPELINE for c in cands)
    # C % 64 != 0: 32-channel chunks; a block with fewer chunks than the pipeline: a shorter one (never below 2)
    odd = ConvShape(96, 64, 14, 14, 1, 1, (1, 1), (0, 0))
    assert {c.bk for c in tc.candidates(odd, 1)} == {32}
    assert all(c.stages == max(2, min(tc.PIPELINE, math.ceil(3 / c.ks))) for c in tc.candidates(odd, 1))
    for c in cands:
        assert math.prod(tc.grid(R3, 1, c)) <= 132
    # a batch whose tiles alone fill the GPU: no split
    assert all(c.ks == 1 for c in tc.candidates(R3, 8))
    assert len(set(cands)) == len(cands) and set(cands) <= set(tc.configs(R3))


def test_render_names_and_sizes():
    cfg = tc.TcConfig(64, 64, 8, 9)
    fn, src = tc.render(R3, 1, cfg, "bf16")
    assert fn == "tconv_r3s3_str1_pad1_c256n256_h14w14_m64n64k8s9_b1_bf16"
    # one block an SM (a split's blocks fill one wave): ptxas may use the registers that leaves (it spilled some
    # splits' pushes at 64-80 registers otherwise)
    assert f"void __cluster_dims__(1, 1, 8) __launch_bounds__(128, 1)\n{fn}(" in src
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src and "cuda_bf16.h" in src
    assert re.search(r"#define M 196\b", src) and re.search(r"#define K 2304\b", src)
    # the split's partial sums pushed into their owners' memory, counted on the owner's mbarrier: no cluster barrier
    # after the main loop, none before leaving
    assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32" in src and "mbarrier.try_wait" in src
    assert src.count("barrier.cluster.arrive") == 1 and src.count("barrier.cluster.wait") == 1
    assert "cluster.sync" not in src and "map_shared_rank" not in src
    fn16, src16 = tc.render(R3, 1, tc.TcConfig(32, 32, 1, 4), "fp16")
    assert fn16.endswith("_m32n32k1s4_b1_fp16") and ".f16.f16.f32" in src16 and "__cluster_dims__" not in src16
    assert "cluster.sync" not in src16 and "__float22half2_rn" in src16
    fn64, src64 = tc.render(R3, 1, tc.TcConfig(64, 64, 8, 3, 64), "bf16")
    assert fn64.endswith("_m64n64k8s3c64_b1_bf16") and re.search(r"#define BK 64\b", src64)
    assert re.search(r"#define NK 36\b", src64)
    with pytest.raises(ValueError, match="C % 64 == 0"):
        tc.render(ConvShape(96, 64, 14, 14, 1, 1, (1, 1), (0, 0)), 1, tc.TcConfig(32, 32, 1, 2, 64), "bf16")


@needs_nvcc
def test_kernels_compile_without_spills(tmp_path):
    from snn.codegen.cache import CubinCache
    from snn.codegen.compile import Compiler, problems
    sources = dict(tc.render(shape, 1, cfg, prec) for shape, cfg, prec in
                   [(R3, tc.TcConfig(64, 64, 8, 9), "bf16"), (S2, tc.TcConfig(32, 64, 1, 26), "fp16"),
                    (R3, tc.TcConfig(64, 64, 8, 3, 64), "bf16"), (R1, tc.TcConfig(64, 32, 4, 3, 64), "fp16")])
    records = Compiler(CubinCache(tmp_path)).compile(sources, "sm_90").records
    for fn, rec in records.items():
        assert not problems(rec), (fn, problems(rec))
        assert fn in rec["functions"] and rec["functions"][fn]["entry"]


TC_NET = """\
name: tc16
input: {name: image, shape: [3, 12, 12]}
nodes:
  - {name: stem, op: conv, input: image, in_channels: 3, out_channels: 64, kernel: 3, padding: 1}
  - {name: r0, op: relu, input: stem}
  - {name: a, op: conv, input: r0, in_channels: 64, out_channels: 64, kernel: 3, padding: 1}
  - {name: ra, op: relu, input: a}
  - {name: b, op: conv, input: ra, in_channels: 64, out_channels: 32, kernel: 1}
"""


@needs_nvcc
def test_16_bit_build_lists_each_layers_tensor_core_kernels_and_leaves_out_spilling_ones(tmp_path, monkeypatch):
    from snn.codegen import build as build_mod
    from snn.codegen import bundle
    from snn.runtime import manifest
    from snn.codegen.spec import load_spec
    from test_runtime_cpu import H100_CC
    monkeypatch.setenv("SNN_CACHE_DIR", str(tmp_path / "cubins"))
    spec = tmp_path / "tc16.yaml"
    spec.write_text(TC_NET)
    shape_a = load_spec(spec).convs[1].shape
    cands = tc.candidates(shape_a, 1)
    spilled = tc.name(shape_a, 1, cands[0], "bf16")   # as if ptxas had spilled one of layer a's kernels
    pretend_spilled(monkeypatch, spilled)
    r = build_mod.build_spec(str(spec), "h100", [1, 8], out=tmp_path / "gen", precision="bf16")
    m = r.manifest
    per = {lay["name"]: lay.get("batches") for lay in m["layers"]}
    assert per["stem"] is None                          # C = 3: cuDNN only
    assert list(per["a"]) == ["1"] == list(per["b"])    # batch 8 > MAX_BATCH: cuDNN only
    names_a = per["a"]["1"]["tensorcore"]
    assert names_a == [tc.name(shape_a, 1, c, "bf16") for c in cands[1:]] and spilled not in m["kernels"]
    assert set(m["kernels"]) == set(names_a) | set(per["b"]["1"]["tensorcore"])
    for fn, k in m["kernels"].items():
        (step,) = k["steps"]
        cfg = next(c for c in tc.configs(shape_a) + tc.configs(load_spec(spec).convs[2].shape) if fn.endswith(
            f"_{c.tag()}_b1_bf16"))
        assert step["function"] == fn and step["block"] == [tc.THREADS] and step["smem"] == tc.smem_bytes(cfg)
        assert step["args"] == tc.ARGS and k["tensorcore"] == cfg.tag() and k["registers"] > 0
    assert not bundle.verify(r.manifest_path.parent, m)
    assert "1 more left out: they spill" in r.summary()
    cache = manifest.load(r.manifest_path, load_spec(spec), str(spec), 1, H100_CC)
    assert cache.layer_entry("a", 1)["tensorcore"] == names_a and cache.kernel(names_a[0])["function"] == names_a[0]
