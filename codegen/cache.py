"""The content-addressed cubin cache.

A cubin is stored under the sha256 of everything that changes the binary: the CUDA source, the nvcc
version string, the flags and the arch (Triton's habit). Next to it a JSON record keeps the parsed
ptxas report, so a cache hit still knows the kernel's registers, shared memory and spills without
running the compiler. Files land by writing a temp file and `os.replace`: an interrupted build never
leaves half a cubin, and two builds racing write the same bytes. The JSON is written last and is the
commit mark: an entry without it is a miss.

    $SNN_CACHE_DIR (default ~/.cache/snn/cubins)/
        ab/abcdef....cubin
        ab/abcdef....json      {"kernel", "nvcc", "arch", "flags", "sha256" (of the cubin),
                                "functions": {name: resources}, "ptxas"}
        nvcc-<hash>.json       version and supported arches of one nvcc binary (saves a subprocess)
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

ENV = "SNN_CACHE_DIR"


def default_dir() -> Path:
    env = os.environ.get(ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "snn" / "cubins"


def cache_key(source: str, nvcc_version: str, flags: str, arch: str) -> str:
    h = hashlib.sha256()
    for part in (source, nvcc_version, flags, arch):
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))  # length-prefixed: no two tuples hash alike
        h.update(data)
    return h.hexdigest()


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write path so that readers see the old file or the whole new one, never a part."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a bundle is meant to be shared
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_if_changed(path: Path, text: str) -> bool:
    """Atomically write text unless the file already holds it; True if written."""
    try:
        if path.read_text() == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    atomic_write(path, text)
    return True


class CubinCache:
    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else default_dir()

    def cubin_path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.cubin"

    def record_path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def lookup(self, key: str) -> dict | None:
        """The stored record (with "cubin": its absolute path, and "sha256") or None on a miss."""
        try:
            record = json.loads(self.record_path(key).read_text())
        except (FileNotFoundError, ValueError):
            return None
        cubin = self.cubin_path(key)
        if not cubin.is_file():
            return None
        record["cubin"] = str(cubin.resolve())
        sha = file_sha256(cubin)
        if record.setdefault("sha256", sha) != sha:  # changed since it was stored: compile it again
            return None
        return record

    def store(self, key: str, cubin: Path, record: dict) -> dict:
        """Move a freshly built cubin into the cache (same file system: a rename) and commit its record."""
        target = self.cubin_path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(cubin, target)
        except OSError:  # staging on another file system: copy to a temp name, then rename
            atomic_write(target, Path(cubin).read_bytes())
        record = {**record, "sha256": file_sha256(target)}
        atomic_write(self.record_path(key), json.dumps(record, indent=1, sort_keys=True))
        return {**record, "cubin": str(target.resolve())}

    @contextlib.contextmanager
    def lock(self):
        """Exclusive use of the cache for one build's lookups and compilation: a second build into the
        same cache waits, then finds the first one's cubins instead of compiling them again."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            f = open(self.root / ".lock", "a")
        except OSError:  # a read-only cache: lookups still work, and a miss says it cannot write
            yield
            return
        with f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def staging_dir(self) -> Path:
        """A fresh folder inside the cache, so finished cubins reach their place by rename.
        (make cannot take paths with spaces: then a system temp folder, and store copies.)"""
        if " " in str(self.root.resolve()):
            return Path(tempfile.mkdtemp(prefix="snn-stage-"))
        base = self.root / ".staging"
        base.mkdir(parents=True, exist_ok=True)
        for old in base.iterdir():  # left by a killed build
            try:
                if time.time() - old.stat().st_mtime > 86400:
                    shutil.rmtree(old, ignore_errors=True)
            except OSError:
                pass
        return Path(tempfile.mkdtemp(dir=base))
