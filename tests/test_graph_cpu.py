"""Device-side dispatch without a GPU: the selector table reproduces dispatch.choose exactly, the
selector kernel renders and compiles cleanly, the build records it, and the CLI exposes --graph.
No torch here (CI has none)."""
import random
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from snn import cli
from snn.codegen import ptxas
from snn.codegen.emit import render_selector
from snn.runtime import dispatch

ROOT = Path(__file__).resolve().parent.parent
LEVELS = [round(0.4 + 0.05 * i, 2) for i in range(11)]


def _entry(rng):
    """A manifest layer entry: a random subset of the levels, kernels shared between neighbours."""
    lv = sorted(rng.sample(LEVELS, rng.randint(1, len(LEVELS))))
    names, k = [], 0
    for _ in lv:
        if not names or rng.random() < 0.5:
            k += 1
        names.append(f"k{k}")
    entry = {"levels": {f"{level:.2f}": {"kernel": n} for level, n in zip(lv, names)}}
    r = rng.random()
    if r < 0.4:
        entry["threshold"] = rng.choice(LEVELS)
    elif r < 0.8:
        entry["threshold"] = round(rng.uniform(0.3, 0.95), 3)
    elif r < 0.85:
        entry["threshold"] = dispatch.NEVER  # calibrated: sparse never won
    elif r < 0.9:
        entry["threshold"], entry["static_kernel"] = lv[0], names[0]  # calibrated: sparse always wins
    return entry  # else: no threshold, choose() falls back to the lowest level


def _sparsities(rng):
    """(zeros, numel) pairs: every level exactly (k/20), both sides of it, the ends, random counts."""
    pairs = [(k, 20) for k in range(21)] + [(k, 40) for k in range(41)] + [(0, 7), (7, 7)]
    for numel in (64 * 56 * 56, 8 * 256 * 14 * 14, 2048 * 7 * 7):
        for level in LEVELS:
            z = round(level * numel)
            pairs += [(z - 1, numel), (z, numel), (z + 1, numel)]
        pairs += [(rng.randrange(numel + 1), numel) for _ in range(50)]
    return [(z, n) for z, n in pairs if 0 <= z <= n]


@pytest.mark.parametrize("force", dispatch.FORCE_MODES)
def test_selector_table_agrees_with_choose(force):
    rng = random.Random(8)
    checked = 0
    for _ in range(300):
        entry = _entry(rng)
        table = dispatch.selector_table(entry, force)
        for z, n in _sparsities(rng):
            want = dispatch.choose(entry, z / n, force)
            got = dispatch.select(table, z, n)
            assert (table.kernel(got) if table else None) == want, (entry, force, z, n)
            checked += 1
    assert checked > 90_000


def test_no_kernels_or_dense_means_no_table():
    entry = {"threshold": 0.5, "levels": {"0.50": {"kernel": "a"}}}
    assert dispatch.selector_table(None) is None
    assert dispatch.selector_table({"levels": {}}) is None
    assert dispatch.selector_table(entry, "dense") is None
    assert dispatch.select(None, 10, 10) == 0
    with pytest.raises(ValueError):
        dispatch.selector_table(entry, "fast")


def test_never_winning_layer_has_no_selector_and_stays_dense():
    entry = {"threshold": dispatch.NEVER, "levels": {"0.40": {"kernel": "a"}, "0.90": {"kernel": "b"}}}
    assert dispatch.selector_table(entry, "auto") is None  # no selector, no SWITCH node in the graph
    assert dispatch.choose(entry, 1.0) is None and dispatch.choose(entry, 0.95) is None
    assert dispatch.selector_table(entry, "sparse").kernels == ("a", "b")  # forcing still reaches the kernels
    assert dispatch.choose(entry, 0.95, "sparse") == "b"


def test_static_layer_is_one_constant_branch():
    entry = {"threshold": 0.4, "static_kernel": "a", "levels": {"0.40": {"kernel": "a"}, "0.90": {"kernel": "b"}}}
    t = dispatch.selector_table(entry, "auto")
    assert t.kernels == ("a",) and t.constant_branch() == 1
    assert all(dispatch.choose(entry, s) == "a" for s in (0.0, 0.39, 0.5, 0.95, 1.0))
    assert dispatch.selector_table(entry, "sparse").constant_branch() is None  # forcing keeps the levels
    assert dispatch.selector_table({"threshold": 0.4, "levels": {"0.40": {"kernel": "a"}}}).constant_branch() is None
    one = dispatch.selector_table({"levels": {"0.40": {"kernel": "a"}, "0.60": {"kernel": "a"}}}, "sparse")
    assert one.constant_branch() == 1  # forced sparse with one kernel: nothing to decide either


def test_table_layout_and_unreachable_levels_left_out():
    entry = {"threshold": 0.55, "levels": {"0.40": {"kernel": "a"}, "0.45": {"kernel": "b"}, "0.50": {"kernel": "c"},
                                           "0.60": {"kernel": "c"}, "0.70": {"kernel": "d"}}}
    t = dispatch.selector_table(entry, "auto")
    # at s >= 0.55 level 0.50 always fits, so a (0.40) and b (0.45) can never run in auto mode
    assert t.kernels == ("c", "d") and t.branches == 3
    assert t.levels == ((0.5, 1), (0.6, 1), (0.7, 2))
    assert t.row() == [0.55, 0.0, 3.0, 0.5, 1.0, 0.6, 1.0, 0.7, 2.0]
    s = dispatch.selector_table(entry, "sparse")
    assert s.kernels == ("a", "b", "c", "d") and s.threshold < 0 and s.below_levels == 1
    assert dispatch.select(s, 0, 100) == 1 and s.kernel(1) == "a"
    assert t.kernel(0) is None
    # 9/20 measured selects level "0.45" exactly as choose() does, on both sides of the tolerance
    e2 = {"threshold": 0.45, "levels": {"0.45": {"kernel": "x"}}}
    t2 = dispatch.selector_table(e2)
    assert dispatch.select(t2, 9, 20) == 1 and dispatch.choose(e2, 9 / 20) == "x"
    assert dispatch.select(t2, 899, 2000) == 0 and dispatch.choose(e2, 899 / 2000) is None


def test_selector_source_uses_dispatch_rule_constants():
    name, src = render_selector()
    assert name == "snn_select" and 'extern "C" __global__' in src and "cudaGraphSetConditional" in src
    assert f"const double eps = {dispatch._EPS!r};" in src
    # the table layout documented in dispatch.SelectorTable.row is the one the kernel indexes
    assert "row[3 + 2 * i]" in src and "row[4 + 2 * i]" in src and "(int)row[1]" in src and "(int)row[2]" in src


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_selector_compiles_without_stack_or_spills(tmp_path):
    name, src = render_selector()
    cu = tmp_path / f"{name}.cu"
    cu.write_text(src)
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-std=c++17", "-Xptxas", "-v", str(cu),
                        "-o", str(tmp_path / f"{name}.cubin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    funcs = ptxas.parse(r.stderr) if hasattr(ptxas, "parse") else None
    if funcs is not None:
        assert name in funcs and not ptxas.problems(funcs)
    else:
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in r.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("make") is None, reason="needs nvcc and make")
def test_build_records_the_selector(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tests"))
    from buildfakes import GPU, fake_stages
    from snn.codegen.build import build
    from snn.codegen.cache import CubinCache
    from snn.codegen.spec import load_spec
    spec = tmp_path / "tiny.yaml"
    spec.write_text("name: tiny\ninput: {name: image, shape: [8, 16, 16]}\nnodes:\n"
                    "  - {name: a, op: conv, input: image, in_channels: 8, out_channels: 16, kernel: 3, padding: 1}\n"
                    "  - {name: ra, op: relu, input: a}\n"
                    "  - {name: b, op: conv, input: ra, in_channels: 16, out_channels: 16, kernel: 3, padding: 1}\n")
    monkeypatch.setenv("SNN_CACHE_DIR", str(tmp_path / "cache"))
    stages = replace(fake_stages(), render_selector=render_selector)
    r = build(load_spec(spec), GPU(), [1], [0.5], out=tmp_path / "gen", stages=stages, cache=CubinCache(tmp_path / "cache"),
              jobs=2)
    sel = r.manifest["selector"]
    assert sel["function"] == "snn_select" and (r.manifest_path.parent / sel["cubin"]).is_file()
    assert sel["stack"] == 0 and sel["spill_stores"] == 0
    # without a selector stage the manifest has no entry (older stage sets keep working)
    r2 = build(load_spec(spec), GPU(), [1], [0.5], out=tmp_path / "gen2", stages=fake_stages(),
               cache=CubinCache(tmp_path / "cache"), jobs=2)
    assert "selector" not in r2.manifest


def test_infer_has_graph_switch():
    r = CliRunner().invoke(cli.run_main, ["infer", "--help"])
    assert r.exit_code == 0 and "--graph / --no-graph" in r.output


def test_graph_module_needs_no_torch_at_import():
    code = "import sys, runtime.graph; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_no_gc_while_capturing_restores_the_collector():
    """Captures run with the cyclic collector off (a collection mid-capture that frees an earlier CUDA graph
    aborts the process), and leave it as they found it."""
    import gc

    from snn.runtime.graph import _no_gc
    assert gc.isenabled()
    with _no_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with _no_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
