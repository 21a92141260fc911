"""`snn-codegen build` as a user runs it (subprocesses, the real planner, emitter, nvcc and make): a
rebuild from the same inputs is a no-op under a second, one stopped half-way keeps its work, and two
builds into one cache compile each kernel once."""
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


def build(tmp_path, *args, cache=None, net="resnet50", **kw):
    env = {**os.environ, "SNN_CACHE_DIR": str(cache or tmp_path / "cache"), **kw.pop("env", {})}
    return subprocess.Popen([sys.executable, "-m", "snn.cli", "build", net, "--out", str(tmp_path / "gen"),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw)


def test_rebuild_from_the_same_inputs_is_a_no_op_under_a_second(tmp_path):
    first = build(tmp_path, "--batch", "1,8,32", net="resnet152")
    out, err = first.communicate(timeout=900)
    assert first.returncode == 0, err
    manifest = tmp_path / "gen" / "resnet152" / "h100" / "manifest.json"
    before = manifest.stat().st_mtime_ns
    t = time.perf_counter()
    again = build(tmp_path, "--batch", "1,8,32", net="resnet152")
    out, err = again.communicate(timeout=60)
    wall = time.perf_counter() - t
    assert again.returncode == 0, err
    assert "up to date" in out and manifest.stat().st_mtime_ns == before
    assert wall < 1.0, f"no-op rebuild took {wall:.2f} s"
    print(f"no-op rebuild of ResNet-152 at batch 1,8,32: {wall:.2f} s wall, the command as a user runs it")
    # other inputs (levels), or a damaged bundle, are not up to date
    other = build(tmp_path, "--batch", "1,8,32", "--levels", "0.5,0.7", net="resnet152")
    out, err = other.communicate(timeout=300)
    assert other.returncode == 0 and "up to date" not in out, err
    next(manifest.parent.glob("cubins/*.cubin")).write_bytes(b"damaged")
    fixed = build(tmp_path, "--batch", "1,8,32", "--levels", "0.5,0.7", net="resnet152")
    out, err = fixed.communicate(timeout=300)
    assert fixed.returncode == 0 and "up to date" not in out and " 0 compiled" in out, err


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
