"""`snn-codegen build` stopped half-way keeps its work, and two builds into one cache compile each
kernel once. Real commands (subprocesses), real nvcc and make."""
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("make") is None,
                                reason="needs nvcc and make")
MSG = ("interrupted: the kernels compiled so far are in the compiler cache; the same command continues from there")


def build(tmp_path, *args, cache=None, **kw):
    env = {**os.environ, "SNN_CACHE_DIR": str(cache or tmp_path / "cache"), **kw.pop("env", {})}
    return subprocess.Popen([sys.executable, "-m", "snn.cli", "build", "resnet50", "--out", str(tmp_path / "gen"),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw)


def records(cache: Path) -> int:
    return len(list(cache.glob("??/*.json")))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_build_keeps_every_finished_cubin_and_leaves_no_temp_files(tmp_path, sig):
    cache = tmp_path / "cache"
    p = build(tmp_path, "-j", "1")
    deadline = time.time() + 120
    while records(cache) < 2 and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert p.poll() is None, "the build ended before it could be interrupted"
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130
    assert err.strip().splitlines()[-1] == MSG and "Traceback" not in err
    kept = records(cache)
    assert kept >= 2
    assert not list(cache.rglob("*.tmp")) and not any((cache / ".staging").iterdir())
    assert not (tmp_path / "gen" / "resnet50" / "h100" / "manifest.json").exists()  # no half-written bundle
    again = build(tmp_path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert f" {kept} cache hits" in out  # it continued where the first one stopped


def test_two_builds_into_one_cache_compile_each_kernel_once(tmp_path):
    log = tmp_path / "nvcc.log"
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {shutil.which("nvcc")} "$@"\n')
    wrapper.chmod(0o755)
    cache = tmp_path / "cache"
    procs = [build(tmp_path / f"b{i}", "-j", "2", cache=cache, env={"NVCC": str(wrapper)}) for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    compiles = sum("-cubin" in line for line in log.read_text().splitlines())
    assert compiles == records(cache)  # every kernel compiled by one of the two, none by both
    assert sorted(" 0 cache hits" in o for o, _ in outs) == [False, True]
