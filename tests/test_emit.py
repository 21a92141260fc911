"""Rendering contracts of codegen/emit.py, and nvcc: kernels of every ResNet-50 shape spill-free."""
import dataclasses
import os
import re
import shutil

import pytest
from kernel_cases import (RESNET50, cluster_cases, concat_slice_cases, example_configs, resnet50_cases,
                          sixteen_bit_cases)
from nvcc_units import compile_units

from snn.codegen import direct, emit
from snn.codegen.config import KernelConfig
from snn.codegen.spec import ConvShape, load_spec

S3 = ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1))


def test_render_sparse_contract():
    cfg = KernelConfig(7, 7, 32, 64, 2)
    k = emit.render_sparse(S3, 1, cfg)
    assert k.name == cfg.name(S3, 1) and k.weight_layout == "CRSN" and k.workspace == {}
    sig = re.search(r'extern "C" __global__ void[^\n]*\n' + re.escape(k.name) + r"\(([^)]*)\)", k.source)
    assert sig, "kernel must be extern C with the config name"
    params = [" ".join(p.split()) for p in sig.group(1).split(",")]
    # sizes are constants: pointers, the relu flag, and (stride 1, same size) the producer's epilogue's pointers
    # and a range to zero
    assert len(params) == len(emit.CONV_ARGS) + len(emit.IN_ARGS) + len(emit.ZERO_ARGS) == 11
    assert [p.rsplit(" ", 1)[1].lstrip("*") for p in params] == emit.CONV_ARGS + emit.IN_ARGS + emit.ZERO_ARGS
    assert params[6] == "int relu" and params[10] == "long long zero_total"
    assert all("*" in p for p in params[:6] + params[7:10])
    # 256 channels in tiles of 32: partial sums meet in atomics in the runtime's zeroed accumulator, passed
    # where the output goes; the runtime's epilogue reads them into the output (no memset step)
    assert len(k.steps) == 1 and not k.epilogue
    launch = k.steps[0]
    assert launch["function"] == k.name
    assert launch["args"] == ["input", "weight", "accumulator", *emit.CONV_ARGS[3:], *emit.IN_ARGS, *emit.ZERO_ARGS]
    assert emit.ACCUMULATOR == "accumulator"
    assert launch["grid"] == [4, (256 // 128) * (256 // 32), 1] and launch["block"] == [64, 1, 1]
    assert "atomicAdd(reinterpret_cast<float2*>(output + e), o);" in k.source and "#define NPIX 81" in k.source
    assert "if (relu)" not in k.source


def test_one_channel_tile_stores_directly_with_its_epilogue():
    k = emit.render_sparse(S3, 8, KernelConfig(4, 8, 256, 128, 2))
    assert [s["op"] for s in k.steps] == ["launch"] and k.workspace == {} and k.epilogue
    assert k.steps[0]["grid"] == [4 * 2, 1, 8]
    assert "atomicAdd(reinterpret_cast" not in k.source and "if (relu) o = snn_relu(o);" in k.source
    assert "*reinterpret_cast<float2*>(output + e) = o;" in k.source  # nt 2: vector stores (vec)
    assert "if (residual) o = snn_add(o, *reinterpret_cast<const float2*>(residual + e));" in k.source
    assert "b0[k] = bias != nullptr && n < N ? bias[n] : 0.f;" in k.source   # the accumulators start at the bias
    scalar = emit.render_sparse(S3, 8, KernelConfig(4, 8, 256, 128, 1)).source  # nt 1: scalar
    assert "*reinterpret_cast<float*>(output + e) = o;" in scalar


def test_a_clusters_split_sums_on_chip_with_its_epilogue():
    # 256 channels in 8 tiles of 32 = one cluster of 8 blocks along grid y: no memset, no atomics, epilogue fused
    k = emit.render_sparse(S3, 1, KernelConfig(7, 7, 32, 64, 2, cluster=True))
    assert k.name.endswith("_th7tw7tc32_t64n2_cl_b1") and [s["op"] for s in k.steps] == ["launch"] and k.epilogue
    assert k.steps[0]["grid"] == [4, (256 // 128) * 8, 1]
    assert "__cluster_dims__(1, 8, 1) __launch_bounds__" in k.source and "atomicAdd(reinterpret_cast" not in k.source
    assert "tile_c = blockIdx.y % 8, tile_n = blockIdx.y / 8" in k.source   # a cluster = the channel tiles of a tile
    assert "acc[i][j][k] = 0.f;" in k.source and "b0[k]" not in k.source    # the bias joins the sum once
    assert k.source.count("cluster.sync();") == 2                           # 49 x 128 floats fit: one round
    assert "*reinterpret_cast<float4*>(output + e) = o;" in k.source         # N % 4 == 0: float4 sums
    # the same config without `cluster` adds with atomics
    assert emit.ACCUMULATOR in emit.render_sparse(S3, 1, KernelConfig(7, 7, 32, 64, 2)).steps[0]["args"]
    # rounds: a 1x7 nt 4 tile (896 floats) through 736 floats of staging
    two = emit.render_sparse(ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), 1,
                             KernelConfig(1, 7, 128, 32, 4, cluster=True)).source
    assert two.count("cluster.sync();") == 4 and "if (lp < 5 || lp >= 7) continue;" in two   # 5 pixels, then 2
    # past 8 blocks, or a C that one block owns: no cluster
    for cfg in (KernelConfig(7, 7, 16, 64, 2, cluster=True), KernelConfig(7, 7, 256, 64, 2, cluster=True)):
        with pytest.raises(ValueError, match="no cluster reduction"):
            emit.render_sparse(S3, 1, cfg)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (install the CUDA toolkit to run)")
@pytest.mark.parametrize("cases", [cluster_cases, sixteen_bit_cases, concat_slice_cases],
                         ids=["cluster", "sixteen_bit", "concat_slice"])
def test_case_kernels_compile_without_spills(cases):
    kernels = [k for k, _, _ in cases()]
    report = compile_units([k.source for k in kernels], max(1, min(4, os.cpu_count() or 1)))
    assert set(report) == {k.name for k in kernels}
    assert not {n: r for n, r in report.items() if r["stack"] or r["spill_stores"] or r["spill_loads"]}


def test_sixteen_bit_render():
    """16-bit activations: the name says the precision; the input tile is 16-bit (cp.async 8 values a copy where
    C % 8 == 0, plain 2-byte copies otherwise), tested by its bits without the sign; a fused store rounds to 16
    bits and counts the zeros stored, with a 16-bit residual; a split adds into the FP32 accumulator."""
    s1 = ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0))
    split = emit.render_sparse(s1, 1, KernelConfig(1, 7, 32, 64, 4), "bf16")
    assert split.name == KernelConfig(1, 7, 32, 64, 4).name(s1, 1) + "_bf16" and split.precision == "bf16"
    assert split.name == emit.kernel_name(s1, 1, KernelConfig(1, 7, 32, 64, 4), "bf16")
    assert "const __nv_bfloat16* __restrict__ input" in split.source and "float* __restrict__ output" in split.source
    assert "__shared__ __align__(16) __nv_bfloat16 xs[NPIX * KC];" in split.source
    assert "snn_cp16(xs + e * 8," in split.source and "& 0x7fffu) != 0u) m |= 1u << k;" in split.source
    assert "ld.volatile.shared.u16" in split.source and "snn_bf2f(xh" in split.source       # batch 1: hoisted
    assert "atomicAdd(reinterpret_cast<float4*>(output + e), o);" in split.source and not split.epilogue
    assert emit.ACCUMULATOR in split.steps[0]["args"]
    fused = emit.render_sparse(ConvShape(256, 1024, 14, 14, 1, 1, (1, 1), (0, 0)), 3, KernelConfig(2, 4, 256, 32, 8),
                               "fp16")
    assert "__half* __restrict__ output" in fused.source and "const __half* __restrict__ residual" in fused.source
    assert "cnt += snn_st16(output + e, o);" in fused.source and "snn_ld16(residual + e, o)" in fused.source
    assert "snn_h2f(reinterpret_cast<const unsigned short*>(xc)" in fused.source and fused.epilogue   # batch 3
    ragged = emit.render_sparse(ConvShape(20, 40, 9, 11, 3, 3, (2, 2), (1, 1)), 1, KernelConfig(3, 4, 20, 32, 1), "bf16")
    assert "snn_cp16(xs" not in ragged.source and "reinterpret_cast<unsigned short*>(xs)[e] =" in ragged.source
    for cfg in (KernelConfig(4, 4, 64, 32, 4, 2, 2), KernelConfig(7, 7, 32, 64, 2, cluster=True)):
        with pytest.raises(ValueError, match="classic kernels without clusters"):
            emit.render_sparse(S3, 1, cfg, "fp16")
    with pytest.raises(ValueError, match="precision must be one of"):
        emit.render_sparse(S3, 1, KernelConfig(7, 7, 32, 64, 2), "fp8")


def test_pixels_that_feed_no_output_are_not_tested():
    shape = ConvShape(64, 64, 10, 10, 1, 1, (2, 2), (0, 0))
    k = emit.render_sparse(shape, 8, KernelConfig(2, 2, 32, 64, 1))
    # in-tile 3x3, only pixels 0, 2, 6, 8 feed an output of a 1x1 stride-2 conv: one bit test each
    assert [int(b) for b in re.findall(r"if \(m\[0\] & (\d+)u\)", k.source)] == [1, 4, 64, 256]


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="threads"):
        emit.render_sparse(S3, 1, KernelConfig(4, 4, 32, 48, 1))
    with pytest.raises(ValueError, match="larger than"):
        emit.render_sparse(S3, 1, KernelConfig(16, 4, 32, 64, 1))


def test_guards_only_where_needed():
    ragged = emit.render_sparse(ConvShape(20, 40, 9, 11, 3, 3, (1, 1), (1, 1)), 1, KernelConfig(4, 4, 20, 32, 1))
    assert "if (p0 + i >= P) break;" in ragged.source and "if (n0 + 0 * THREADS < N)" in ragged.source
    assert "snn_cp16(xs" in ragged.source  # C % 4 == 0 and KC = 20: 16-byte copies
    odd_c = emit.render_sparse(ConvShape(3, 64, 20, 20, 7, 7, (2, 2), (3, 3)), 1, KernelConfig(4, 4, 3, 64, 1))
    assert "snn_cp16(xs" not in odd_c.source and "snn_cp4(xs" in odd_c.source  # C = 3: 4-byte copies
    exact = emit.render_sparse(S3, 1, KernelConfig(7, 7, 32, 128, 2))
    assert "p0 + i >= P" not in exact.source and "< N)" not in exact.source


def test_render_epilogue():
    name, src = emit.render_epilogue()
    assert name == "snn_epilogue"
    flat = " ".join(src.split())
    assert ('extern "C" __global__ void __launch_bounds__(1024) snn_epilogue(float* in, const float* scale, '
            'const float* shift, const float* residual, float* out, unsigned long long* zeros, long long total, '
            'int C, int relu, int clear, float* zero, long long zero_total, int in_ld)') in flat
    assert emit.EPILOGUE_ZERO_RANGE and "reinterpret_cast<float4*>(zero)[i] = make_float4(0.f, 0.f, 0.f, 0.f);" in src
    assert "float4" in src and "atomicAdd(zeros" in src
    # in is read at its own pixel pitch (in_ld); out stays dense; the vector path needs the pitch aligned too
    assert emit.EPILOGUE_IN_LD and "float* src = in + px * in_ld + c;" in flat and "(in_ld % 4 == 0)" in flat
    # clear: the accumulator read is zeroed before out is stored (in and out may alias: out wins)
    assert flat.index("if (clear) *src = 0.f;") < flat.index("out[i] = v;")


def test_every_kernel_waits_for_its_predecessor_before_it_reads_activations():
    """Each kernel may be launched as a programmatic dependent (its step says "pdl"): one griddepcontrol.wait,
    sm_90+ only, before its first access to what an earlier kernel writes (the input tile, the accumulator,
    the counters); before it, only indices, the bias and the weight ring's first copies."""
    kernels = [emit.render_sparse(S3, 1, KernelConfig(2, 2, 64, 64, 4)),          # classic, a channel split
               emit.render_sparse(S3, 8, KernelConfig(2, 2, 256, 64, 2)),         # classic, fused epilogue
               emit.render_sparse(S3, 8, KernelConfig(2, 2, 64, 32, 4, 2, 2)),    # warp-tiled
               emit.render_sparse(S3, 1, KernelConfig(2, 2, 64, 64, 4, cluster=True)),
               emit.render_sparse(S3, 1, KernelConfig(2, 2, 256, 64, 2), "bf16")]
    for k in kernels:
        assert all(step["pdl"] is emit.PDL for step in k.steps)
        src = k.source
        assert src.count("griddepcontrol.wait;") == 1, k.name
        wait = src.index("griddepcontrol.wait;")
        assert src.rindex("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900", 0, wait) > src.index(k.name)
        first_input = min(i for i in (src.find("fill_input(c0);"), src.find("fill_x(0, c_begin);")) if i >= 0)
        assert wait < first_input, k.name
        if "fill_w(0, c_begin);" in src:   # warp-tiled: its first chunk's weights requested before the wait
            assert src.index("fill_w(0, c_begin);") < wait, k.name
    assert "fill_w(0, c_begin);" in kernels[2].source
    # the image's conv (codegen/direct.py): its weights before the wait, the image after
    src = direct.emitted(ConvShape(3, 64, 32, 32, 7, 7, (2, 2), (3, 3)), 1).source
    wait = src.index("griddepcontrol.wait;")
    assert src.count("griddepcontrol.wait;") == 1 and src.index("snn_cp16(ws") < wait < src.index("snn_cp4(xs")
    assert emit.PDL
    for src, first_read in ((emit.render_epilogue()[1], "float4 v = *src;"),
                            (emit.render_selector()[1], "(double)(*zeros)")):
        assert src.count("griddepcontrol.wait;") == 1 and src.index("griddepcontrol.wait;") < src.index(first_read)


def test_kernels_take_their_producers_epilogue_where_each_pixel_has_one_owner():
    """Stride-1, same-size FP32 kernels (classic and warp-tiled, split or not) take in_shift / in_zeros after
    the epilogue's arguments (emit.IN_ARGS) and apply them only while in_shift is non-null; others do not."""
    s2 = ConvShape(64, 64, 14, 14, 3, 3, (2, 2), (1, 1))
    takes = [emit.render_sparse(S3, 1, KernelConfig(2, 2, 64, 64, 4)),
             emit.render_sparse(S3, 8, KernelConfig(2, 2, 256, 64, 2)),
             emit.render_sparse(S3, 8, KernelConfig(2, 2, 64, 32, 4, 2, 2))]
    not_taking = [emit.render_sparse(s2, 1, KernelConfig(2, 2, 16, 64, 1)),
                  emit.render_sparse(S3, 1, KernelConfig(2, 2, 256, 64, 2), "bf16"),
                  emit.render_sparse(S3, 1, KernelConfig(2, 2, 64, 64, 4, cluster=True))]
    for k in takes:
        assert k.steps[0]["args"][-4:] == emit.IN_ARGS + emit.ZERO_ARGS, k.name
        assert "const float* __restrict__ in_shift, unsigned long long* __restrict__ in_zeros," in k.source
        assert "float* __restrict__ zero, long long zero_total)" in k.source
        assert k.source.index("griddepcontrol.wait") < k.source.index("reinterpret_cast<float4*>(zero)[i]")
        assert "if (in_shift != nullptr) {" in k.source and "atomicAdd(in_zeros" in k.source
    for k in not_taking:
        assert not set(emit.IN_ARGS + emit.ZERO_ARGS) & set(k.steps[0]["args"]) and "in_shift" not in k.source, k.name


def test_1x1_kernels_also_add_their_producers_residual_and_store_their_input():
    """1x1 kernels that take their producer's epilogue also take in_res / in_out (emit.IN_RES_ARGS) last: the
    residual added while staging where in_res is non-null, the finished input stored by n tile 0's blocks where
    in_out is; 3x3 kernels do not (the registers would cost them occupancy)."""
    s1 = ConvShape(256, 64, 14, 14, 1, 1, (1, 1), (0, 0))
    for k in (emit.render_sparse(s1, 1, KernelConfig(1, 7, 64, 32, 2)),
              emit.render_sparse(s1, 1, KernelConfig(1, 7, 64, 32, 2, 2, 2))):
        assert k.steps[0]["args"][-6:] == emit.IN_ARGS + emit.IN_RES_ARGS + emit.ZERO_ARGS, k.name
        assert "const float* __restrict__ in_res, float* __restrict__ in_out," in k.source
        assert "in_res != nullptr ? in_res[gi] : 0.f" in k.source
        assert "if (in_out != nullptr && tile_n == 0) in_out[gi] = v;" in k.source
    k = emit.render_sparse(S3, 8, KernelConfig(2, 2, 64, 32, 4, 2, 2))
    assert k.steps[0]["args"][-4:] == emit.IN_ARGS + emit.ZERO_ARGS and "in_res" not in k.source


def test_out_ld_kernels_store_at_the_pixel_pitch_they_are_given():
    """A config with out_ld (KernelConfig: planned for layers only concats read) takes out_ld last
    (emit.OUT_ARGS), its stores and a split's atomics at out_ld elements a pixel: the channel slice of a concat's
    buffer; its name says so (_ld). Without it the stores index a dense output, N a constant; 16-bit and cluster
    configs cannot have it."""
    s2 = ConvShape(64, 64, 14, 14, 3, 3, (2, 2), (1, 1))
    pitched = "const size_t e0 = ((size_t)b * P * Q + (size_t)(p0 + i) * Q + (q0 + j)) * out_ld + n0;"
    for shape, b, cfg in ((s2, 1, KernelConfig(2, 2, 16, 64, 1)),            # a split, no hand-off
                          (S3, 1, KernelConfig(2, 2, 256, 64, 2)),           # stores itself, with the hand-off's
                          (S3, 8, KernelConfig(2, 2, 64, 32, 4, 2, 2))):     # warp-tiled split
        k = emit.render_sparse(shape, b, dataclasses.replace(cfg, out_ld=True))
        assert k.name == cfg.name(shape, b).replace(f"_b{b}", f"_ld_b{b}") and k.steps[0]["args"][-1] == "out_ld", k.name
        assert "int out_ld)" in k.source and pitched in k.source, k.name
        plain = emit.render_sparse(shape, b, cfg)
        assert "out_ld" not in plain.steps[0]["args"] and "out_ld" not in plain.source
        assert pitched.replace("out_ld", "N") in plain.source
        assert KernelConfig.from_dict(dataclasses.replace(cfg, out_ld=True).to_dict()).out_ld
        assert "out_ld" not in cfg.to_dict()
    for precision, cfg in (("bf16", KernelConfig(2, 2, 256, 64, 2, out_ld=True)),
                           ("fp32", KernelConfig(2, 2, 64, 64, 4, cluster=True, out_ld=True))):
        with pytest.raises(ValueError, match="out_ld"):
            emit.render_sparse(S3, 1, cfg, precision)


def test_the_runtime_knows_each_kernels_store_vector():
    """kernels.store_vector (what a concat slice's pitch and offset must be multiples of: kernels.slice_aligned)
    names the vector each template stores and adds with: classic by nt where N allows it, warp-tiled by nt, the
    dense kernel float4."""
    from snn.codegen import dense
    from snn.runtime.kernels import store_vector
    odd = ConvShape(128, 36, 14, 14, 3, 3, (1, 1), (1, 1))
    vector = {1: "float", 2: "float2", 4: "float4"}
    cases = [(S3, KernelConfig(2, 2, 256, 64, 2)), (S3, KernelConfig(2, 2, 256, 64, 4)), (S3, KernelConfig(2, 2, 16, 64, 1)),
             (odd, KernelConfig(2, 2, 16, 32, 8)), (S3, KernelConfig(2, 2, 64, 32, 4, 2, 2)),
             (S3, KernelConfig(2, 2, 64, 32, 1, 2, 2)), (S3, KernelConfig(2, 2, 64, 32, 2, 2, 2))]
    seen = set()
    for shape, cfg in cases:
        k = emit.render_sparse(shape, 1, dataclasses.replace(cfg, out_ld=True))
        v = store_vector({"config": cfg.to_dict(), "shape": {"N": shape.N}})
        assert set(re.findall(r"\b(float[24]?) o = ", k.source)) == {vector[v]}, k.name
        seen.add(v)
    assert seen == {1, 2, 4}
    cfg = dense.DenseConfig(16, 32, 8, out_ld=True)
    src = dense.render(ConvShape(128, 32, 14, 14, 3, 3, (1, 1), (1, 1)), 1, cfg)[1]
    assert store_vector({"config": cfg.to_dict(), "shape": {"N": 32}}) == 4 and "float4*>(output + e) = o" in src


def test_in_bn_kernels_read_a_pre_activation_at_the_pitch_they_are_given():
    """A config with in_bn (KernelConfig: planned for layers whose input is a pre-activation, spec.ConvLayer.bn_input)
    takes in_scale and in_ld last (emit.IN_BN_ARGS): its input read at in_ld floats a pixel, each staged value
    relu(fmaf(x, scale, shift)) (scale 1 where in_scale is null); its name says so (_bn). Without it the source is
    as before, C a constant. Only input_epilogue kernels (stride 1, same size, no cluster, FP32) can have it."""
    s1 = ConvShape(256, 128, 14, 14, 1, 1, (1, 1), (0, 0))
    for shape, b, cfg, fma in ((s1, 1, KernelConfig(1, 14, 16, 64, 2), "fmaf(v, sc, t)"),     # classic split
                               (S3, 8, KernelConfig(2, 2, 64, 32, 4, 2, 2), "fmaf(xw[pix * XSTR + cc], in_scale"),
                               (s1, 1, KernelConfig(2, 7, 256, 32, 4, out_ld=True), "fmaf(v, sc, t)")):
        bn = dataclasses.replace(cfg, in_bn=True)
        k = emit.render_sparse(shape, b, bn)
        assert k.name == cfg.name(shape, b).replace(f"_b{b}", f"_bn_b{b}") and k.steps[0]["args"][-2:] == emit.IN_BN_ARGS
        assert "const float* __restrict__ in_scale, int in_ld)" in k.source and fma in k.source, k.name
        assert "in_b = input + (size_t)b * H * W * in_ld;" in k.source
        plain = emit.render_sparse(shape, b, cfg)
        assert "in_ld" not in plain.source and "in_scale" not in plain.source
        assert "in_b = input + (size_t)b * H * W * C;" in plain.source
        assert KernelConfig.from_dict(bn.to_dict()) == bn and "in_bn" not in cfg.to_dict()
    for shape, precision, cfg in ((S3, "bf16", KernelConfig(2, 2, 256, 64, 2, in_bn=True)),
                                  (S3, "fp32", KernelConfig(2, 2, 64, 64, 4, cluster=True, in_bn=True)),
                                  (ConvShape(64, 64, 14, 14, 3, 3, (2, 2), (1, 1)), "fp32", KernelConfig(2, 2, 16, 64, 1, in_bn=True))):
        with pytest.raises(ValueError, match="in_bn"):
            emit.render_sparse(shape, 1, cfg, precision)


# ------------------------------------------------------------------ nvcc

def _kernels():
    """Both example configs of every ResNet-50 shape at batch 1 (hoisted loads), and at batch 32 (plain)
    on one shape of each kind."""
    ks = [k for k, _, _ in resnet50_cases()]
    shapes = load_spec(RESNET50).conv_shapes()
    ks += [emit.render_sparse(sh, 32, example_configs(sh)[0]) for sh in shapes[:4]]
    return ks


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (install the CUDA toolkit to run)")
def test_resnet50_kernels_compile_without_spills():
    kernels = _kernels()
    epi = emit.render_epilogue()
    sources = [k.source for k in kernels] + [epi[1]]
    names = {k.name for k in kernels} | {epi[0]}
    assert len(names) == len(sources)
    report = compile_units(sources, max(1, min(16, os.cpu_count() or 1)))
    assert set(report) == names
    bad = {n: r for n, r in report.items() if r["stack"] or r["spill_stores"] or r["spill_loads"]}
    assert not bad, f"kernels with stack or spills: {bad}"
    assert all(0 < r["registers"] <= 255 for r in report.values())
