"""The bundle records its precision: `snn-codegen build --precision`, and every consumer that refuses another.

No torch and no GPU: a 16-bit build compiles one kernel with nvcc (its epilogue, into a cache the module
shares), and the runtime's refusals come before anything asks for torch (the device is a stand-in)."""
import json
import shutil

import pytest
from click.testing import CliRunner

from snn import cli
from snn.codegen import bundle
from snn.codegen.build import build_spec
from snn.codegen.errors import UserError
from snn.codegen.spec import load_spec
from snn.runtime import manifest
from snn.runtime.engine import Engine
from snn.runtime.errors import RunError
from snn.runtime.measure import inputs
from buildfakes import fake_stages
from test_build import NVCC, env, run_build  # noqa: F401  (env is a fixture)
from test_runtime_cpu import H100_CC, SPEC, make_cache

TINY = """\
name: tiny16
input: {name: image, shape: [3, 16, 16]}
nodes:
  - {name: a, op: conv, input: image, in_channels: 3, out_channels: 16, kernel: 3, padding: 1}
  - {name: ra, op: relu, input: a}
  - {name: b, op: conv, input: ra, in_channels: 16, out_channels: 16, kernel: 3, padding: 1}
  - {name: rb, op: relu, input: b}
  - {name: c, op: conv, input: rb, in_channels: 16, out_channels: 16, kernel: 1}
"""


needs_nvcc = pytest.mark.skipif(NVCC is None or shutil.which("make") is None, reason="needs nvcc and make")


@pytest.fixture(scope="module")
def cubins(tmp_path_factory):
    """One cubin cache for the module: each precision's epilogue compiles once."""
    return tmp_path_factory.mktemp("cubins")


@pytest.fixture
def spec(tmp_path, monkeypatch, cubins):
    """A tiny spec; builds compile into the module's cubin cache."""
    monkeypatch.setenv("SNN_CACHE_DIR", str(cubins))
    p = tmp_path / "tiny16.yaml"
    p.write_text(TINY)
    return p


def build16(spec, tmp_path, precision="bf16", **kw):
    return build_spec(str(spec), "h100", [1, 4], out=tmp_path / "gen", precision=precision, **kw)


class FakeDevice:
    name, compute_capability = "NVIDIA H100 80GB HBM3", H100_CC


class FakeEnv:
    """What the benchmarks and calibrate read from timing.Env before they touch torch."""
    name, cc, torch, cpu = FakeDevice.name, H100_CC, None, False

    def __init__(self, cpu_dry_run=False):
        pass


# --- build --------------------------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@needs_nvcc
def test_16_bit_build_records_its_precision_every_conv_dense_and_its_epilogue(spec, tmp_path, precision):
    r = build16(spec, tmp_path, precision)
    d = r.manifest_path.parent
    m = json.loads(r.manifest_path.read_text())
    assert m == r.manifest and m["precision"] == precision and m["format"] == bundle.FORMAT
    assert m["kernels"] == {} and "selector" not in m and m["levels"] == []
    epi = m["epilogue"]
    assert epi["function"] == f"snn_epilogue_{precision}" and epi["vector"] == 8 and epi["pdl"] and epi["in_ld"]
    assert epi["cubin"] == f"cubins/snn_epilogue_{precision}.cubin" and epi["registers"] > 0
    assert not bundle.verify(d, m)
    assert m["dense_reason"].startswith("16-bit: tensor cores") and "docs/results/precision/h100" in m["dense_reason"]
    assert [(lay["name"], lay["path"]) for lay in m["layers"]] == [("a", "dense"), ("b", "dense"), ("c", "dense")]
    assert m["compute_capability"] == [9, 0] and m["batches"] == [1, 4] and m["spec"] == "spec.yaml"
    assert (d / "spec.yaml").read_text() == TINY
    assert [p.name for p in d.glob("cubins/*")] == [f"snn_epilogue_{precision}.cubin"]
    assert [p.name for p in d.glob("src/*")] == [f"snn_epilogue_{precision}.cu"]
    assert r.kernels == 0 and r.cubins == 1
    assert f"{precision}, 3 conv layers, every one dense on the tensor cores (0 tensor-core kernels + the epilogue" in r.summary()
    again = build16(spec, tmp_path, precision)
    assert again.up_to_date and "up to date (" in again.summary()


def test_16_bit_build_refuses_options_for_sparse_kernels(spec, tmp_path):
    with pytest.raises(UserError, match=r"^--candidates: a bf16 bundle has no sparse kernels"):
        build16(spec, tmp_path, candidates=3)
    with pytest.raises(UserError, match=r"^--clusters: a fp16 bundle has no sparse kernels"):
        build16(spec, tmp_path, "fp16", clusters=True)
    with pytest.raises(UserError, match=r"^--tf32x3: a bf16 bundle has no sparse kernels"):
        build16(spec, tmp_path, tf32x3=True)
    with pytest.raises(UserError, match=r"^--precision: expected one of fp32, bf16, fp16, got 'fp8'"):
        build16(spec, tmp_path, "fp8")


@needs_nvcc
def test_cli_build_precision(spec, tmp_path):
    r = CliRunner().invoke(cli.codegen_main, ["build", str(spec), "--batch", "1", "--out", str(tmp_path / "gen"),
                                              "--precision", "fp16"])
    assert r.exit_code == 0, r.output
    assert "tiny16 on h100 (sm_90): fp16, 3 conv layers, every one dense" in r.output
    assert json.loads((tmp_path / "gen" / "tiny16" / "h100" / "manifest.json").read_text())["precision"] == "fp16"
    r = CliRunner().invoke(cli.codegen_main, ["build", str(spec), "--precision", "fp8"])
    assert r.exit_code == 2
    r = CliRunner().invoke(cli.codegen_main, ["build", str(spec), "--precision", "bf16", "--tf32x3"])
    assert r.exit_code == 1 and "--tf32x3: a bf16 bundle has no sparse kernels" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


@needs_nvcc
def test_16_bit_rebuild_of_an_fp32_bundle_drops_its_kernels(spec, tmp_path):
    """An fp32 bundle's cubins and sources in the folder go, as a rebuild drops stale kernels."""
    net = load_spec(SPEC)
    path, _ = make_cache(tmp_path / "gen", net)  # fp32, as bundles were before the field (no "precision")
    (path.parent / "src").mkdir()
    (path.parent / "src" / "k.cu").write_text("//")
    (path.parent / "tuning.json").write_text("{}")
    r = build_spec(SPEC, "h100", 8, out=tmp_path / "gen", precision="bf16")
    assert r.manifest_path == path and json.loads(path.read_text())["precision"] == "bf16"
    # batch 8: no tensor-core kernels; ResNet-50's max pool has its kernel
    assert sorted(p.name for p in path.parent.glob("cubins/*")) == ["snn_epilogue_bf16.cubin", "snn_maxpool_bf16.cubin"]
    assert sorted(p.name for p in path.parent.glob("src/*")) == ["snn_epilogue_bf16.cu", "snn_maxpool_bf16.cu"]
    assert (path.parent / "tuning.json").is_file()  # calibrate's file: never the build's to touch
    c = manifest.load(path, net, SPEC, 8, H100_CC)    # the tuning file is not read for a 16-bit bundle
    assert c.precision == "bf16" and c.tuning_path is None


@needs_nvcc
def test_fp32_and_16_bit_builds_take_turns_in_one_folder(request):
    """The stand-in stages of test_build with the real nvcc: fp32 records its precision; a bf16 build of the
    same folder plans and renders no conv kernel, only its epilogue; fp32 again finds its kernels in the
    compiler cache."""
    e = request.getfixturevalue("env")
    first = run_build(e)
    assert first.manifest["precision"] == "fp32" and first.kernels == 4
    stages = fake_stages()
    r = run_build(e, stages, precision="bf16")
    assert r.manifest["precision"] == "bf16" and not stages.plan_network.calls and not stages.render_sparse.calls
    assert [p.name for p in r.manifest_path.parent.glob("cubins/*")] == ["snn_epilogue_bf16.cubin"]
    again = run_build(e)
    assert again.manifest["precision"] == "fp32" and again.cache_hits == again.cubins == 5 and again.compiled == 0


# --- manifest -----------------------------------------------------------------------------------

@needs_nvcc
def test_manifest_round_trip_of_the_precision(spec, tmp_path):
    r = build16(spec, tmp_path)
    net = load_spec(r.manifest_path.parent / "spec.yaml")
    c = manifest.load(r.manifest_path, net, str(spec), 4, H100_CC)
    assert c.precision == "bf16"
    assert all(c.layer_entry(conv.name, 4) is None for conv in net.convs)  # every conv dense
    assert manifest.load(r.manifest_path, net, str(spec), 1, H100_CC, precision="bf16").precision == "bf16"


def test_manifest_without_precision_reads_as_fp32(tmp_path):
    net = load_spec(SPEC)
    path, doc = make_cache(tmp_path, net)
    assert "precision" not in doc
    assert manifest.load(path, net, SPEC, 8, H100_CC).precision == "fp32"
    assert manifest.load(path, net, SPEC, 8, H100_CC, precision="fp32").precision == "fp32"
    doc["precision"] = "fp32"
    path.write_text(json.dumps(doc))
    assert manifest.load(path, net, SPEC, 8, H100_CC).precision == "fp32"


@needs_nvcc
def test_mismatched_precision_is_one_line_with_the_rebuild_command(spec, tmp_path):
    net = load_spec(SPEC)
    path, _ = make_cache(tmp_path, net)
    with pytest.raises(manifest.CacheError) as e:
        manifest.load(path, net, SPEC, 8, H100_CC, precision="fp16")
    assert str(e.value) == (f"{path}: built for fp32, the run asks for fp16; rebuild with: "
                            f"snn-codegen build {SPEC} --gpu h100 --batch 8 --precision fp16")
    r = build16(spec, tmp_path)
    with pytest.raises(manifest.CacheError) as e:
        manifest.load(r.manifest_path, load_spec(spec), str(spec), 4, H100_CC, precision="fp32")
    assert str(e.value) == (f"{r.manifest_path}: built for bf16, the run asks for fp32; rebuild with: "
                            f"snn-codegen build {spec} --gpu h100 --batch 4 --precision fp32")


@needs_nvcc
def test_a_stale_16_bit_bundle_names_a_16_bit_rebuild(spec, tmp_path):
    r = build16(spec, tmp_path)
    net = load_spec(spec)
    with pytest.raises(manifest.CacheError, match=r"no kernels for batch size 8 .* --batch 8 --precision bf16$"):
        manifest.load(r.manifest_path, net, str(spec), 8, H100_CC)
    with pytest.raises(manifest.CacheError, match=r"compute capability .* --batch 4 --precision bf16$"):
        manifest.load(r.manifest_path, net, str(spec), 4, (8, 0))
    with pytest.raises(manifest.CacheError, match="no sparse kernels, so no tuning applies to it"):
        manifest.load(r.manifest_path, net, str(spec), 4, H100_CC, tuning_path=tmp_path / "t.json")
    doc = json.loads(r.manifest_path.read_text())
    no_epilogue = {k: v for k, v in doc.items() if k != "epilogue"}  # a bundle from before it had one
    r.manifest_path.write_text(json.dumps(no_epilogue))
    with pytest.raises(manifest.CacheError, match=r"field 'epilogue' is missing .* --batch 4 --precision bf16$"):
        manifest.load(r.manifest_path, net, str(spec), 4, H100_CC)
    doc["precision"] = "fp8"
    r.manifest_path.write_text(json.dumps(doc))
    with pytest.raises(manifest.CacheError, match=r"field 'precision' is 'fp8', not one of fp32, bf16, fp16; rebuild"):
        manifest.load(r.manifest_path, net, str(spec), 4, H100_CC)


# --- the runtime's consumers ----------------------------------------------------------------------

@needs_nvcc
def test_engine_runs_the_bundles_precision(spec, tmp_path):
    """precision None is the bundle's: a bf16 bundle's engine is dense, so force='sparse' is refused (before
    anything loads weights)."""
    r = build16(spec, tmp_path)
    with pytest.raises(RunError, match="^bf16 runs every conv dense on the tensor cores: the sparse path needs fp32"):
        Engine(r.manifest_path.parent, force="sparse", device=FakeDevice())
    with pytest.raises(RunError, match=r"built for bf16, the run asks for fp16; rebuild with: .* --precision fp16$"):
        Engine(r.manifest_path.parent, device=FakeDevice(), precision="fp16")
    with pytest.raises(RunError, match="precision must be one of fp32, bf16, fp16, got 'fp8'"):
        Engine(r.manifest_path.parent, device=FakeDevice(), precision="fp8")


def gpu_stand_ins(monkeypatch):
    """Enough of a GPU machine for `snn-run` to reach the bundle: the refusals come before torch is used."""
    monkeypatch.setattr("snn.runtime.cuda.require_gpu", lambda: None)
    monkeypatch.setattr("snn.runtime.cuda.import_torch", lambda: None)
    monkeypatch.setattr("snn.runtime.cuda.Device", FakeDevice)
    monkeypatch.setattr("snn.runtime.images._pil", lambda: None)
    monkeypatch.setattr("snn.runtime.measure.timing.Env", FakeEnv)


@needs_nvcc
def test_infer_refuses_another_precision_than_the_bundles_in_one_line(spec, tmp_path, monkeypatch):
    gpu_stand_ins(monkeypatch)
    build16(spec, tmp_path)
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "a.jpg").write_bytes(b"x")
    args = ["infer", str(photos), "--spec", str(spec), "--cache", str(tmp_path / "gen"), "--batch", "4"]
    r = CliRunner().invoke(cli.run_main, args + ["--precision", "fp32"])
    m = tmp_path / "gen" / "tiny16" / "h100" / "manifest.json"
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output == (f"Error: {m}: built for bf16, the run asks for fp32; rebuild with: snn-codegen build {spec} "
                        f"--gpu h100 --batch 4 --precision fp32\n")
    r = CliRunner().invoke(cli.run_main, args + ["--compare-dense"])  # an FP32 comparison: the bundle is bf16
    assert r.exit_code == 1 and r.output.startswith(f"Error: {m}: built for bf16, the run asks for fp32; rebuild")


@needs_nvcc
def test_calibrate_refuses_a_16_bit_bundle(spec, tmp_path, monkeypatch):
    gpu_stand_ins(monkeypatch)
    r = build16(spec, tmp_path, "fp16")
    out = CliRunner().invoke(cli.run_main, ["calibrate", "--spec", str(spec), "--cache", str(tmp_path / "gen")])
    assert out.exit_code == 1 and "Traceback" not in out.output and len(out.output.strip().splitlines()) == 1
    assert out.output.startswith(f"Error: {r.manifest_path}: every conv of a fp16 bundle runs dense on cuDNN's "
                                 "tensor cores, so there is nothing to calibrate; calibrate an fp32 bundle, built "
                                 f"with: snn-codegen build {spec} --gpu h100 --batch 1")
    assert not (r.manifest_path.parent / "tuning.json").exists()


@needs_nvcc
def test_benchmarks_need_an_fp32_bundle(spec, tmp_path):
    build16(spec, tmp_path)
    with pytest.raises(manifest.CacheError, match=r"built for bf16, the run asks for fp32; .* --precision fp32$"):
        inputs.load_caches(FakeEnv(), load_spec(spec), str(spec), tmp_path / "gen", "auto", [1])
    shutil.rmtree(tmp_path / "gen")
    make_cache(tmp_path / "gen", load_spec(SPEC))
    path, caches = inputs.load_caches(FakeEnv(), load_spec(SPEC), SPEC, tmp_path / "gen", "h100", [1, 8])
    assert caches[8].precision == "fp32"
