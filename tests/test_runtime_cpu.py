"""Runtime parts that need neither torch nor a GPU: image discovery, manifest checks, dispatch, CLI errors."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from snn import cli
from snn.codegen import bundle
from snn.codegen.spec import load_spec
from snn.runtime import dispatch, images, manifest
from snn.runtime.errors import RunError

ROOT = Path(__file__).resolve().parents[1]
SPEC = str(ROOT / "network_specs" / "resnet50.yaml")
H100_CC = (9, 0)


# --- dispatch -------------------------------------------------------------------------------------

ENTRY = {"threshold": 0.5, "levels": {f"{l:.2f}": {"kernel": f"k{int(round(l * 100))}"}
                                      for l in (0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.9)}}


@pytest.mark.parametrize("s, want", [
    (0.0, None), (0.3, None), (0.49, None),        # below the threshold: dense
    (0.5, "k50"), (0.52, "k50"), (0.55, "k55"),    # highest level not above the sparsity
    (0.69, "k60"), (0.7, "k70"), (0.89, "k70"), (0.95, "k90"), (1.0, "k90")])
def test_choose_auto(s, want):
    assert dispatch.choose(ENTRY, s) == want


def test_choose_level_printed_as_text_is_reached_exactly():
    # 0.45 measured as 9/20 must select level "0.45" despite float rounding
    entry = {"threshold": 0.4, "levels": {"0.40": {"kernel": "a"}, "0.45": {"kernel": "b"}}}
    assert dispatch.choose(entry, 9 / 20) == "b"
    assert dispatch.choose(entry, 0.1 + 0.35) == "b"


def test_choose_force_modes():
    assert dispatch.choose(ENTRY, 0.95, "dense") is None
    assert dispatch.choose(ENTRY, 0.1, "sparse") == "k40"   # below every level: the lowest one
    assert dispatch.choose(ENTRY, 0.62, "sparse") == "k60"
    assert dispatch.choose(None, 0.9, "sparse") is None     # layer without kernels stays dense
    assert dispatch.choose({"threshold": 0.5, "levels": {}}, 0.9, "sparse") is None
    with pytest.raises(ValueError):
        dispatch.choose(ENTRY, 0.5, "fast")


def test_choose_threshold_above_levels():
    entry = {"threshold": 0.62, "levels": ENTRY["levels"]}
    assert dispatch.choose(entry, 0.61) is None
    assert dispatch.choose(entry, 0.62) == "k60"


def test_choose_threshold_defaults_to_lowest_level():
    entry = {"levels": {"0.60": {"kernel": "a"}, "0.80": {"kernel": "b"}}}
    assert dispatch.choose(entry, 0.59) is None
    assert dispatch.choose(entry, 0.85) == "b"


# --- images ---------------------------------------------------------------------------------------

def test_discover_recursive_sorted_and_skips_non_images(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".hidden").mkdir()
    for p in ["z.JPG", "a.png", "b/c.webp", "b/d.jpeg", "b/e.BMP", "notes.txt", "b/data.npy",
              ".DS_Store", ".hidden/x.jpg"]:
        (tmp_path / p).write_bytes(b"x")
    found, skipped = images.discover(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["a.png", "z.JPG", "b/c.webp", "b/d.jpeg", "b/e.BMP"]
    assert sorted(Path(s.path).name for s in skipped) == ["data.npy", "notes.txt"]
    assert all("not an image" in s.reason for s in skipped)


def test_discover_single_file_and_missing(tmp_path):
    f = tmp_path / "one.png"
    f.write_bytes(b"x")
    assert images.discover(f) == ([f], [])
    with pytest.raises(FileNotFoundError, match="nope"):
        images.discover(tmp_path / "nope")


def test_preprocess_matches_imagenet_recipe(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    import numpy as np
    rgb = np.zeros((300, 600, 3), dtype=np.uint8)
    rgb[:, :300] = (255, 0, 0)   # left half red
    rgb[:, 300:] = (0, 0, 255)   # right half blue
    Image.fromarray(rgb).save(tmp_path / "x.png")
    a = images.preprocess(tmp_path / "x.png")
    assert a.shape == (3, 224, 224) and a.dtype == np.float32
    # resized to 256x512 and centre-cropped: columns 144..367, the colour edge falls at column 112
    red = (1.0 - images.MEAN[0]) / images.STD[0]
    assert a[0, 100, 10] == pytest.approx(red, abs=1e-5)
    assert a[2, 100, 200] == pytest.approx((1.0 - images.MEAN[2]) / images.STD[2], abs=1e-5)
    assert a[0, 100, 200] == pytest.approx(-images.MEAN[0] / images.STD[0], abs=1e-5)


def test_preprocess_reports_undecodable_file(tmp_path):
    pytest.importorskip("PIL.Image")
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8 this is not really a jpeg")
    with pytest.raises(ValueError, match="cannot decode"):
        images.preprocess(bad)


# --- manifest -------------------------------------------------------------------------------------

def make_cache(tmp_path, net, batches=(1, 8), cc=(9, 0), gpu="h100", layers=None):
    """A manifest in the documented format, with (fake) cubin files that exist."""
    d = tmp_path / net.name / gpu
    d.mkdir(parents=True)
    (d / "cubins").mkdir()
    epi = d / "cubins" / "epilogue.cubin"
    epi.write_bytes(b"cubin")
    kernels, entries = {}, []
    for c in (layers if layers is not None else net.convs[1:4]):
        name = f"sconv_{c.shape.tag()}"
        cub = d / "cubins" / f"{name}.cubin"
        cub.write_bytes(b"cubin")
        kernels[name] = {"cubin": str(cub.relative_to(d)), "shape": manifest.shape_dict(c.shape), "batch": 1,
                         "steps": [{"op": "memset", "buffer": "output"}], "workspace": {}, "weight_layout": "CRSN"}
        entries.append({"index": c.index, "name": c.name, "shape": manifest.shape_dict(c.shape),
                        "batches": {str(b): {"threshold": 0.5, "threshold_source": "default",
                                             "levels": {"0.40": {"kernel": name, "predicted_us": 1.0}}}
                                    for b in batches}})
    doc = {"format": bundle.FORMAT, "network": net.name, "gpu": gpu, "arch": f"sm_{cc[0]}{cc[1]}", "compute_capability": list(cc),
           "batches": list(batches), "levels": [0.4], "nvcc": "13.0",
           "epilogue": {"cubin": str(epi.relative_to(d)), "function": "snn_epilogue"}, "kernels": kernels,
           "layers": entries}
    path = d / "manifest.json"
    path.write_text(json.dumps(doc))
    return path, doc


@pytest.fixture(scope="module")
def net():
    return load_spec(SPEC)


def test_manifest_loads_and_answers(tmp_path, net):
    path, doc = make_cache(tmp_path, net)
    cache = manifest.load(path, net, SPEC, 8, H100_CC)
    assert cache.batches == [1, 8]
    c = net.convs[2]
    assert cache.layer_entry(c.name, 8)["threshold"] == 0.5
    assert cache.layer_entry(net.convs[0].name, 8) is None
    assert cache.layer_entry(c.name, 4) is None
    assert cache.bucket(1, 8) == 1 and cache.bucket(3, 8) == 8 and cache.bucket(8, 8) == 8
    assert dispatch.choose(cache.layer_entry(c.name, 1), 0.6) == f"sconv_{c.shape.tag()}"


def _msg(excinfo):
    return str(excinfo.value)


def test_manifest_missing_names_the_build_command(tmp_path, net):
    with pytest.raises(manifest.CacheError) as e:
        manifest.locate(tmp_path, net, SPEC, "h100", 32, "NVIDIA H100 80GB HBM3", H100_CC)
    assert f"snn-codegen build {SPEC} --gpu h100 --batch 32" in _msg(e)
    with pytest.raises(manifest.CacheError) as e:
        manifest.locate(tmp_path, net, SPEC, "auto", 8, "NVIDIA H100 80GB HBM3", H100_CC)
    assert f"snn-codegen build {SPEC} --gpu h100 --batch 8" in _msg(e)
    assert "\n" not in _msg(e)


def test_manifest_locate_auto_picks_the_build_for_this_gpu(tmp_path, net):
    make_cache(tmp_path, net, cc=(8, 0), gpu="a100")
    path, _ = make_cache(tmp_path, net, cc=(9, 0), gpu="h100")
    assert manifest.locate(tmp_path, net, SPEC, "auto", 8, "NVIDIA H100 PCIe", H100_CC) == path
    with pytest.raises(manifest.CacheError, match="built for this GPU"):
        manifest.locate(tmp_path, net, SPEC, "auto", 8, "NVIDIA L4", (8, 9))


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.update(compute_capability=[8, 0]), "built for compute capability 8.0"),
    (lambda d: d.update(network="resnet101"), "built for network 'resnet101'"),
    (lambda d: d.update(batches=[1]), "no kernels for batch size 8 (built for 1)"),
    (lambda d: d.pop("kernels"), "field 'kernels'"),
    (lambda d: d["layers"][0].update(name="layer9.conv"), "conv 'layer9.conv', which the spec"),
    (lambda d: d["layers"][0]["shape"].update(C=999), "built for another shape (C=999"),
    (lambda d: d["layers"][0]["batches"]["8"]["levels"]["0.40"].update(kernel="gone"), "kernel 'gone' is not in"),
    (lambda d: [k.update(cubin="/nonexistent/x.cubin") for k in d["kernels"].values()], "is not a path inside"),
    (lambda d: [k.update(cubin="cubins/gone.cubin") for k in d["kernels"].values()], "cubins/gone.cubin is missing"),
    (lambda d: d["epilogue"].update(cubin="../e.cubin"), "<epilogue>: cubin path '../e.cubin' is not a path inside"),
    (lambda d: d.pop("format"), f"bundle format None, this snn reads format {bundle.FORMAT}"),
])
def test_manifest_stale_is_one_line_with_rebuild_command(tmp_path, net, mutate, needle):
    path, doc = make_cache(tmp_path, net)
    mutate(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(manifest.CacheError) as e:
        manifest.load(path, net, SPEC, 8, H100_CC)
    msg = _msg(e)
    assert needle in msg
    assert msg.endswith(f"rebuild with: snn-codegen build {SPEC} --gpu h100 --batch 8")
    assert "\n" not in msg and str(path) in msg


def test_manifest_truncated_json(tmp_path, net):
    path, _ = make_cache(tmp_path, net)
    path.write_text(path.read_text()[:50])
    with pytest.raises(manifest.CacheError, match="not valid JSON.*rebuild with: snn-codegen build"):
        manifest.load(path, net, SPEC, 8, H100_CC)


def test_guess_gpu_name():
    assert manifest.guess_gpu_name("NVIDIA H100 80GB HBM3") == "h100"
    assert manifest.guess_gpu_name("NVIDIA A100-SXM4-40GB") == "a100"
    assert manifest.guess_gpu_name("Mystery accelerator") == "auto"


# --- CLI ------------------------------------------------------------------------------------------

def _infer(*args):
    return CliRunner().invoke(cli.run_main, ["infer", *args])


def test_infer_missing_folder(tmp_path):
    r = _infer(str(tmp_path / "none"), "--spec", SPEC)
    assert r.exit_code == 1 and "no such file or directory" in r.output and "Traceback" not in r.output


def test_infer_folder_without_images(tmp_path):
    (tmp_path / "readme.txt").write_text("x")
    r = _infer(str(tmp_path), "--spec", SPEC)
    assert r.exit_code == 1 and "no image files found" in r.output


def test_infer_bad_spec(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"x")
    r = _infer(str(tmp_path), "--spec", str(tmp_path / "missing.yaml"))
    assert r.exit_code == 1 and "missing.yaml: no such file" in r.output


def test_infer_bad_output_suffix(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"x")
    r = _infer(str(tmp_path), "--spec", SPEC, "--output", "out.xlsx")
    assert r.exit_code == 1 and "use a .csv or .json" in r.output


def test_infer_bad_force_and_batch(tmp_path):
    assert _infer(str(tmp_path), "--spec", SPEC, "--path", "fast").exit_code == 2
    assert _infer(str(tmp_path), "--spec", SPEC, "--batch", "0").exit_code == 2
    assert _infer(str(tmp_path), "--spec", SPEC, "--precision", "fp8").exit_code == 2
    assert _infer(str(tmp_path), "--spec", SPEC, "--devices", "0").exit_code == 2


def test_infer_refuses_what_16_bits_and_torchrun_cannot_do(tmp_path, monkeypatch):
    (tmp_path / "a.jpg").write_bytes(b"x")
    r = _infer(str(tmp_path), "--spec", SPEC, "--precision", "bf16", "--compare-dense")
    assert r.exit_code == 1 and "compares with cuDNN FP32: run it with --precision fp32, not bf16" in r.output
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    r = _infer(str(tmp_path), "--spec", SPEC, "--compare-dense")
    assert r.exit_code == 1 and "times one GPU: run it without torchrun" in r.output
    r = _infer(str(tmp_path), "--spec", SPEC, "--devices", "2")
    assert r.exit_code == 1 and "leave it out under torchrun" in r.output
    monkeypatch.setenv("RANK", "1")   # every rank meets the mistake; only rank 0 prints it
    r = _infer(str(tmp_path), "--spec", SPEC, "--compare-dense")
    assert r.exit_code == 1 and r.output == ""


def test_infer_without_a_gpu_says_so_before_anything_about_torch(tmp_path, monkeypatch):
    (tmp_path / "a.jpg").write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "torch", None)  # no torch either: the GPU is what the user must learn about
    monkeypatch.setattr("snn.runtime.cuda.gpu_missing", lambda: "no NVIDIA driver found (DynamicLibNotFoundError)")
    r = _infer(str(tmp_path), "--spec", SPEC)
    assert r.exit_code == 1
    assert r.output.strip() == ("Error: no NVIDIA driver found (DynamicLibNotFoundError): snn-run runs on a machine "
                                "with an NVIDIA GPU and its driver; `snn-codegen build` makes the bundle on any "
                                "machine, to copy there")


def test_gpu_missing_answers_without_torch():
    code = "import sys; from snn.runtime import cuda; print(repr(cuda.gpu_missing()), 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    why, torch_imported = " ".join(out[:-1]), out[-1]
    assert why == "None" or why.startswith("'no ")  # this machine's own answer: a reason, or None on a GPU machine
    assert torch_imported == "False"


def test_infer_without_torch_says_what_to_install(tmp_path, monkeypatch):
    (tmp_path / "a.jpg").write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.setattr("snn.runtime.cuda.gpu_missing", lambda: None)  # a GPU machine without torch
    r = _infer(str(tmp_path), "--spec", SPEC)
    assert r.exit_code == 1
    assert r.output.strip() == "Error: snn-run needs PyTorch with CUDA: pip install -e '.[gpu]'"


def test_cpu_modules_do_not_import_torch():
    code = ("import sys, snn.cli, snn.runtime.manifest, snn.runtime.dispatch, snn.runtime.images, "
            "snn.runtime.infer, snn.runtime.cuda, snn.runtime.weights, snn.runtime.executor, snn.runtime.kernels, "
            "snn.runtime.engine, snn.runtime.tuning, snn.runtime.lower; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    help_out = subprocess.run([sys.executable, "-m", "snn.cli", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert help_out.returncode == 0


def test_cuda_errors_name_the_call():
    from cuda.bindings import driver
    from snn.runtime.cuda import CudaError, check
    assert check((driver.CUresult.CUDA_SUCCESS, 5), "x") == 5
    assert check((driver.CUresult.CUDA_SUCCESS,), "x") is None
    assert check((driver.CUresult.CUDA_SUCCESS, 1, 2), "x") == (1, 2)
    with pytest.raises(CudaError, match=r"^loading k.cubin \(cuModuleLoadData\): CUDA_ERROR_NO_BINARY_FOR_GPU"):
        check((driver.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU,), "loading k.cubin (cuModuleLoadData)")
    assert issubclass(CudaError, RunError)
