"""`snn-codegen build` with the real nvcc, make and cache, and stand-in plan/render stages (buildfakes)."""
import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from snn import cli
from buildfakes import GPU, FakePlanner, FakeRenderer, fake_config, fake_stages
from snn.codegen import build as buildmod
from snn.codegen import bundle
from snn.codegen import compile as compilemod
from snn.codegen.build import build, parse_batches, parse_levels
from snn.codegen.cache import CubinCache, file_sha256
from snn.codegen.compile import toolchain
from snn.codegen.config import KernelConfig
from snn.codegen.errors import UserError
from snn.codegen.spec import load_spec

REPO = Path(__file__).resolve().parent.parent
NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None or shutil.which("make") is None, reason="needs nvcc and make")

TINY = """\
name: tiny
input: {name: image, shape: [8, 16, 16]}
nodes:
  - {name: a, op: conv, input: image, in_channels: 8, out_channels: 16, kernel: 3, padding: 1}
  - {name: ra, op: relu, input: a}
  - {name: b, op: conv, input: ra, in_channels: 16, out_channels: 16, kernel: 3, padding: 1}
  - {name: rb, op: relu, input: b}
  - {name: c, op: conv, input: rb, in_channels: 16, out_channels: 16, kernel: 3, padding: 1}
"""
LEVELS = [0.5, 0.8]


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A tiny spec, an output dir, a private cache, and an nvcc wrapper that logs every call."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    log = tmp_path / "nvcc.log"
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {NVCC} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("NVCC", str(wrapper))
    monkeypatch.setenv("SNN_CACHE_DIR", str(tmp_path / "cache"))

    class Env:
        pass
    e = Env()
    e.spec, e.net, e.out, e.log, e.cache = spec, load_spec(spec), tmp_path / "gen", log, CubinCache(tmp_path / "cache")
    e.compiles = lambda: sum("-cubin" in line for line in log.read_text().splitlines()) if log.exists() else 0
    e.calls = lambda: len(log.read_text().splitlines()) if log.exists() else 0
    return e


def run_build(e, stages=None, **kw):
    kw.setdefault("jobs", 2)
    return build(e.net, GPU(), kw.pop("batches", [1]), kw.pop("levels", LEVELS), out=e.out,
                 stages=stages or fake_stages(), cache=e.cache, **kw)


def test_first_build_writes_sources_cubins_and_manifest(env):
    renderer = FakeRenderer()
    r = run_build(env, fake_stages(renderer=renderer))
    # 2 distinct shapes (a; b == c) x 2 configs (one per level) = 4 kernels, each rendered once
    assert r.kernels == 4 and r.cubins == 5 and r.compiled == 5 and r.cache_hits == 0
    assert sorted(renderer.calls) == sorted(set(renderer.calls))
    d = env.out / "tiny" / "h100"
    assert sorted(p.name for p in (d / "src").glob("*.cu")) == sorted([f"{n}.cu" for n in renderer.calls] +
                                                                      ["snn_epilogue.cu"])
    assert sorted(p.stem for p in (d / "cubins").glob("*.cubin")) == sorted(renderer.calls + ["snn_epilogue"])
    assert (d / "spec.yaml").read_text() == TINY
    assert env.compiles() == 5

    m = json.loads((d / "manifest.json").read_text())
    assert m == r.manifest
    assert {k: m[k] for k in ("network", "gpu", "arch", "compute_capability", "batches", "levels", "nvcc")} == {
        "network": "tiny", "gpu": "h100", "arch": "sm_90", "compute_capability": [9, 0], "batches": [1],
        "levels": [0.5, 0.8], "nvcc": toolchain(os.environ["NVCC"], env.cache).version}
    assert m["format"] == bundle.FORMAT and m["spec"] == "spec.yaml"
    assert m["epilogue"]["function"] == "snn_epilogue" and m["epilogue"]["cubin"] == "cubins/snn_epilogue.cubin"
    for name, k in m["kernels"].items():
        assert k["cubin"] == f"cubins/{name}.cubin"  # inside the bundle, relative
        cubin = d / k["cubin"]
        assert cubin.read_bytes()[:4] == b"\x7fELF" and file_sha256(cubin) == k["sha256"]
        assert k["registers"] > 0 and k["stack"] == 0 and k["spill_stores"] == 0 and k["spill_loads"] == 0
        assert set(k["functions"]) == {name}
        cfg = KernelConfig.from_dict(k["config"])
        assert cfg.name(load_shape(k["shape"]), k["batch"]) == name
        assert k["estimate"] == {"registers": 32 + cfg.th * cfg.tw * cfg.nt, "smem": 4 * cfg.tc * 64}
        assert k["steps"][1]["function"] == name and k["weight_layout"] == "CRSN" and "ws_vals" in k["workspace"]
    assert [lay["name"] for lay in m["layers"]] == ["a", "b", "c"]
    b, c = m["layers"][1]["batches"]["1"], m["layers"][2]["batches"]["1"]
    assert b["levels"] == c["levels"]  # identical shapes share kernels
    assert set(b["levels"]) == {"0.50", "0.80"}
    assert b["levels"]["0.50"]["kernel"] != b["levels"]["0.80"]["kernel"]
    assert b["threshold"] == 0.5 and b["threshold_source"] == "default"
    assert "measured_us" not in b["levels"]["0.80"] and b["levels"]["0.80"]["predicted_us"] > 0


def load_shape(d):
    from snn.codegen.spec import ConvShape
    return ConvShape(d["C"], d["N"], d["H"], d["W"], d["R"], d["S"], tuple(d["stride"]), tuple(d["padding"]))


def test_rebuild_runs_no_nvcc_and_rewrites_nothing(env):
    run_build(env)
    d = env.out / "tiny" / "h100"
    mtimes = {p.name: p.stat().st_mtime_ns for p in d.iterdir()}
    calls = env.calls()
    t = time.perf_counter()
    r = run_build(env)
    elapsed = time.perf_counter() - t
    assert env.calls() == calls  # not even nvcc --version
    assert r.compiled == 0 and r.cache_hits == r.cubins == 5 and r.sources_written == 0
    assert {p.name: p.stat().st_mtime_ns for p in d.iterdir()} == mtimes
    assert elapsed < 1.0


def test_cache_hits_keep_ptxas_resources_without_compiling(env):
    first = run_build(env).manifest
    shutil.rmtree(env.out)  # a fresh checkout: no sources, no manifest, only the cache
    again = run_build(env)
    assert again.compiled == 0 and env.compiles() == 5
    assert again.manifest["kernels"] == first["kernels"]


def test_force_recompiles_everything(env):
    run_build(env)
    r = run_build(env, force=True)
    assert r.compiled == 5 and r.cache_hits == 0 and env.compiles() == 10


def test_only_changed_kernels_compile_and_stale_sources_go(env):
    first = run_build(env)
    old = set(first.manifest["kernels"])

    def cfg(shape, level):  # the 0.8 level of shape 16->16 moves to a new config
        return KernelConfig(8, 8, 16, 32, 1) if level > 0.7 and shape.C == 16 else fake_config(shape, level)
    r = run_build(env, fake_stages(planner=FakePlanner(config_fn=cfg)))
    new = set(r.manifest["kernels"])
    assert len(new - old) == 1 and len(old - new) == 1
    assert r.compiled == 1 and r.cache_hits == 4
    for sub, ext in (("src", "cu"), ("cubins", "cubin")):
        names = {p.stem for p in (env.out / "tiny" / "h100" / sub).glob(f"*.{ext}")}
        assert names == new | {"snn_epilogue"}


def test_source_change_with_same_name_recompiles(env):
    run_build(env)
    r = run_build(env, fake_stages(renderer=FakeRenderer(extra="1.0")))
    assert r.compiled == 4 and r.cache_hits == 1  # kernels changed, the epilogue did not


def test_batches_make_their_own_kernels(env):
    r = run_build(env, batches=[1, 8])
    assert r.kernels == 8 and r.manifest["batches"] == [1, 8]
    lay = r.manifest["layers"][0]["batches"]
    assert set(lay) == {"1", "8"}
    assert lay["8"]["levels"]["0.50"]["kernel"].endswith("_b8")
    assert r.manifest["kernels"][lay["8"]["levels"]["0.50"]["kernel"]]["batch"] == 8


def test_candidates_are_built_in_the_models_order(env):
    alt = KernelConfig(1, 8, 4, 32, 1)
    planner = FakePlanner(alt_fn=lambda shape, level: [alt])
    r = run_build(env, fake_stages(planner=planner))
    assert r.kernels == 6  # the two shapes' two picks (test_build_writes_manifest...) and one alternative each
    m = json.loads((env.out / "tiny" / "h100" / "manifest.json").read_text())
    lv = m["layers"][1]["batches"]["1"]["levels"]["0.80"]
    shape = env.net.convs[1].shape
    pick, other = fake_config(shape, 0.8).name(shape, 1), alt.name(shape, 1)
    assert lv["kernel"] == pick and [c["kernel"] for c in lv["candidates"]] == [pick, other]
    assert lv["candidates"][1]["predicted_us"] > lv["predicted_us"] == lv["candidates"][0]["predicted_us"]
    assert other in m["kernels"] and (env.out / "tiny" / "h100" / "cubins" / f"{other}.cubin").is_file()
    # rebuilt without candidates: the alternative is gone from the manifest and the bundle
    r = run_build(env)
    e = r.manifest["layers"][1]["batches"]["1"]
    assert e["levels"]["0.80"]["kernel"] == pick and "candidates" not in e["levels"]["0.80"]
    assert other not in r.manifest["kernels"]
    assert not (env.out / "tiny" / "h100" / "cubins" / f"{other}.cubin").exists()


def test_default_stages_pass_candidates_to_the_cost_model():
    assert buildmod.default_stages("snn", 3).plan_network.keywords == {"model": "snn", "candidates": 3}


def test_stack_frame_fails_the_build_naming_the_kernel(env):
    name = KernelConfig(4, 4, 8, 64, 2).name(env.net.convs[0].shape, 1)
    with pytest.raises(UserError, match=rf"kernel {name} \({name}: \d+ bytes stack frame") as ei:
        run_build(env, fake_stages(renderer=FakeRenderer(stacky={name})))
    assert "\n" not in str(ei.value)
    assert not (env.out / "tiny" / "h100" / "manifest.json").exists()
    # cached with its report: the repeat fails the same way without compiling
    n = env.compiles()
    with pytest.raises(UserError, match=name):
        run_build(env, fake_stages(renderer=FakeRenderer(stacky={name})))
    assert env.compiles() == n


def test_nvcc_failure_names_kernel_and_shows_message(env):
    name = KernelConfig(2, 2, 8, 64, 1).name(env.net.convs[1].shape, 1)
    with pytest.raises(UserError) as ei:
        run_build(env, fake_stages(renderer=FakeRenderer(broken={name})))
    msg = str(ei.value)
    assert msg.splitlines()[0] == f"nvcc failed on kernel {name}:"
    assert "error" in msg and f"{name}.cu" in msg
    # the other kernels compiled (make -k) and were cached
    assert len(list(env.cache.root.glob("*/*.cubin"))) == 4


def test_nvcc_not_found(env, monkeypatch):
    monkeypatch.setenv("NVCC", str(env.out / "no-such-nvcc"))
    with pytest.raises(UserError, match=r"NVCC=.*is not an executable.*CUDA toolkit.*NVCC=/path/to/nvcc"):
        run_build(env)
    monkeypatch.delenv("NVCC")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(compilemod.os, "access", lambda p, m: False)  # hide /usr/local/cuda too
    with pytest.raises(UserError, match=r"^nvcc not found: install the CUDA toolkit"):
        run_build(env)


def test_unknown_arch(env):
    with pytest.raises(UserError, match=r"unknown arch 'sm_999': nvcc [\d.]+ compiles for .*sm_90"):
        run_build(env, arch="sm_999")
    with pytest.raises(UserError, match="unknown arch 'volta'"):
        run_build(env, arch="volta")


def test_other_arch_and_capability(env):
    r = build(env.net, GPU("a6000", "sm_86"), [1], LEVELS, out=env.out, stages=fake_stages(), cache=env.cache,
              arch="sm_80")
    assert r.manifest["arch"] == "sm_80" and r.manifest["compute_capability"] == [8, 0]
    assert r.manifest["gpu"] == "a6000" and (env.out / "tiny" / "a6000" / "manifest.json").is_file()
    assert any("-arch=sm_80" in line for line in env.log.read_text().splitlines())


@pytest.mark.parametrize("arch", ["sm_80", "sm_100", "sm_75"])
def test_arch_that_cannot_run_on_the_gpu(env, arch):
    with pytest.raises(UserError, match=rf"--arch {arch}: a cubin for {arch} does not run on h100 \(sm_90\)"):
        run_build(env, arch=arch)


def test_unwritable_output_dir(env, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    env.out = blocker / "gen"
    with pytest.raises(UserError, match=r"cannot write to output directory .*file/gen/tiny/h100"):
        run_build(env)


def test_progress_bar_counts_compilations(env):
    seen = []

    class Bar:
        def __init__(self, n):
            seen.append(("len", n))

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def update(self, k):
            seen.append(("up", k))
    run_build(env, progress_factory=Bar)
    assert seen[0] == ("len", 5) and sum(k for tag, k in seen[1:]) == 5
    seen.clear()
    run_build(env, progress_factory=Bar)
    assert seen == []  # nothing to compile, no bar


def test_launch_of_missing_function_is_caught(env):
    class Renamer(FakeRenderer):
        def __call__(self, shape, batch, config):
            k = super().__call__(shape, batch, config)
            k.steps[1]["function"] = "nope"
            return k
    with pytest.raises(RuntimeError, match="launches 'nope'"):
        run_build(env, fake_stages(renderer=Renamer()))


# ---------------------------------------------------------------------------------------------
# options and the CLI

def test_parse_levels_and_batches():
    assert parse_levels("0.4:0.9:0.05") == [0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9]
    assert parse_levels("0.7,0.5,0.5") == [0.5, 0.7]
    assert parse_batches("32, 1,8,1") == [1, 8, 32]
    for bad in ("0.4:0.9", "1.2", "a", "0.9:0.4:0.1", "0.4:0.9:0"):
        with pytest.raises(UserError, match="--levels"):
            parse_levels(bad)
    for bad in ("0", "1,x", "-1", ""):
        with pytest.raises(UserError, match="--batch"):
            parse_batches(bad)


def test_model_reaches_the_planner_and_the_manifest(env):
    from functools import partial
    seen = []
    planner = FakePlanner()

    def plan(net, gpu, batch, levels, model="snn"):
        seen.append(model)
        return planner(net, gpu, batch, levels)
    stages = fake_stages(planner=partial(plan, model="pipes"))
    r = run_build(env, stages)
    assert seen == ["pipes"] and r.manifest["model"] == "pipes"
    assert buildmod.default_stages("paper").plan_network.keywords == {"model": "paper"}


@pytest.fixture
def cli_env(env, monkeypatch):
    monkeypatch.setattr(buildmod, "default_stages", lambda model="snn", candidates=1: fake_stages())
    return env


def invoke(*args):
    return CliRunner().invoke(cli.codegen_main, ["build", *args])


def test_cli_build_and_rebuild(cli_env):
    e = cli_env
    r = invoke(str(e.spec), "--gpu", "h100", "--levels", "0.5,0.8", "--out", str(e.out), "-j", "2")
    assert r.exit_code == 0, r.output
    assert "3 conv layers, 4 kernels + epilogue, 5 cubins, 0 cache hits, 5 compiled" in r.output
    assert "ms/layer" in r.output and (e.out / "tiny" / "h100" / "manifest.json").is_file()
    r = invoke(str(e.spec), "--levels", "0.5,0.8", "--out", str(e.out))
    assert r.exit_code == 0 and "up to date (4 kernels + epilogue, 5 cubins" in r.output
    shutil.rmtree(e.out)  # a fresh output folder: every kernel comes from the cache
    r = invoke(str(e.spec), "--levels", "0.5,0.8", "--out", str(e.out))
    assert r.exit_code == 0 and "5 cache hits, 0 compiled" in r.output
    r = invoke(str(e.spec), "--levels", "0.5,0.8", "--out", str(e.out), "--rebuild")
    assert r.exit_code == 0 and "0 cache hits, 5 compiled" in r.output


@pytest.mark.parametrize("args, message", [
    (["--arch", "sm_1"], "Error: unknown arch 'sm_1'"),
    (["--batch", "x"], "Error: --batch: expected positive integers"),
    (["--levels", "2"], "Error: --levels '2': sparsity level 2.0 is outside"),
])
def test_cli_user_errors_are_one_line(cli_env, args, message):
    r = invoke(str(cli_env.spec), "--out", str(cli_env.out), *args)
    assert r.exit_code == 1
    assert r.output.strip().startswith(message) and len(r.output.strip().splitlines()) == 1
    assert "Traceback" not in r.output


def test_cli_bad_spec(cli_env, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY.replace("in_channels: 16", "in_channels: 17", 1))
    r = invoke(str(bad), "--out", str(cli_env.out))
    assert r.exit_code == 1 and "node 'b'" in r.output and len(r.output.strip().splitlines()) == 1




def test_make_cubins_compiles_a_bundles_sources_and_refuses_an_empty_folder(env, tmp_path):
    r = run_build(env)
    src = r.manifest_path.parent / "src"
    out = tmp_path / "by-hand"
    make = ["make", "--no-print-directory", "-f", str(REPO / "Makefile"), "cubins", f"NVCC={NVCC}", "-j2"]
    done = subprocess.run(make + [f"GEN={src}", f"CUBIN_DIR={out}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert {p.stem for p in out.glob("*.cubin")} == {p.stem for p in src.glob("*.cu")}
    empty = subprocess.run(make + [f"GEN={tmp_path / 'nothing'}"], capture_output=True, text=True)
    assert empty.returncode != 0 and "make cubins: no .cu files in GEN=" in empty.stderr


def test_an_interruption_python_swallowed_still_stops_the_build_at_the_next_cubin(env, monkeypatch):
    """The command's signal handler sets compile.STOP before it raises; where that KeyboardInterrupt is lost (a
    finalizer running when the signal lands), the compile loop raises it at the next cubin: what landed is kept,
    no bundle is written."""
    monkeypatch.setattr(compilemod.STOP, "is_set", lambda: True)   # as if the handler ran and its raise was lost
    with pytest.raises(KeyboardInterrupt):
        run_build(env, jobs=1)
    assert 1 <= len(list(env.cache.root.glob("??/*.json"))) < 5
    assert not (env.out / "tiny" / "h100" / "manifest.json").exists()
