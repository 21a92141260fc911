"""Warp-tiled blocks (KernelConfig wh*ww > 1, sparse_conv_ws.cu.j2): several register tiles a block sharing
one staged copy of input and weights. Config naming, the emitter's contract with the launch and the cost
model's resource rules, and nvcc (0 spills / 0 stack). The planner's family rules: tests/test_plan_space.py."""
import os
import shutil

import pytest
from kernel_cases import warp_tiled_cases
from nvcc_units import compile_units

from snn.codegen import emit, kernel_rules
from snn.codegen.config import KernelConfig
from snn.codegen.plan import estimate_resources
from snn.codegen.plan.resources import REG_BASE
from snn.codegen.spec import ConvShape

S14 = ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1))
RAGGED = ConvShape(36, 40, 9, 11, 3, 3, (1, 1), (1, 1))


def test_config_name_dict_and_grid():
    cfg = KernelConfig(4, 4, 64, 32, 4, 2, 2)
    assert cfg.warp_tiled and not KernelConfig(4, 4, 64, 32, 4).warp_tiled
    assert cfg.tag() == "th4tw4tc64_t32n4_w2x2" and cfg.name(S14, 32).endswith("_th4tw4tc64_t32n4_w2x2_b32")
    assert KernelConfig.from_dict(cfg.to_dict()) == cfg
    classic = KernelConfig(4, 8, 32, 64, 2)
    assert classic.to_dict() == {"th": 4, "tw": 8, "tc": 32, "threads": 64, "nt": 2}  # manifests as before
    assert KernelConfig.from_dict(classic.to_dict()) == classic
    g = cfg.grid(S14, 32)   # block tile 8x8 over 14x14: 2x2 tiles; 128 channels a block: 2 N tiles
    assert (g["tiles_h"], g["tiles_w"], g["tiles_c"], g["tiles_n"]) == (2, 2, 4, 2) and cfg.block_threads() == 128


def test_render_dispatches_and_launch_matches_rules():
    cfg = KernelConfig(4, 4, 64, 32, 4, 2, 2)
    k = emit.render_sparse(S14, 32, cfg)
    assert k.name == cfg.name(S14, 32) and k.source == emit.render_sparse_ws(S14, 32, cfg).source
    r = kernel_rules.ws_params(S14, cfg)
    assert len(k.steps) == 1 and "accumulator" in k.steps[0]["args"] and not k.epilogue   # tc 64 < C: atomics
    assert k.steps[0]["block"] == [32, 4, 1] and k.steps[0]["grid"] == [4, 8, 32] and k.steps[0]["smem"] == r["SMEM"]
    assert "atomicAdd(reinterpret_cast<float4*>(output + e), o);" in k.source
    assert f"#define KC {r['KC']}" in k.source and f"__launch_bounds__(NTHR, {r['MINB']})" in k.source
    assert r["REG_CAP"] == 128 and r["KC"] == 4                  # 4 blocks of 4 warps: 16 warps an SM
    assert estimate_resources(S14, cfg) == (min(64 + 36 + REG_BASE, 128), r["SMEM"])
    whole = emit.render_sparse(S14, 8, KernelConfig(4, 4, 256, 32, 4, 2, 4))
    assert len(whole.steps) == 1 and "*reinterpret_cast<float4*>(output + e) = o;" in whole.source
    assert "atomicAdd(reinterpret_cast" not in whole.source and whole.epilogue


def test_ragged_shapes_get_their_guards():
    src = emit.render_sparse(RAGGED, 3, KernelConfig(4, 4, 32, 32, 1, 2, 2)).source   # C 36, N 40, 9x11 output
    assert "if (p0 + i >= P) break;" in src and "if (q0 + j >= Q) break;" in src      # warps past the output
    assert "c0 + (xdst[i] % XSTR) < C" in src and "c0 + (wrow0 + i * WROWS_STEP) / RS < C" in src  # chunk past C
    assert "wcol_in" in src and "if (n0 + 0 * THREADS < N)" in src                     # channels past N
    exact = emit.render_sparse(S14, 32, KernelConfig(4, 4, 64, 32, 4, 2, 2)).source
    fill = exact.split("auto fill")[1].split("float acc")[0]
    assert "p0 + i >= P" in exact and "wcol_in" not in exact and "< C" not in fill


def test_unsupported_configs_raise():
    for cfg in (KernelConfig(4, 4, 64, 64, 4, 2, 2),            # 64 threads a warp tile
                KernelConfig(4, 4, 64, 32, 3, 2, 2),            # nt 3
                KernelConfig(8, 16, 64, 32, 1, 2, 2)):          # a warp window of 10 x 18 = 180 pixels: > 4 words
        with pytest.raises(ValueError):
            emit.render_sparse(S14, 8, cfg)
    with pytest.raises(ValueError):
        emit.render_sparse(ConvShape(64, 42, 14, 14, 3, 3, (1, 1), (1, 1)), 8,
                           KernelConfig(4, 4, 64, 32, 2, 2, 2))                                   # N % 4


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (install the CUDA toolkit to run)")
def test_ws_kernels_compile_without_spills():
    ks = [k for k, _, b in warp_tiled_cases() if b == 3]
    report = compile_units([k.source for k in ks], max(1, min(8, os.cpu_count() or 1)))
    assert set(report) == {k.name for k in ks}
    assert not {n: r for n, r in report.items() if r["stack"] or r["spill_stores"] or r["spill_loads"]}
    r = report[emit.render_sparse(S14, 3, KernelConfig(4, 4, 64, 32, 4, 2, 2)).name]
    assert r["registers"] <= kernel_rules.ws_params(S14, KernelConfig(4, 4, 64, 32, 4, 2, 2))["REG_CAP"]


def test_channel_loop_tests_each_used_pixel_once():
    """The pixel loop: one warp-uniform bit test per in-tile pixel that feeds an output, values read where set."""
    cfg = KernelConfig(2, 7, 128, 32, 4, 7, 2)
    base = emit.render_sparse(S14, 32, cfg).source
    assert "ld.volatile.shared" not in base and base.count("if (m[") == emit.used_pixels(S14, cfg)
