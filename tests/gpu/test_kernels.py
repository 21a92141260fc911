"""Generated kernels on the GPU against torch in float64 (see tools/check_kernels.py)."""
import os
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cuda.bindings.driver")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import check_kernels as ck  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")]


@pytest.fixture(scope="module")
def driver():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return ck.Driver(torch)


def _load(driver, named_sources, tmp_path_factory):
    # the content-addressed cache of tools/check_kernels.py when $SNN_CACHE_DIR is set
    cache = Path(os.environ.get("SNN_CACHE_DIR") or tmp_path_factory.getbasetemp() / "cubins")
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    for name, (cubin, rep) in ck.compile_all(named_sources, cache, arch, os.cpu_count() or 1).items():
        assert rep["spill_stores"] == rep["spill_loads"] == rep["stack"] == 0, name
        driver.load(name, cubin)


def test_resnet50_sparse_kernels_match_torch(driver, tmp_path_factory):
    items = ck.check_items()
    _load(driver, {k.name: k.source for k, *_ in items}, tmp_path_factory)
    rows = ck.check_kernels(torch, driver, items, log=lambda *_: None)
    bad = [r for r in rows if not r["ok"]]
    assert len(rows) == len(items) and not bad, bad[:5]


def test_coo_conversion_matches_reference(driver, tmp_path_factory):
    items = ck.coo_items()
    _load(driver, {k.name: k.source for k, *_ in items}, tmp_path_factory)
    rows = ck.check_coo(torch, driver, items, log=lambda *_: None)
    assert rows and all(r["ok"] for r in rows), rows


def test_epilogue_matches_torch(driver, tmp_path_factory):
    from codegen import emit
    name, src = emit.render_epilogue()
    _load(driver, {name: src}, tmp_path_factory)
    rows = ck.check_epilogue(torch, driver, log=lambda *_: None)
    assert rows and all(r["ok"] for r in rows), rows


def test_group_split_kernels_match_torch(driver, tmp_path_factory):
    """In-block channel split (G > 1): dynamic shared memory above 48 KB, no memset when G*tc >= C."""
    items = ck.group_check_items()
    assert any(len(k.steps) == 1 for k, *_ in items) and any(k.steps[-1]["smem"] > 48 * 1024 for k, *_ in items)
    _load(driver, {k.name: k.source for k, *_ in items}, tmp_path_factory)
    rows = ck.check_kernels(torch, driver, items, log=lambda *_: None)
    bad = [r for r in rows if not r["ok"]]
    assert len(rows) == len(items) and not bad, bad[:5]


def test_image_kernels_match_torch_and_their_one_image_twin(driver, tmp_path_factory):
    """IB > 1 (several images per block, one staged weight chunk): against float64, a spare image in the
    last block included; and bit for bit the IB = 1 kernel of the same config (same per-output order)."""
    from codegen import emit
    items = ck.image_check_items()
    assert any(b % int(k.name.rsplit("_i", 1)[1].split("_")[0]) for k, _, b in items)  # ragged last block
    # tc = C: one block owns every channel of its outputs (plain stores, no atomics), so order is fixed
    twins = [(emit.render_sparse(sh, b, cfg), emit.render_sparse(sh, b, cfg, images=ib), sh, b)
             for sh, b, cfg, ib in [(ck.ConvShape(128, 128, 28, 28, 3, 3, (1, 1), (1, 1)), 5, ck.KernelConfig(4, 8, 128, 64, 2), 4),
                                    (ck.ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), 8, ck.KernelConfig(7, 7, 1024, 64, 1), 8)]]
    _load(driver, {k.name: k.source for k, *_ in items} | {k.name: k.source for pair in twins for k in pair[:2]},
          tmp_path_factory)
    rows = ck.check_kernels(torch, driver, items, log=lambda *_: None)
    bad = [r for r in rows if not r["ok"]]
    assert len(rows) == len(items) and not bad, bad[:5]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(5)
    for one, many, sh, b in twins:
        x = ck.relu_input(torch, (b, sh.H, sh.W, sh.C), 0.7, gen)
        w = torch.randn((sh.C, sh.R, sh.S, sh.N), generator=gen, device="cuda")
        outs = []
        for k in (one, many):
            out = torch.full((b, sh.P, sh.Q, sh.N), float("nan"), device="cuda")
            driver.run_steps(k.steps, {"input": x, "weight": w, "output": out})
            outs.append(out)
        torch.cuda.synchronize()
        assert not torch.isnan(outs[1]).any() and torch.equal(outs[0], outs[1]), many.name
