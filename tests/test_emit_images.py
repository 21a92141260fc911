"""Several images per block (images = IB): emitter contracts, the static shared memory kernel_rules
predicts against ptxas, nvcc (0 spills / 0 stack), and IB = 1 unchanged (test_emit_groups hashes it)."""
import os
import shutil

import pytest
from nvcc_units import compile_units

from codegen import emit
from codegen.config import KernelConfig
from codegen.kernel_rules import STATIC_SMEM_LIMIT, chunk_channels, image_layout
from codegen.spec import ConvShape


def S3(c, n, h):
    return ConvShape(c, n, h, h, 3, 3, (1, 1), (1, 1))


def R1(c, n, h):
    return ConvShape(c, n, h, h, 1, 1, (1, 1), (0, 0))


def test_images_launch_shape_and_name():
    shape, cfg = S3(128, 128, 28), KernelConfig(4, 8, 128, 64, 2)
    k = emit.render_sparse(shape, 32, cfg, images=4)
    assert k.name == cfg.name(shape, 32) + "_i4"
    assert [s["op"] for s in k.steps] == ["launch"]      # tc = C: one block owns all channels, no memset
    assert k.steps[0]["grid"] == [7 * 4, 1, 8] and k.steps[0]["block"] == [64, 4, 1] and k.steps[0]["smem"] == 0
    assert "__launch_bounds__(THREADS * IB" in k.source and "if (!live) return;" in k.source
    assert "ring" not in k.source.split("wr[RS][NT]")[1].split("}")[0]  # weights come from the staged chunk
    ragged = emit.render_sparse(shape, 9, KernelConfig(4, 8, 32, 64, 2), images=4)
    assert ragged.steps[0]["op"] == "memset" and ragged.steps[1]["grid"] == [28, 4, 3]  # ceil(9 / 4) = 3
    assert emit.render_sparse(shape, 32, cfg, images=4, loop="switch").name == k.name + "_switch"


def test_images_limits():
    shape = S3(128, 128, 28)
    with pytest.raises(ValueError, match="images"):
        emit.render_sparse(shape, 8, KernelConfig(4, 8, 32, 64, 1), images=17)
    with pytest.raises(ValueError, match="1024"):
        emit.render_sparse(shape, 8, KernelConfig(4, 8, 32, 128, 1), images=9)
    with pytest.raises(ValueError, match="exclusive"):
        emit.render_sparse(shape, 8, KernelConfig(4, 8, 32, 64, 1), images=2, groups=2)
    # a 7x7 filter for 128 output channels: one channel's two weight buffers alone exceed the budget
    with pytest.raises(ValueError, match="shared memory"):
        emit.render_sparse(ConvShape(64, 128, 56, 56, 7, 7, (1, 1), (3, 3)), 8, KernelConfig(4, 4, 64, 128, 1), images=2)


def test_chunk_channels_with_images_divides_tc_and_fits():
    for shape, cfg, ib in [(S3(128, 128, 28), KernelConfig(7, 7, 128, 128, 1), 4),
                           (S3(512, 512, 7), KernelConfig(7, 7, 128, 32, 4), 8),
                           (R1(1024, 256, 14), KernelConfig(4, 8, 128, 64, 2), 8)]:
        kc = chunk_channels(shape, cfg, images=ib)
        assert cfg.tc % kc == 0 and kc <= chunk_channels(shape, cfg)  # two buffers: never more than IB = 1
        assert image_layout(shape, cfg, ib)["XSTRIDE"] % 4 == 0


def image_kernels():
    """IB > 1 kernels of the kinds the bench uses: 3x3 and 1x1, nt 1-4, ragged N, a strided shape."""
    cases = [(S3(64, 64, 56), 32, KernelConfig(4, 8, 64, 64, 1), 4),
             (S3(128, 128, 28), 32, KernelConfig(7, 7, 128, 128, 1), 4),
             (S3(256, 256, 14), 32, KernelConfig(4, 4, 128, 32, 4), 8),
             (S3(512, 512, 7), 8, KernelConfig(7, 7, 128, 64, 1), 8),
             (S3(128, 32, 7), 32, KernelConfig(4, 7, 128, 32, 1), 8),
             (R1(1024, 256, 14), 32, KernelConfig(4, 8, 128, 32, 2), 8),
             (ConvShape(20, 40, 9, 11, 3, 3, (2, 2), (1, 1)), 3, KernelConfig(2, 3, 20, 32, 2), 2)]
    return [emit.render_sparse(shape, b, cfg, images=ib, loop=loop)
            for shape, b, cfg, ib in cases for loop in ("mask", "switch")]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (install the CUDA toolkit to run)")
def test_image_kernels_compile_without_spills_within_static_smem():
    kernels = image_kernels()
    report = compile_units([k.source for k in kernels], max(1, min(8, os.cpu_count() or 1)))
    assert set(report) == {k.name for k in kernels}
    bad = {n: r for n, r in report.items() if r["stack"] or r["spill_stores"] or r["spill_loads"]}
    assert not bad, f"kernels with stack or spills: {bad}"
    assert all(0 < r["smem_static"] <= STATIC_SMEM_LIMIT for r in report.values()), report
