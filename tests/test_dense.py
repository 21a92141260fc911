"""The dense FP32 conv kernel's configs, rendering and place in the build (codegen/dense.py); its arithmetic, fused
epilogue and zero count are checked against float64 on the GPU (tests/gpu/test_kernels.py, and every bundle kernel
in tests/gpu/test_manifest_kernels.py)."""
import dataclasses
import math
import re

import pytest

from snn.codegen import dense
from snn.codegen.emit import CONV_ARGS, IN_ARGS, IN_BN_ARGS, OUT_ARGS, ZERO_ARGS
from snn.codegen.spec import ConvShape

from buildfakes import pretend_spilled
from test_precision import needs_nvcc

R3 = ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1))
R1 = ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0))
S2 = ConvShape(512, 512, 14, 14, 3, 3, (2, 2), (1, 1))
WIDE = ConvShape(256, 1024, 14, 14, 1, 1, (1, 1), (0, 0))
GROWTH = ConvShape(128, 32, 14, 14, 3, 3, (1, 1), (1, 1))     # DenseNet's 3x3: 32 output channels


def test_eligibility_needs_whole_chunks_and_32_channel_tiles():
    assert dense.eligible(R3) and dense.eligible(S2) and dense.eligible(GROWTH)
    assert not dense.eligible(ConvShape(3, 64, 224, 224, 7, 7, (2, 2), (3, 3)))    # a stem: C % 32
    assert not dense.eligible(ConvShape(128, 48, 14, 14, 3, 3, (1, 1), (1, 1)))   # N % 32
    assert not dense.eligible(R3, groups=2)
    assert dense.candidates(ConvShape(128, 48, 14, 14, 3, 3, (1, 1), (1, 1)), 1) == []
    with pytest.raises(ValueError, match="N % 128 == 0"):
        dense.render(ConvShape(64, 64, 8, 8, 1, 1, (1, 1), (0, 0)), 1, dense.DenseConfig(32, 128, 1))
    with pytest.raises(ValueError, match="bn 32, 64 or 128"):
        dense.render(R3, 1, dense.DenseConfig(32, 96, 1))
    with pytest.raises(ValueError, match="bm a multiple of 16"):   # 8 threads along N: 16 rows of 128 threads
        dense.render(GROWTH, 1, dense.DenseConfig(8, 32, 1))
    with pytest.raises(ValueError, match="K split 9"):
        dense.render(R3, 1, dense.DenseConfig(32, 64, 9))


@pytest.mark.parametrize("shape", [R3, R1, S2, WIDE, GROWTH])
def test_candidates_fill_one_wave_with_the_largest_split(shape):
    for b in (1, 2, 8):
        cands = dense.candidates(shape, b)
        assert (cands or b > dense.NARROW_MAX_BATCH and shape is GROWTH) and len(set(cands)) == len(cands)
        for c in cands:
            blocks = math.prod(dense.grid(shape, b, c))
            g = dense.grid(shape, b, c)
            assert g[0] * c.bm >= b * shape.P * shape.Q > (g[0] - 1) * c.bm and g[1] * c.bn == shape.N
            assert 1 <= c.ks <= min(dense.CLUSTER_MAX, dense.chunks(shape))
            # the largest split that fits one wave: one more would not (unless none fits, or the limit is reached)
            assert blocks <= 132 or c.ks == 1
            assert c.ks == min(dense.CLUSTER_MAX, dense.chunks(shape)) or blocks // c.ks * (c.ks + 1) > 132
            # a split's block receives every block's partial sums of its share (its slices added first), beside the
            # pipeline
            assert dense.recv_bytes(c) >= (c.bm * c.bn * 4 if c.ks > 1 else 0)
            assert dense.smem_bytes(c) >= dense.recv_bytes(c) + c.stages * c.bn * dense.BK * 4
    # the 3x3 256 @14 at batch 1: 7 x 4 tiles of 32 x 64, 4 blocks a cluster (112 of 132 SMs)
    assert dense.DenseConfig(32, 64, 4, 128, 2) in dense.candidates(R3, 1)
    assert all(c.ks == 1 for c in dense.candidates(R3, 1, clusters=False))
    assert dense.candidates(R3, dense.MAX_BATCH + 1) == []


def test_render_names_sizes_and_the_cluster():
    fn, src = dense.render(R3, 1, dense.DenseConfig(32, 64, 4))
    # the producer's epilogue on the staged chunk, its zeros counted at the centre tap; the grid clears a range
    assert "epi_a(it % STAGES, kc0 + it)" in src and "if (it == 0) __syncthreads();" in src and re.search(r"#define TAP0 \(4\)", src) and "zero_total / 4" in src
    assert fn == "dconv_r3s3_str1_pad1_c256n256_h14w14_m32n64k4t128_b1"
    assert f"void __cluster_dims__(1, 1, 4) __launch_bounds__(THREADS, 1)\n{fn}(" in src
    assert re.search(r"#define M 196\b", src) and re.search(r"#define NK 72\b", src)
    # the split's partial tiles pushed into their owners' memory and counted on the owner's mbarrier: no cluster
    # barrier after the main loop, and none before leaving
    assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32" in src and "mbarrier.try_wait" in src
    assert src.count("barrier.cluster.arrive") == 1 and src.count("barrier.cluster.wait") == 1
    assert "cluster.sync" not in src and "map_shared_rank" not in src
    assert "unsigned long long* __restrict__ zeros, int relu" in src and "griddepcontrol.wait" in src
    fn1, src1 = dense.render(S2, 8, dense.DenseConfig(64, 64, 1, 256))
    assert fn1.endswith("_m64n64k1t256_b8") and "__cluster_dims__" not in src1 and "cluster.sync" not in src1
    assert re.search(r"#define M 392\b", src1) and re.search(r"#define THREADS 256\b", src1)


def test_slices_split_each_chunk_over_more_threads_and_sum_in_shared_memory():
    cfg = dense.DenseConfig(32, 128, 8, 128, 4)
    fn, src = dense.render(R3, 1, cfg)
    assert fn.endswith("_m32n128k8t128s4_b1") and cfg.block_threads == 512
    assert re.search(r"#define THREADS 512\b", src) and re.search(r"#define SLICES 4\b", src)
    assert dense.emitted(R3, 1, cfg).steps[0]["block"] == [512, 1, 1]
    # a split's block adds its slices' partial tiles in its own shared memory (over the stages) and pushes one tile:
    # it receives one partial of its share from every block, as without slices
    assert dense.recv_bytes(cfg) == 32 * 128 * 4 == dense.recv_bytes(dense.DenseConfig(32, 128, 8))
    assert dense.smem_bytes(cfg) == max(dense.smem_bytes(dense.DenseConfig(32, 128, 8)) - dense.recv_bytes(cfg),
                                        4 * 32 * 132 * 4) + dense.recv_bytes(cfg)
    assert "red + (slice * BM" in src and "(rank * SHARE + v - owner * SHARE)" in src and "KS * SLICES" not in src
    assert src.index("red + (slice * BM") < src.index("snn_ksum_push4(recv_s") < src.index("snn_ksum_wait(bar_s)")
    # a lone block (no cluster) with slices sums them in its own shared memory
    fn1, src1 = dense.render(R3, 8, dense.DenseConfig(64, 64, 1, 128, 2))
    assert "cluster.sync" not in src1 and "__cluster_dims__" not in src1 and "red + (slice * BM" in src1
    assert dense.smem_bytes(dense.DenseConfig(64, 64, 1, 128, 2)) >= 2 * 64 * 68 * 4
    with pytest.raises(ValueError, match="slices"):
        dense.render(R3, 1, dense.DenseConfig(32, 64, 4, 128, 3))
    with pytest.raises(ValueError, match="512 threads"):
        dense.render(R3, 1, dense.DenseConfig(64, 64, 4, 256, 4))
    # 512 threads over a chunk's 32 x 32 weights: 256 float4s, not one a thread (the copy plan would stage none)
    with pytest.raises(ValueError, match="16-byte copies over 512 threads"):
        dense.render(GROWTH, 1, dense.DenseConfig(32, 32, 8, 128, 4))
    assert all(c.block_threads <= 256 for c in dense.candidates(GROWTH, 1, tiles=dense.TILES) if c.bn == 32)
    assert all(t * s <= 512 for _, _, t, s in dense.TILES) and {s for *_, s in dense.TILES} == set(dense.SLICES)


def test_the_bundled_kernel_takes_the_sparse_kernels_arguments():
    cfg = dense.DenseConfig(32, 128, 8)
    k = dense.emitted(R1, 1, cfg)
    (step,) = k.steps
    assert k.name == step["function"] == cfg.name(R1, 1) and k.epilogue and k.weight_layout == "CRSN"
    # stride 1, an output the size of its input: it can also take its producer's epilogue (runtime/handoff.py)
    assert step["args"] == CONV_ARGS + IN_ARGS + ZERO_ARGS and step["grid"] == [7, 2, 8] and step["block"] == [128, 1, 1]
    assert dense.emitted(S2, 1, dense.DenseConfig(32, 64, 8)).steps[0]["args"] == CONV_ARGS   # stride 2: not
    assert step["smem"] == dense.smem_bytes(cfg, R1) == dense.smem_bytes(cfg) + 1024 * 4 and step["pdl"]
    assert cfg.to_dict() == {"family": "dense", "bm": 32, "bn": 128, "ks": 8, "threads": 128, "slices": 1,
                             "stages": dense.STAGES, "in_bn": False, "out_ld": False, "mma": False}
    # the time the manifest records: FFMAs a block at 128 a clock, plus a fixed part; more work, more time
    assert 3.0 < dense.predict_us(R1, 1, cfg) < dense.predict_us(R1, 8, dense.DenseConfig(32, 128, 1))


def test_a_pre_activation_kernel_reads_its_input_at_a_pitch_and_takes_the_batchnorm():
    """For a layer that reads a pre-activation (DenseNet's conv1: spec.ConvLayer.bn_input) the kernel takes
    emit.IN_BN_ARGS after the hand-off's, reads the input at in_ld, stages the scale beside the shift, and is named
    apart from the plain kernel of the same shape; stride 2 cannot apply it."""
    shape = ConvShape(1024, 128, 14, 14, 1, 1, (1, 1), (0, 0))
    cands = dense.candidates(shape, 1, in_bn=True)
    assert cands and all(c.in_bn for c in cands)
    assert [dataclasses.replace(c, in_bn=False) for c in cands] == dense.candidates(shape, 1)
    cfg = cands[0]
    k = dense.emitted(shape, 1, cfg)
    assert k.steps[0]["args"] == CONV_ARGS + IN_ARGS + ZERO_ARGS + IN_BN_ARGS
    assert k.name.endswith("bn_b1") and k.name != dense.emitted(shape, 1, dataclasses.replace(cfg, in_bn=False)).name
    assert k.steps[0]["smem"] == dense.smem_bytes(cfg, shape) >= dense.smem_bytes(dataclasses.replace(cfg, in_bn=False), shape) + 1024 * 4
    assert "* in_ld + c0" in k.source and "in_scale" in k.source and "fmaf(v.x, sc.x, t.x)" in k.source
    plain = dense.emitted(shape, 1, dataclasses.replace(cfg, in_bn=False)).source
    assert "in_ld" not in plain and "in_scale" not in plain
    assert dense.candidates(S2, 1, in_bn=True) == []
    with pytest.raises(ValueError, match="stride 1"):
        dense.render(S2, 1, dense.DenseConfig(32, 64, 8, in_bn=True))


def test_narrow_tiles_where_nothing_wider_fits_or_the_wider_ones_leave_most_sms_idle():
    """32-channel tiles (8 threads along N) are the only candidates for 32 output channels, are offered beside the
    wider ones for a 7x7 map's 1x1 (the wider tiles fill 32 of 132 SMs at batch 1) and not where the wider tiles
    fill the GPU; a thread's channels lie 4 * TX apart."""
    assert {(c.bm, c.bn, c.threads, c.slices) for c in dense.candidates(GROWTH, 1)} == \
        set(dense.NARROW_TILES) | set(dense.WARP_NARROW_TILES)
    small = ConvShape(1888, 128, 7, 7, 1, 1, (1, 1), (0, 0))
    tiles = {(c.bm, c.bn, c.threads, c.slices) for c in dense.candidates(small, 1)}
    assert dense.narrow_wanted(small, 1) and tiles == set(dense.CANDIDATE_TILES) | set(dense.NARROW_TILES) | \
        set(dense.WARP_TILES) | set(dense.WARP_NARROW_TILES)
    assert not dense.narrow_wanted(R3, 1) and all(c.bn > 32 for c in dense.candidates(R3, 1))
    # past batch 1 none: a 32-channel conv then has no dense candidate
    assert not dense.narrow_wanted(small, 2) and dense.candidates(GROWTH, 2) == [] and dense.candidates(small, 8)
    # 16 x 32 on the 3x3 @14: 13 tiles, 8 blocks a cluster
    assert dense.DenseConfig(16, 32, 8) in dense.candidates(GROWTH, 1)
    fn, src = dense.render(GROWTH, 1, dense.DenseConfig(16, 32, 8))
    assert re.search(r"#define TX 8\b", src) and "n0 + tx * 4 + 4 * TX * j" not in src   # the split's path
    assert "(kk + k4) * BN + j * 4 * TX" in src
    assert re.search(r"#define TX 16\b", dense.render(R3, 1, dense.DenseConfig(32, 128, 1))[1])


def test_a_concat_slice_kernel_stores_at_the_pitch_it_is_given():
    """For a layer whose output only a concat reads (DenseNet's growth convs: spec.ConvLayer.into_concat) the kernel
    takes emit.OUT_ARGS after the hand-off's and stores pixel m at m * out_ld; the residual stays dense (m * N)."""
    cands = dense.candidates(GROWTH, 1, out_ld=True)
    assert cands and all(c.out_ld for c in cands)
    assert [dataclasses.replace(c, out_ld=False) for c in cands] == dense.candidates(GROWTH, 1)
    k = dense.emitted(GROWTH, 1, cands[0])
    assert k.steps[0]["args"] == CONV_ARGS + IN_ARGS + ZERO_ARGS + OUT_ARGS and k.name.endswith("ld_b1")
    assert "(size_t)m * out_ld + n;" in k.source and "residual + (size_t)m * N + n" in k.source
    plain = dense.emitted(GROWTH, 1, dataclasses.replace(cands[0], out_ld=False)).source
    assert "int out_ld" not in plain and "(size_t)m * N + n;" in plain
    both = dense.emitted(ConvShape(1024, 128, 7, 7, 1, 1, (1, 1), (0, 0)), 1, dense.DenseConfig(16, 32, 8, in_bn=True,
                                                                                             out_ld=True))
    assert both.steps[0]["args"] == CONV_ARGS + IN_ARGS + ZERO_ARGS + OUT_ARGS + IN_BN_ARGS


def test_batch_one_blocks_over_the_whole_k_range_and_warp_tiles_get_the_deeper_pipeline():
    for shape in (ConvShape(128, 512, 28, 28, 1, 1, (1, 1), (0, 0)), R1):
        for b in (1, 8):
            for c in dense.candidates(shape, b):
                deep = b == 1 and (c.ks == 1 or c.threads == 32)
                assert c.stages == (dense.DEEP_STAGES if deep else dense.STAGES), (b, c)
    cands = dense.candidates(ConvShape(128, 512, 28, 28, 1, 1, (1, 1), (0, 0)), 1)
    assert any(c.ks == 1 for c in cands) and any(c.ks > 1 and c.stages == dense.STAGES for c in cands)
    assert any(c.threads == 32 and c.ks > 1 and c.stages == dense.DEEP_STAGES for c in dense.candidates(R1, 1))


@needs_nvcc
def test_kernels_compile_without_spills(tmp_path):
    from snn.codegen.cache import CubinCache
    from snn.codegen.compile import Compiler, problems
    sources = dict(dense.render(shape, b, cfg) for shape, b in [(R3, 1), (S2, 8), (WIDE, 1)]
                   for cfg in dense.candidates(shape, b, tiles=dense.CANDIDATE_TILES + ((32, 128, 128, 4),),
                                               mma_tiles=dense.MMA_TILES))
    sources.update(dense.render(shape, 1, cfg) for shape in (R1, ConvShape(1792, 896, 14, 14, 1, 1, (1, 1), (0, 0)))
                   for cfg in dense.candidates(shape, 1, in_bn=True, mma_tiles=dense.MMA_TILES))
    sources.update(dense.render(shape, 1, cfg) for shape in (GROWTH, ConvShape(128, 32, 56, 56, 3, 3, (1, 1), (1, 1)),
                                                             ConvShape(128, 64, 28, 28, 3, 3, (1, 1), (1, 1)))
                   for cfg in dense.candidates(shape, 1, out_ld=True, mma_tiles=dense.MMA_TILES))
    sources.update(dense.render(shape, 1, cfg) for shape in [ConvShape(1888, 128, 7, 7, 1, 1, (1, 1), (0, 0))]
                   for cfg in dense.candidates(shape, 1, in_bn=True))
    records = Compiler(CubinCache(tmp_path)).compile(sources, "sm_90").records
    for fn, rec in records.items():
        assert not problems(rec), (fn, problems(rec))
        assert fn in rec["functions"] and rec["functions"][fn]["entry"]


NET = """\
name: dense32
input: {name: image, shape: [3, 12, 12]}
nodes:
  - {name: stem, op: conv, input: image, in_channels: 3, out_channels: 64, kernel: 3, padding: 1}
  - {name: r0, op: relu, input: stem}
  - {name: a, op: conv, input: r0, in_channels: 64, out_channels: 128, kernel: 3, padding: 1}
  - {name: ra, op: relu, input: a}
  - {name: b, op: conv, input: ra, in_channels: 128, out_channels: 32, kernel: 1}
"""


@needs_nvcc
def test_fp32_build_offers_the_dense_kernels_beside_each_levels_pick(tmp_path, monkeypatch):
    from snn.codegen import build as build_mod
    from snn.codegen import bundle
    from snn.codegen.spec import load_spec
    from snn.runtime import manifest, tuning
    from test_runtime_cpu import H100_CC
    monkeypatch.setenv("SNN_CACHE_DIR", str(tmp_path / "cubins"))
    spec = tmp_path / "dense32.yaml"
    spec.write_text(NET)
    shape_a = load_spec(spec).convs[1].shape
    cands = dense.candidates(shape_a, 1)
    assert len(cands) == len(dense.CANDIDATE_TILES) + len(dense.WARP_TILES)
    spilled = cands[0].name(shape_a, 1)   # as if ptxas had spilled one of them
    pretend_spilled(monkeypatch, spilled)
    r = build_mod.build_spec(str(spec), "h100", [1, 16], out=tmp_path / "gen", levels="0.5,0.7")
    m = r.manifest
    layers = {lay["name"]: lay for lay in m["layers"]}
    offered = [c.name(shape_a, 1) for c in cands[1:]]
    for lk, lv in layers["a"]["batches"]["1"]["levels"].items():
        names = [c["kernel"] for c in lv["candidates"]]
        assert names[0] == lv["kernel"] and names[0].startswith("sconv_") and names[1:] == offered
        assert all(c["predicted_us"] > 0 for c in lv["candidates"])
    assert "candidates" not in layers["a"]["batches"]["16"]["levels"]["0.50"]   # batch 16 > MAX_BATCH: sparse only
    # N = 32: the 32-channel tiles
    shape_b = load_spec(spec).convs[2].shape
    assert [c["kernel"] for c in layers["b"]["batches"]["1"]["levels"]["0.50"]["candidates"][1:]] == [
        c.name(shape_b, 1) for c in dense.candidates(shape_b, 1)] and dense.candidates(shape_b, 1)[0].bn == 32
    assert spilled not in m["kernels"] and "1 dense kernels left out (they spill)" in r.summary()
    for name in offered:
        k = m["kernels"][name]
        assert k["config"]["family"] == "dense" and k["epilogue"] and k["weight_layout"] == "CRSN"
        assert k["steps"][0]["args"] == CONV_ARGS + IN_ARGS + ZERO_ARGS and k["registers"] > 0 and k["batch"] == 1
    assert not bundle.verify(r.manifest_path.parent, m)
    # calibrate's measurements pick the dense kernel where it measured faster, and the layer runs it at any sparsity
    meas = {}
    for lk in ("0.50", "0.70"):
        for c in layers["a"]["batches"]["1"]["levels"][lk]["candidates"]:
            us = 5.0 if c["kernel"] == offered[0] else 9.0
            meas[tuning.kernel_key(m, shape_a.tag(), 1, float(lk), c["kernel"])] = {
                "sparse_us": us, "dense_us": 20.0, "rel_err_vs_cudnn_fp32": 1e-7}
    rows = tuning.apply(m, meas, load_spec(spec))
    entry = next(lay for lay in m["layers"] if lay["name"] == "a")["batches"]["1"]
    assert entry["levels"]["0.50"]["kernel"] == offered[0] == entry["static_kernel"]
    assert any(row["layer"] == "a" and row["static"] for row in rows)
    cache = manifest.load(r.manifest_path, load_spec(spec), str(spec), 1, H100_CC)
    assert cache.kernel(offered[0])["steps"][0]["function"] == offered[0]


def test_warp_tiles_give_each_warp_the_whole_tile_over_its_share_of_a_chunk():
    """A warp tile (threads = 32): 8 threads along N of 4-channel runs 32 apart, 4 rows of pixels, each of the
    `slices` warps over BK / slices of a chunk's channels, summed like slices; at batch 1 only, where they fit."""
    cfg = dense.DenseConfig(32, 64, 8, 32, 4, in_bn=True)
    assert cfg.tx == dense.WARP_TX == 8 and cfg.block_threads == 128 and cfg.tag() == "m32n64k8t32s4bn"
    src = dense.render(R1, 1, cfg)[1]
    for define in ("TT 32 ", "SLICES 4", "TX 8 ", "THREADS 128"):
        assert re.search(rf"#define {define}", src), define
    assert dense.DenseConfig(32, 64, 1).tx == 16     # the 128-thread tile of the same shape: 16 along N
    # 28 tiles: 4 blocks each, four stages (a warp tile at batch 1)
    assert dataclasses.replace(cfg, ks=4, stages=dense.DEEP_STAGES) in dense.candidates(R1, 1, in_bn=True)
    assert all(c.threads != 32 for c in dense.candidates(R1, 8))
    # only where the K range is split WARP_MIN_SPLIT ways or more: at 56x56 98 tiles leave no split
    unsplit = ConvShape(64, 64, 56, 56, 3, 3, (1, 1), (1, 1))
    assert dense.WARP_MIN_SPLIT == 4 and all(c.threads != 32 for c in dense.candidates(unsplit, 1))
    with pytest.raises(ValueError, match="accumulators"):      # 64 x 64 over a warp: 128 a thread
        dense.render(R1, 1, dense.DenseConfig(64, 64, 8, 32, 4))
    with pytest.raises(ValueError, match="a warp tile takes 4 or 8 slices"):
        dense.render(R1, 1, dense.DenseConfig(32, 64, 8, 32, 2))
    with pytest.raises(ValueError, match="32, 128 or 256 threads"):
        dense.render(R1, 1, dense.DenseConfig(32, 64, 8, 64, 2))


def test_mma_tiles_put_the_products_on_the_tensor_cores_in_three_tf32_parts():
    """A 3xTF32 tile: each operand split into a TF32 high part and a TF32 rest, three m16n8k8 products a fragment
    (the rest x rest one dropped), four warps a slice each the tile's pixels x a quarter of its channels, the
    fragments stored into the slices' partial tiles for the same sums and epilogue; offered beside the FFMA tiles
    where asked for."""
    cfg = dense.DenseConfig(32, 128, 8, mma=True)
    assert cfg.tag() == "m32n128k8t128x3" and cfg.to_dict()["mma"]
    fn, src = dense.render(R3, 1, cfg)
    assert fn == "dconv_r3s3_str1_pad1_c256n256_h14w14_m32n128k8t128x3_b1"
    assert src.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == 1 and "+ 0x1000u) & 0xffffe000u" in src
    assert re.search(r"snn_mma_tf32\(d, al, bh\);\s+snn_mma_tf32\(d, ah, bl\);\s+snn_mma_tf32\(d, ah, bh\);", src)
    # a chunk's products go into zeroed fragments, added to the accumulators in FP32 after it: an mma truncates
    # what it adds, and over a whole K that took the tiles ~10x further from cuDNN FP32 than the FFMA ones
    assert "snn_mma3(part[i][j]" in src and "snn_mma3(acc" not in src
    assert re.search(r"float part\[MT\]\[NT\]\[4\] = \{\};(.|\n)*acc\[i\]\[j\]\[e\] \+= part\[i\]\[j\]\[e\];", src)
    for define in (r"LDB \(BN \+ 8\)", r"MT \(BM / 16\)", r"NT \(BN / 32\)", r"RED \(SLICES \* BM \* LDR\)"):
        assert re.search(rf"#define {define}", src), define
    assert "fmaf(v, b[j].x" not in src and "snn_ksum_push4(recv_s" in src and "red + (slice * BM + i * 16 + gid)" in src
    ffma = dense.render(R3, 1, dense.DenseConfig(32, 128, 8))[1]
    assert "mma.sync" not in ffma and "#define LDB" not in ffma and "fmaf(v, b[j].x" in ffma
    # a lone block sums its one slice's fragments in shared memory as the slices' path does; rows past M stay out
    fn1, src1 = dense.render(S2, 8, dense.DenseConfig(64, 64, 1, 128, 2, mma=True))
    assert "__cluster_dims__" not in src1 and "partial(v)" in src1 and "red + (slice * BM + i * 16 + gid)" in src1
    # the padded weight rows and the fragments' partial tiles are in the shared memory the step asks for
    assert dense.smem_bytes(cfg, R3) == dense.smem_bytes(dense.DenseConfig(32, 128, 8), R3) + 3 * 32 * 8 * 4
    lone = dense.DenseConfig(64, 64, 1, 128, 1, mma=True)
    assert dense.smem_bytes(lone) == max(3 * (64 * 36 + 32 * 72) * 4, 64 * 68 * 4)
    # asked for (`build --tf32x3`), offered beside the FFMA tiles at every batch the kernel is, with their K splits
    for b in (1, 8):
        cands = dense.candidates(R3, b, mma_tiles=dense.MMA_TILES)
        mma = [c for c in cands if c.mma]
        assert {(c.bm, c.bn, c.threads, c.slices) for c in mma} == set(dense.MMA_TILES)
        assert [c for c in cands if not c.mma] == dense.candidates(R3, b)
        for c in mma:
            assert c.ks == dense._split(R3, b, c.bm, c.bn, 132, True)[1]
    assert not any(c.mma for c in dense.candidates(R3, 1))        # not asked for: none
    # the tensor cores' three products price below the FFMAs they replace
    ffma8 = dense.predict_us(R3, 8, dense.DenseConfig(32, 128, 1))
    assert 3.0 < dense.predict_us(R3, 8, dataclasses.replace(cfg, ks=1)) < ffma8
    with pytest.raises(ValueError, match="four warps a slice"):
        dense.render(R3, 1, dense.DenseConfig(32, 64, 8, 32, 4, mma=True))
    with pytest.raises(ValueError, match="four warps a slice"):
        dense.render(R3, 1, dense.DenseConfig(32, 64, 4, 256, 1, mma=True))


@needs_nvcc
def test_tf32x3_build_offers_the_3xtf32_tiles_too(tmp_path, monkeypatch):
    """`snn-codegen build --tf32x3`: every layer the dense kernel takes is offered its 3xTF32 tiles beside the FFMA
    tiles, after the sparse pick, compiled without spills and recorded with their config; a rebuild without the
    option is not up to date and has none; a GPU before sm_80 refuses it."""
    from snn.codegen import build as build_mod
    from snn.codegen.errors import UserError
    from snn.codegen.spec import load_spec
    monkeypatch.setenv("SNN_CACHE_DIR", str(tmp_path / "cubins"))
    spec = tmp_path / "dense32.yaml"
    spec.write_text(NET)
    shape_a = load_spec(spec).convs[1].shape
    r = build_mod.build_spec(str(spec), "h100", [1], out=tmp_path / "gen", levels="0.5", tf32x3=True)
    m = r.manifest
    layer_a = next(lay for lay in m["layers"] if lay["name"] == "a")
    offered = [c["kernel"] for c in layer_a["batches"]["1"]["levels"]["0.50"]["candidates"]]
    mma = [c.name(shape_a, 1) for c in dense.candidates(shape_a, 1, mma_tiles=dense.MMA_TILES) if c.mma]
    assert mma and set(mma) <= set(offered) and offered[0].startswith("sconv_")
    for name in mma:
        k = m["kernels"][name]
        assert k["config"]["mma"] and k["config"]["family"] == "dense" and k["registers"] > 0
    plain = build_mod.build_spec(str(spec), "h100", [1], out=tmp_path / "gen", levels="0.5")
    assert not plain.up_to_date and not any(k.get("config", {}).get("mma") for k in plain.manifest["kernels"].values())
    with pytest.raises(UserError, match=r"^--tf32x3: v100 \(sm_70\) has no TF32 tensor cores"):
        build_mod.build_spec(str(spec), "v100", [1], out=tmp_path / "gen", tf32x3=True)
