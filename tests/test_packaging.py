"""A plain `pip install .` (not editable) in a fresh venv builds a bundle: the Makefile, templates,
GPU descriptions and specs ship inside the package, and nothing generic lands at the top of
site-packages. Needs PyPI (as `make setup` does), nvcc and make."""
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("make") is None,
                                reason="needs nvcc and make")
SKIP = shutil.ignore_patterns(".git", ".venv", ".carry", "generated", "build", "*.egg-info", "__pycache__",
                              ".pytest_cache", "docs")


def test_plain_install_builds_resnet50(tmp_path):
    src, env = tmp_path / "src", tmp_path / "venv"
    shutil.copytree(ROOT, src, ignore=SKIP)
    venv.create(env, with_pip=True)
    py = env / "bin" / "python"
    r = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(src)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    shutil.rmtree(src)  # the installed package alone from here on
    site = Path(subprocess.run([py, "-c", "import snn, pathlib; print(pathlib.Path(snn.__file__).parent.parent)"],
                               capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip())
    assert (site / "snn" / "Makefile").is_file() and (site / "snn" / "codegen" / "templates").is_dir()
    assert len(list((site / "snn" / "runtime" / "samples").glob("*.jpg"))) == 5  # infer's default photos
    assert (site / "snn" / "network_specs" / "profiles" / "resnet-trained.yaml").is_file()
    assert not (site / "codegen").exists() and not (site / "runtime").exists() and not (site / "cli.py").exists()

    spec = ROOT / "network_specs" / "resnet50.yaml"
    r = subprocess.run([env / "bin" / "snn-codegen", "build", str(spec), "--gpu", "h100", "--out", str(tmp_path / "b")],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={"PATH": f"{env / 'bin'}:/usr/bin:/bin:/usr/local/bin:/usr/local/cuda/bin",
                            "SNN_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "bundle: " in r.stdout
    check = ("import sys; from snn.codegen import bundle; p = bundle.verify(sys.argv[1]); "
             "print(p); sys.exit(1 if p else 0)")
    assert subprocess.run([py, "-c", check, str(tmp_path / "b" / "resnet50" / "h100")], cwd=tmp_path).returncode == 0
