"""The content-addressed cubin cache: keys, atomic writes, records."""
import json
import os

import pytest

from snn.codegen import cache as cachemod
from snn.codegen.cache import CubinCache, atomic_write, cache_key, write_if_changed


def test_key_changes_with_every_part():
    base = ("src", "nvcc 13.0.88", "-O3", "sm_90")
    keys = {cache_key(*base)}
    for i, alt in enumerate(("src2", "nvcc 13.1", "-O2", "sm_80")):
        parts = list(base)
        parts[i] = alt
        keys.add(cache_key(*parts))
    assert len(keys) == 5
    assert cache_key(*base) == cache_key(*base)
    # length prefixes: moving a boundary changes the key
    assert cache_key("ab", "c", "", "") != cache_key("a", "bc", "", "")


def test_default_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SNN_CACHE_DIR", str(tmp_path / "x"))
    assert cachemod.default_dir() == tmp_path / "x"
    assert CubinCache().root == tmp_path / "x"
    monkeypatch.delenv("SNN_CACHE_DIR")
    assert cachemod.default_dir().parts[-3:] == (".cache", "snn", "cubins")


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    p = tmp_path / "f.bin"
    atomic_write(p, b"one")
    atomic_write(p, "two")
    assert p.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_interrupted_write_keeps_old_file(tmp_path, monkeypatch):
    p = tmp_path / "f"
    atomic_write(p, "old")

    def boom(src, dst):
        raise KeyboardInterrupt
    monkeypatch.setattr(cachemod.os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(p, "new")
    assert p.read_text() == "old"
    assert os.listdir(tmp_path) == ["f"]


def test_written_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "a", "x")
        os.umask(0o077)
        atomic_write(tmp_path / "b", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600: bundles are shared
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o600


def test_write_if_changed(tmp_path):
    p = tmp_path / "a.cu"
    assert write_if_changed(p, "x")
    m = p.stat().st_mtime_ns
    assert not write_if_changed(p, "x")
    assert p.stat().st_mtime_ns == m
    assert write_if_changed(p, "y") and p.read_text() == "y"


def test_store_and_lookup(tmp_path):
    c = CubinCache(tmp_path / "cache")
    key = cache_key("s", "v", "f", "sm_90")
    assert c.lookup(key) is None
    stage = c.staging_dir()
    (stage / "k.cubin").write_bytes(b"\x7fELF...")
    rec = c.store(key, stage / "k.cubin", {"kernel": "k", "functions": {}})
    assert not (stage / "k.cubin").exists()  # moved, not copied
    got = c.lookup(key)
    assert got == rec and got["kernel"] == "k"
    assert open(got["cubin"], "rb").read() == b"\x7fELF..."
    assert c.cubin_path(key).parent.name == key[:2]
    assert "cubin" not in json.loads(c.record_path(key).read_text())  # the path is derived, not stored
    assert got["sha256"] == cachemod.file_sha256(got["cubin"])
    c.cubin_path(key).write_bytes(b"\x7fELF changed")  # no longer what was compiled: a miss
    assert c.lookup(key) is None


def test_lock_is_exclusive(tmp_path):
    import fcntl
    c = CubinCache(tmp_path / "cache")
    with c.lock():
        with open(c.root / ".lock", "a") as other:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(c.root / ".lock", "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released


def test_record_is_commit_mark(tmp_path):
    c = CubinCache(tmp_path)
    key = cache_key("s", "v", "f", "sm_90")
    c.cubin_path(key).parent.mkdir(parents=True)
    c.cubin_path(key).write_bytes(b"half")  # a cubin without its record: a crash between the two
    assert c.lookup(key) is None
    c.record_path(key).write_text("{not json")
    assert c.lookup(key) is None
    c.record_path(key).write_text("{}")
    c.cubin_path(key).unlink()  # a record whose cubin was deleted
    assert c.lookup(key) is None


def test_staging_outside_a_cache_path_with_spaces(tmp_path):
    c = CubinCache(tmp_path / "my cache")
    stage = c.staging_dir()
    try:
        assert " " not in str(stage)
        (stage / "k.cubin").write_bytes(b"bytes")
        key = cache_key("s", "v", "f", "sm_90")
        rec = c.store(key, stage / "k.cubin", {"functions": {}})
        assert open(rec["cubin"], "rb").read() == b"bytes" and c.lookup(key) is not None
    finally:
        import shutil
        shutil.rmtree(stage, ignore_errors=True)


def test_old_staging_folders_are_swept(tmp_path):
    c = CubinCache(tmp_path)
    old = c.staging_dir()
    os.utime(old, (1, 1))
    fresh = c.staging_dir()
    assert not old.exists() and fresh.exists()
