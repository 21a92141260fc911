"""The README's first command, `make run`, on a fresh copy of the repository and a machine without a GPU:
it sets up its own venv, builds the default network's bundle, says in one line that classifying needs an
NVIDIA GPU and how to run it there, and exits 0. Needs PyPI (as `make setup` does), nvcc and make."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from snn.runtime.images import SAMPLES_DIR, discover

ROOT = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(".git", ".venv", ".carry", "generated", "build", "*.egg-info", "__pycache__",
                              ".pytest_cache")


def test_samples_are_photos_infer_finds():
    paths, skipped = discover(SAMPLES_DIR)
    assert len(paths) == 5 and not skipped  # nothing in the folder that infer would report as skipped
    assert all(p.stat().st_size < 64 * 1024 for p in paths)
    doc = (ROOT / "docs" / "runtime.md").read_text()
    assert all(p.name in doc for p in paths)  # each photo's source and licence is written down


@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("make") is None, reason="needs nvcc and make")
def test_make_run_without_a_gpu_builds_and_says_how(tmp_path):
    src = tmp_path / "snn"
    shutil.copytree(ROOT, src, ignore=SKIP)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", SNN_CACHE_DIR=str(tmp_path / "cache"))
    env["PATH"] = os.pathsep.join([env.get("PATH", ""), "/usr/local/cuda/bin"])
    for k in ("VIRTUAL_ENV", "MAKELEVEL", "MAKEFLAGS", "MFLAGS"):  # as a user's shell, not inside `make test`
        env.pop(k, None)
    r = subprocess.run(["make", "run"], cwd=src, env=env, capture_output=True, text=True, timeout=1500)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    last = [ln for ln in r.stdout.strip().splitlines() if not ln.startswith("make")][-1]
    assert last.startswith("Bundle built. Classifying needs an NVIDIA GPU") and "make run" in last, out[-2000:]
    assert (src / "generated" / "resnet152" / "h100" / "manifest.json").is_file()
    assert (src / ".venv" / "bin" / "snn-run").is_file()
    assert "Traceback" not in out
