"""The one compile service: CUDA sources -> cubins, through the content-addressed cache.

    Compiler(cache, jobs).compile({name: source}, arch) -> {name: record}

- cache lookups first (codegen/cache.py: the key covers source, nvcc version, flags and arch);
- the misses are staged in a folder inside the cache and compiled by the Makefile's `cubins` rule
  (`make -j N`, so nvcc runs in parallel, with the same rule a user runs by hand); the Makefile ships
  inside the package, so an installed snn compiles the same way as a checkout;
- each kernel's ptxas report is parsed and stored beside its cubin, so a hit still knows registers,
  shared memory and spills, and `problems()` fails a kernel with a stack frame or spills.

`snn-codegen build`, `snn-run calibrate --exhaustive` and the tools all compile through here.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from . import ptxas
from .cache import CubinCache, atomic_write, cache_key
from .errors import UserError

# The package root: the repository root in a checkout, site-packages/snn when installed (package data).
MAKEFILE = Path(__file__).resolve().parent.parent / "Makefile"
# set by the command's interrupt handler (cli.py): a KeyboardInterrupt raised where Python swallows it (a
# finalizer running when the signal lands) still stops the build at the next cubin
STOP = threading.Event()
# Everything nvcc is given besides the arch; part of the cache key. The Makefile rule adds
# `-cubin -arch=$(ARCH)` and these come in through NVCC_FLAGS.
NVCC_FLAGS = "-O3 -std=c++17 -Xptxas -v"
KEY_FLAGS = "-cubin " + NVCC_FLAGS
NVCC_HELP = ("install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads) and put its bin/ "
             "on PATH, or set NVCC=/path/to/nvcc")


@dataclass(frozen=True)
class Toolchain:
    nvcc: str                      # absolute path
    version: str                   # "13.0.88"
    version_string: str            # nvcc --version, whole: part of the cache key
    archs: tuple[str, ...] | None  # sm_XX it can compile for (None: this nvcc cannot list them)


def find_nvcc() -> str:
    env = os.environ.get("NVCC")
    if env:
        path = shutil.which(env)
        if not path:
            raise UserError(f"NVCC={env} is not an executable; {NVCC_HELP}")
        return os.path.abspath(path)
    path = shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc", "/opt/cuda/bin/nvcc") if os.access(p, os.X_OK)), None)
    if not path:
        raise UserError(f"nvcc not found: {NVCC_HELP}")
    return os.path.abspath(path)


def toolchain(nvcc: str, cache: CubinCache) -> Toolchain:
    """nvcc's version and arches, remembered in the cache per binary (path, size, mtime) so that a
    build with everything cached runs no subprocess at all."""
    st = os.stat(nvcc)
    stamp = {"path": os.path.realpath(nvcc), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    memo = cache.root / f"nvcc-{hashlib.sha256(nvcc.encode()).hexdigest()[:16]}.json"
    try:
        d = json.loads(memo.read_text())
        if d.get("stamp") == stamp:
            return Toolchain(nvcc, d["version"], d["version_string"], tuple(d["archs"]) if d["archs"] else None)
    except (FileNotFoundError, ValueError, KeyError):
        pass
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise UserError(f"cannot run nvcc at {nvcc}: {e.strerror}; {NVCC_HELP}") from None
    m = re.search(r"\bV(\d+\.\d+\.\d+)", out.stdout)
    if out.returncode != 0 or not m:
        raise UserError(f"{nvcc} --version did not report an nvcc version; {NVCC_HELP}")
    lst = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, timeout=60)
    archs = None
    if lst.returncode == 0:
        archs = tuple(sorted({"sm_" + a.split("_", 1)[1] for a in lst.stdout.split() if a.startswith("compute_")},
                             key=lambda a: int(re.sub(r"\D", "", a))))
    tc = Toolchain(nvcc, m.group(1), out.stdout.strip(), archs or None)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(memo, json.dumps({"stamp": stamp, "version": tc.version, "version_string": tc.version_string,
                                       "archs": list(tc.archs) if tc.archs else None}))
    except OSError:
        pass  # only a speed-up
    return tc


ARCH_RE = re.compile(r"^sm_(\d+)([af]?)$")


def check_arch(arch: str, tc: Toolchain | None) -> list[int]:
    """Validate an arch for this nvcc (None: a build that compiles nothing, the form alone); returns the
    compute capability, e.g. sm_90 -> [9, 0]."""
    m = ARCH_RE.match(arch or "")
    archs = tc.archs if tc is not None else ()
    known = f"nvcc {tc.version} compiles for {', '.join(archs)}" if archs else "expected e.g. sm_90"
    if not m or (archs and f"sm_{m.group(1)}" not in archs):
        raise UserError(f"unknown arch {arch!r}: {known}")
    digits = m.group(1)
    return [int(digits[:-1]), int(digits[-1])]


@dataclass
class Unit:
    """One source to turn into a cubin."""
    name: str
    source: str
    key: str = ""
    record: dict | None = None  # the cache record once known


def _make_cmd(stage: Path, arch: str, tc: Toolchain, jobs: int) -> list[str]:
    make = shutil.which(os.environ.get("MAKE", "make"))
    if not make:
        raise UserError("make not found: install GNU make (e.g. apt-get install make); nvcc runs through the Makefile")
    if not MAKEFILE.is_file():
        raise UserError(f"the cubin rules are in snn's Makefile, not found at {MAKEFILE} (reinstall snn)")
    return [make, "--no-print-directory", "-k", f"-j{jobs}", "-f", str(MAKEFILE), "cubins",
            f"GEN={stage}", f"CUBIN_DIR={stage}", f"ARCH={arch}", f"NVCC={tc.nvcc}", f"NVCC_FLAGS={NVCC_FLAGS}"]


def compile_units(units: list[Unit], arch: str, tc: Toolchain, cache: CubinCache, jobs: int,
                  progress: Callable[[int], Any] | None = None) -> None:
    """Compile units (all cache misses) in parallel with make; store each cubin and its parsed ptxas
    report in the cache as soon as it lands (an interrupted build keeps every finished one) and set
    unit.record. Raises UserError naming the first kernel nvcc rejected. On any interruption make and
    nvcc are stopped and the staging folder, nvcc's temporary files included, is removed."""
    if not units:
        return
    try:
        stage = cache.staging_dir()
    except OSError as e:
        raise UserError(f"cannot write to the cubin cache {cache.root}: {e.strerror} (set SNN_CACHE_DIR)") from None
    by_name = {u.name: u for u in units}

    def store(u: Unit) -> None:
        text = (stage / f"{u.name}.ptxas").read_text(errors="replace")
        funcs = ptxas.parse_ptxas(text)
        u.record = cache.store(u.key, stage / f"{u.name}.cubin", {
            "kernel": u.name, "nvcc": tc.version, "arch": arch, "flags": KEY_FLAGS,
            "functions": {f.name: f.to_dict() for f in funcs.values()}, "ptxas": text})

    try:
        for u in units:
            (stage / f"{u.name}.cu").write_text(u.source)
        cmd = _make_cmd(stage, arch, tc, jobs)
        env = {**os.environ, "TMPDIR": str(stage)}  # nvcc's temporary files go with the stage
        with tempfile.TemporaryFile("w+") as err:
            # its own process group: an interruption stops make and every nvcc it started, nothing else
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                    start_new_session=True)
            try:
                for line in proc.stdout:  # the rule prints "cubin <name>" as each one lands
                    if line.startswith("cubin "):
                        if (u := by_name.get(line.split(None, 1)[1].strip())) is not None:
                            store(u)
                        if progress:
                            progress(1)
                    if STOP.is_set():
                        raise KeyboardInterrupt
                proc.wait()
                if STOP.is_set():
                    raise KeyboardInterrupt
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
                raise
            err.seek(0)
            make_err = err.read()
        failed = []
        for u in units:
            if u.record is not None:
                continue
            report = stage / f"{u.name}.ptxas"
            if (stage / f"{u.name}.cubin").is_file():  # landed without its line being read
                store(u)
            else:
                text = report.read_text(errors="replace") if report.exists() else ""
                failed.append((u, text.strip() or make_err.strip()))
        if failed:
            u, msg = failed[0]
            lines = msg.splitlines()
            shown = "\n".join(lines[:30]) + ("\n  ..." if len(lines) > 30 else "")
            more = f" (and {len(failed) - 1} more kernel(s))" if len(failed) > 1 else ""
            raise UserError(f"nvcc failed on kernel {u.name}{more}:\n{shown}")
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def problems(record: dict) -> list[str]:
    """Why a compiled kernel breaks the register-tile promise (stack frame, spills); empty if it keeps it."""
    funcs = {n: ptxas.FunctionResources.from_dict(d) for n, d in record["functions"].items()}
    return ptxas.problems(funcs)


def resources(record: dict) -> dict:
    """registers / smem / spills of a record's functions, as the manifest lists them."""
    funcs = {n: ptxas.FunctionResources.from_dict(d) for n, d in record["functions"].items()}
    return ptxas.summarize(funcs)


@dataclass
class Compiled:
    records: dict[str, dict]          # name -> cache record ("cubin": its path in the cache)
    hits: int
    compiled: int
    seconds: float                    # spent compiling the misses


class Compiler:
    """nvcc through the Makefile, in parallel, behind the content-addressed cache."""

    def __init__(self, cache: CubinCache | None = None, jobs: int | None = None):
        self.cache = cache or CubinCache()
        self.jobs = jobs or os.cpu_count() or 1

    @cached_property
    def toolchain(self) -> Toolchain:
        return toolchain(find_nvcc(), self.cache)

    def key(self, source: str, arch: str) -> str:
        return cache_key(source, self.toolchain.version_string, KEY_FLAGS, arch)

    def compile(self, sources: dict[str, str], arch: str, force: bool = False,
                progress_factory: Callable[[int], Any] | None = None) -> Compiled:
        """Every source's cubin record: cache hits as they are, misses compiled (all of them with force).

        progress_factory(n) -> a context manager with .update(k) (click.progressbar), shown only when
        something compiles."""
        check_arch(arch, self.toolchain)
        units = [Unit(name, src, self.key(src, arch)) for name, src in sources.items()]
        hits = 0
        with self.cache.lock():  # lookups after another build's compilation, never beside it
            for u in units:
                if not force and (rec := self.cache.lookup(u.key)) is not None:
                    u.record, hits = rec, hits + 1
            misses = [u for u in units if u.record is None]
            t0 = time.perf_counter()
            if misses and progress_factory is not None:
                with progress_factory(len(misses)) as bar:
                    compile_units(misses, arch, self.toolchain, self.cache, self.jobs, bar.update)
            else:
                compile_units(misses, arch, self.toolchain, self.cache, self.jobs)
        return Compiled({u.name: u.record for u in units}, hits, len(misses), time.perf_counter() - t0)
