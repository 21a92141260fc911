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


def _assert_match(driver, items, tmp_path_factory):
    """Compile and load the items' kernels, then every one against torch in float64 (outputs poisoned first)."""
    _load(driver, {k.name: k.source for k, *_ in items}, tmp_path_factory)
    rows = ck.check_kernels(torch, driver, items, log=lambda *_: None)
    bad = [r for r in rows if not r["ok"]]
    assert len(rows) == len(items) and not bad, bad[:5]


def test_resnet50_sparse_kernels_match_torch(driver, tmp_path_factory):
    items = ck.check_items()
    _assert_match(driver, items, tmp_path_factory)


def test_warp_tiled_kernels_match_torch(driver, tmp_path_factory):
    """Warp-tiled blocks: ragged C, N and P/Q, atomics and direct stores, nt 1-8, dynamic shared memory."""
    items = ck.ws_check_items()
    _assert_match(driver, items, tmp_path_factory)


def test_coo_conversion_matches_reference(driver, tmp_path_factory):
    items = ck.coo_items()
    _load(driver, {k.name: k.source for k, *_ in items}, tmp_path_factory)
    rows = ck.check_coo(torch, driver, items, log=lambda *_: None)
    assert rows and all(r["ok"] for r in rows), rows


def test_epilogue_matches_torch(driver, tmp_path_factory):
    from snn.codegen import emit
    name, src = emit.render_epilogue()
    _load(driver, {name: src}, tmp_path_factory)
    rows = ck.check_epilogue(torch, driver, log=lambda *_: None)
    assert rows and all(r["ok"] for r in rows), rows


def test_group_split_kernels_match_torch(driver, tmp_path_factory):
    """In-block channel split (G > 1): dynamic shared memory above 48 KB, no memset when G*tc >= C."""
    items = ck.group_check_items()
    assert any(len(k.steps) == 1 for k, *_ in items) and any(k.steps[-1]["smem"] > 48 * 1024 for k, *_ in items)
    _assert_match(driver, items, tmp_path_factory)


def test_vec_kernels_match_torch_and_their_plain_twin(driver, tmp_path_factory):
    """Thread-contiguous output channels (vec): against float64 (vector atomics where tc < C, ragged N and
    strided shapes included), and bit for bit the plain kernel where one block owns all of C."""
    from snn.codegen import emit
    items = ck.check_items(vec=True)
    assert items and all(("float4* dst" in k.source or "float2* dst" in k.source) for k, *_ in items)
    sh = ck.ConvShape(128, 128, 28, 28, 3, 3, (1, 1), (1, 1))
    cfg = ck.KernelConfig(4, 4, 128, 32, 4)
    twins = (emit.render_sparse(sh, 2, cfg, vec=False), emit.render_sparse(sh, 2, cfg))
    _load(driver, {k.name: k.source for k in twins}, tmp_path_factory)
    _assert_match(driver, items, tmp_path_factory)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    x = ck.relu_input(torch, (2, 28, 28, 128), 0.7, gen)
    w = torch.randn((128, 3, 3, 128), generator=gen, device="cuda")
    outs = []
    for k in twins:
        out = torch.full((2, 28, 28, 128), float("nan"), device="cuda")
        driver.run_steps(k.steps, {"input": x, "weight": w, "output": out})
        outs.append(out)
    torch.cuda.synchronize()
    assert not torch.isnan(outs[1]).any() and torch.equal(outs[0], outs[1])
