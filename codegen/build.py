"""`snn-codegen build`: plan -> render -> make -> cubins, and the manifest that ties them together.

    plan      costmodel.plan_network per batch: layer -> level -> KernelConfig (+ predicted us), and with
              --candidates K up to K - 1 alternatives per level for `snn-run calibrate` to measure
    render    emit.render_sparse once per distinct (shape, batch, config) -- the kernel's name --
              shared across layers and levels; emit.render_epilogue once
    sources   generated/<network>/<gpu>/<kernel>.cu, rewritten only when the content changed
    compile   cache misses only: staged in a folder inside the cache and compiled by the repo
              Makefile's `cubins` target (make -j N, so nvcc runs in parallel); each kernel's ptxas
              report is parsed and stored next to its cubin
    check     any stack frame or spill fails the build, naming the kernel (the register tile must
              stay in registers)
    manifest  generated/<network>/<gpu>/manifest.json (docs/interfaces.md, section cubin)

Nothing here imports torch or needs a GPU. The planning and rendering stages are reached through
`Stages` (see `default_stages`, the one place that imports the cost model and the emitter), so tests
and other front ends can inject their own.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import ptxas
from .cache import CubinCache, atomic_write, cache_key, write_if_changed
from .errors import UserError
from .spec import Network

REPO_MAKEFILE = Path(__file__).resolve().parent.parent / "Makefile"
# Everything nvcc is given besides the arch; part of the cache key. The Makefile rule adds
# `-cubin -arch=$(ARCH)` and these come in through NVCC_FLAGS.
NVCC_FLAGS = "-O3 -std=c++17 -Xptxas -v"
KEY_FLAGS = "-cubin " + NVCC_FLAGS
DEFAULT_LEVELS = "0.4:0.9:0.05"
DEFAULT_THRESHOLD = 0.5
EPILOGUE_FUNCTION = "snn_epilogue"
NVCC_HELP = ("install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads) and put its bin/ "
             "on PATH, or set NVCC=/path/to/nvcc")


# ---------------------------------------------------------------------------------------------
# The stages this module drives, and the one place that imports them

@dataclass
class Stages:
    plan_network: Callable[..., Any]        # (net, gpu, batch, levels) -> Plan
    render_sparse: Callable[..., Any]       # (shape, batch, config) -> EmittedKernel
    render_epilogue: Callable[[], tuple[str, str]]
    estimate_resources: Callable[..., tuple[int, int]]  # (shape, config) -> (regs, smem)
    load_gpu: Callable[[str], Any] | None = None
    render_selector: Callable[[], tuple[str, str]] | None = None  # device-side dispatch (runtime/graph.py)


def default_stages(model: str = "snn", candidates: int = 1) -> Stages:
    """The real cost model (stage-3 `model`, costmodel.MODELS; `candidates` configs per level, the model's
    pick first) and emitter (docs/interfaces.md, sections plan and source)."""
    from functools import partial

    from .costmodel import estimate_resources, plan_network
    from .emit import render_epilogue, render_selector, render_sparse
    from .gpu import load_gpu
    kw = {"model": model} | ({"candidates": candidates} if candidates != 1 else {})
    return Stages(partial(plan_network, **kw), render_sparse, render_epilogue, estimate_resources, load_gpu,
                  render_selector)


def choice_candidates(choice) -> list:
    """(config, predicted us) of a plan's choice: the pick first, then any alternatives (fakes have none)."""
    cands = getattr(choice, "candidates", None)
    return cands() if cands else [(choice.config, choice.predicted_us)]


# ---------------------------------------------------------------------------------------------
# Option parsing (shared by the CLI and callers)

def parse_batches(text: str) -> list[int]:
    """'1,8,32' -> [1, 8, 32] (sorted, distinct)."""
    out = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part.isdigit() or int(part) <= 0:
            raise UserError(f"--batch: expected positive integers separated by commas (e.g. 1,8,32), got {text!r}")
        out.add(int(part))
    return sorted(out)


def parse_levels(text: str) -> list[float]:
    """The cost model's level syntax, sorted and without repeats (one kernel set per level)."""
    from .costmodel import parse_levels as parse
    return sorted(set(parse(text)))


# ---------------------------------------------------------------------------------------------
# nvcc

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


_ARCH = re.compile(r"^sm_(\d+)([af]?)$")


def check_arch(arch: str, tc: Toolchain) -> list[int]:
    """Validate an arch for this nvcc; returns the compute capability, e.g. sm_90 -> [9, 0]."""
    m = _ARCH.match(arch or "")
    known = f"nvcc {tc.version} compiles for {', '.join(tc.archs)}" if tc.archs else "expected e.g. sm_90"
    if not m or (tc.archs and f"sm_{m.group(1)}" not in tc.archs):
        raise UserError(f"unknown arch {arch!r}: {known}")
    digits = m.group(1)
    return [int(digits[:-1]), int(digits[-1])]


# ---------------------------------------------------------------------------------------------
# Compilation of cache misses through the Makefile

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
    if not REPO_MAKEFILE.is_file():
        raise UserError(f"the cubin rules are in the repository's Makefile, not found at {REPO_MAKEFILE}")
    return [make, "--no-print-directory", "-k", f"-j{jobs}", "-f", str(REPO_MAKEFILE), "cubins",
            f"GEN={stage}", f"CUBIN_DIR={stage}", f"ARCH={arch}", f"NVCC={tc.nvcc}", f"NVCC_FLAGS={NVCC_FLAGS}"]


def compile_units(units: list[Unit], arch: str, tc: Toolchain, cache: CubinCache, jobs: int,
                  progress: Callable[[int], Any] | None = None) -> None:
    """Compile units (all cache misses) in parallel with make; store each cubin and its parsed ptxas
    report in the cache and set unit.record. Raises UserError naming the first kernel nvcc rejected."""
    if not units:
        return
    try:
        stage = cache.staging_dir()
    except OSError as e:
        raise UserError(f"cannot write to the cubin cache {cache.root}: {e.strerror} (set SNN_CACHE_DIR)") from None
    try:
        for u in units:
            (stage / f"{u.name}.cu").write_text(u.source)
        cmd = _make_cmd(stage, arch, tc, jobs)
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            for line in proc.stdout:  # the rule prints "cubin <name>" as each one lands
                if line.startswith("cubin ") and progress:
                    progress(1)
            proc.wait()
            err.seek(0)
            make_err = err.read()
        failed = []
        for u in units:
            cubin, report = stage / f"{u.name}.cubin", stage / f"{u.name}.ptxas"
            text = report.read_text(errors="replace") if report.exists() else ""
            if not cubin.is_file():
                failed.append((u, text.strip() or make_err.strip()))
                continue
            funcs = ptxas.parse_ptxas(text)
            u.record = cache.store(u.key, cubin, {
                "kernel": u.name, "nvcc": tc.version, "arch": arch, "flags": KEY_FLAGS,
                "functions": {f.name: f.to_dict() for f in funcs.values()}, "ptxas": text})
        if failed:
            u, msg = failed[0]
            lines = msg.splitlines()
            shown = "\n".join(lines[:30]) + ("\n  ..." if len(lines) > 30 else "")
            more = f" (and {len(failed) - 1} more kernel(s))" if len(failed) > 1 else ""
            raise UserError(f"nvcc failed on kernel {u.name}{more}:\n{shown}")
    finally:
        shutil.rmtree(stage, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The build

@dataclass
class BuildResult:
    manifest_path: Path
    manifest: dict
    layers: int                 # conv layers
    kernels: int                # distinct sparse kernels (one .cu each)
    cubins: int                 # cubins in the manifest (kernels + epilogue)
    cache_hits: int
    compiled: int
    sources_written: int
    plan_render_s: float        # planning + rendering, all batches, nvcc excluded
    compile_s: float
    total_s: float
    timings: dict = field(default_factory=dict)

    @property
    def ms_per_layer(self) -> float:
        return 1e3 * self.plan_render_s / max(self.layers, 1)

    def summary(self) -> str:
        return (f"{self.manifest['network']} on {self.manifest['gpu']} ({self.manifest['arch']}): "
                f"{self.layers} conv layers, {self.kernels} kernels + epilogue, {self.cubins} cubins, "
                f"{self.cache_hits} cache hits, {self.compiled} compiled in {self.compile_s:.2f} s; "
                f"plan+render {self.ms_per_layer:.2f} ms/layer (nvcc excluded; plan "
                f"{1e3 * self.timings.get('plan_s', 0):.0f} ms, render {1e3 * self.timings.get('render_s', 0):.0f} ms); "
                f"total {self.total_s:.2f} s\nmanifest: {self.manifest_path}")


def _gpu_name(gpu) -> str:
    name = getattr(gpu, "name", None)
    if not isinstance(name, str) or not name:
        raise RuntimeError(f"load_gpu gave {gpu!r} without a name (the manifest's folder)")
    return name


def check_runs_on(arch: str, capability: list[int], gpu, gpu_name: str) -> None:
    """A cubin for sm_XY runs on sm_XZ with Z >= Y only (sm_XYa: on exactly X.Y)."""
    own = getattr(gpu, "arch", None)
    m = _ARCH.match(own or "")
    if not m:
        return
    d = m.group(1)
    major, minor = int(d[:-1]), int(d[-1])
    ok = capability[0] == major and (capability[1] == minor if arch.endswith(("a", "f")) else capability[1] <= minor)
    if not ok:
        raise UserError(f"--arch {arch}: a cubin for {arch} does not run on {gpu_name} ({own}); "
                        f"leave --arch out or give {own}")


def shape_dict(shape) -> dict:
    d = asdict(shape)
    return {**d, "stride": list(d["stride"]), "padding": list(d["padding"]), "P": shape.P, "Q": shape.Q}


def build(net: Network, gpu, batches: list[int], levels: list[float], out: str | Path = "generated",
          jobs: int | None = None, force: bool = False, arch: str | None = None,
          stages: Stages | None = None, cache: CubinCache | None = None,
          progress_factory=None) -> BuildResult:
    """Build every cubin that `net` needs on `gpu` and write the manifest.

    progress_factory(length) -> context manager with .update(n): a progress bar over compilation
    (click.progressbar in the CLI); None for silence.
    """
    t_start = time.perf_counter()
    stages = stages or default_stages()
    cache = cache or CubinCache()
    arch = arch or getattr(gpu, "arch", None)
    gpu_name = _gpu_name(gpu)

    tc = toolchain(find_nvcc(), cache)
    capability = check_arch(arch, tc)
    check_runs_on(arch, capability, gpu, gpu_name)
    out_dir = Path(out) / net.name / gpu_name
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write to output directory {out_dir}: {e.strerror or e}") from None

    # plan + render (timed: the part of the build that is ours, nvcc excluded)
    t0 = time.perf_counter()
    plans = {b: stages.plan_network(net, gpu, b, levels) for b in batches}
    wanted: dict[str, tuple] = {}  # kernel name -> (shape, batch, config)
    for b, plan in plans.items():
        for lp in plan.layers:
            for choice in lp.choices.values():
                for config, _ in choice_candidates(choice):
                    wanted.setdefault(config.name(lp.layer.shape, b), (lp.layer.shape, b, config))
    t_plan = time.perf_counter() - t0
    emitted = {}
    for name, (shape, b, config) in wanted.items():
        k = stages.render_sparse(shape, b, config)
        if k.name != name:
            raise RuntimeError(f"render_sparse named kernel {k.name!r}, expected {name!r} (KernelConfig.name)")
        emitted[name] = k
    epi_name, epi_source = stages.render_epilogue()
    sel_name, sel_source = stages.render_selector() if stages.render_selector else (None, None)
    plan_render_s = time.perf_counter() - t0

    # sources: one .cu per kernel, written only when changed; stale ones removed
    units = {name: Unit(name, k.source) for name, k in emitted.items()}
    units[epi_name] = Unit(epi_name, epi_source)
    if sel_name:
        units[sel_name] = Unit(sel_name, sel_source)
    written = 0
    try:
        for u in units.values():
            written += write_if_changed(out_dir / f"{u.name}.cu", u.source)
        for stale in out_dir.glob("*.cu"):
            if stale.stem not in units:
                stale.unlink()
    except OSError as e:
        raise UserError(f"cannot write to output directory {out_dir}: {e.strerror or e}") from None

    # cache lookups, then compile the misses
    hits = 0
    for u in units.values():
        u.key = cache_key(u.source, tc.version_string, KEY_FLAGS, arch)
        if not force and (rec := cache.lookup(u.key)) is not None:
            u.record, hits = rec, hits + 1
    misses = [u for u in units.values() if u.record is None]
    t1 = time.perf_counter()
    jobs = jobs or os.cpu_count() or 1
    if misses and progress_factory is not None:
        with progress_factory(len(misses)) as bar:
            compile_units(misses, arch, tc, cache, jobs, bar.update)
    else:
        compile_units(misses, arch, tc, cache, jobs)
    compile_s = time.perf_counter() - t1

    # the register tile must stay in registers; launches must name functions the cubin has
    bad = []
    for u in units.values():
        funcs = {n: ptxas.FunctionResources.from_dict(d) for n, d in u.record["functions"].items()}
        if probs := ptxas.problems(funcs):
            bad.append(f"{u.name} ({'; '.join(probs)})")
    if bad:
        raise UserError(f"kernel {bad[0]} has a stack frame or spills: its register tile does not stay in "
                        f"registers" + (f"; also {len(bad) - 1} more: " + ", ".join(b.split(' ')[0] for b in bad[1:])
                                        if len(bad) > 1 else ""))
    for name, k in emitted.items():
        entries = {n for n, d in units[name].record["functions"].items() if d["entry"]}
        for step in k.steps:
            if step.get("op") == "launch" and step["function"] not in entries:
                raise RuntimeError(f"kernel {name}: a step launches {step['function']!r} but the cubin has "
                                   f"{sorted(entries)}")
    if EPILOGUE_FUNCTION not in units[epi_name].record["functions"]:
        raise RuntimeError(f"the epilogue source {epi_name} does not define {EPILOGUE_FUNCTION}")

    manifest = _manifest(net, gpu_name, arch, capability, tc, batches, levels, plans, wanted, emitted,
                         units, epi_name, stages, out_dir / "manifest.json", sel_name)
    manifest_path = out_dir / "manifest.json"
    try:
        write_if_changed(manifest_path, json.dumps(manifest, indent=1) + "\n")
    except OSError as e:
        raise UserError(f"cannot write {manifest_path}: {e.strerror or e}") from None
    return BuildResult(manifest_path, manifest, len(net.convs), len(emitted), len(units), hits, len(misses),
                       written, plan_render_s, compile_s, time.perf_counter() - t_start,
                       {"plan_s": t_plan, "render_s": plan_render_s - t_plan})


def _resources(record: dict) -> dict:
    funcs = {n: ptxas.FunctionResources.from_dict(d) for n, d in record["functions"].items()}
    return ptxas.summarize(funcs)


def _manifest(net, gpu_name, arch, capability, tc, batches, levels, plans, wanted, emitted, units,
              epi_name, stages, old_path: Path, sel_name: str | None = None) -> dict:
    try:
        old = json.loads(old_path.read_text())
    except (FileNotFoundError, ValueError):
        old = {}
    old_kernels = old.get("kernels", {}) if isinstance(old, dict) else {}
    old_layers = {(lay.get("index"), lay.get("name")): lay for lay in old.get("layers", [])} if old_kernels else {}

    kernels = {}
    for name, k in emitted.items():
        shape, b, config = wanted[name]
        regs, smem = stages.estimate_resources(shape, config)
        kernels[name] = {"cubin": units[name].record["cubin"], "shape": shape_dict(shape), "batch": b,
                         "config": config.to_dict(), "steps": k.steps, "workspace": k.workspace,
                         "weight_layout": k.weight_layout, **_resources(units[name].record),
                         "estimate": {"registers": int(regs), "smem": int(smem)}}

    def same_kernel(old_name, new_name):
        """Same name and same cubin (content-addressed): measurements of it still hold."""
        o = old_kernels.get(old_name)
        return o is not None and old_name == new_name and o.get("cubin") == kernels[new_name]["cubin"]

    layers = []
    first = plans[batches[0]]
    for i, lp in enumerate(first.layers):
        layer = lp.layer
        prev = old_layers.get((layer.index, layer.name), {}).get("batches", {})
        per_batch = {}
        for b in batches:
            choices = plans[b].layers[i].choices
            assert plans[b].layers[i].layer.index == layer.index  # plans list the same layers per batch
            pb = prev.get(str(b), {})
            lv = {}
            for level in sorted(choices):
                cands = [(c.name(layer.shape, b), t) for c, t in choice_candidates(choices[level])]
                key = f"{level:.2f}"
                po = pb.get("levels", {}).get(key, {})
                # a kernel `calibrate` chose among the candidates stays chosen while it is still one of them
                kname, t = next(((n, t) for n, t in cands if n == po.get("kernel") and same_kernel(n, n)), cands[0])
                lv[key] = {"kernel": kname, "predicted_us": round(float(t), 3),
                           "measured_us": po.get("measured_us") if same_kernel(po.get("kernel"), kname) else None}
                if len(cands) > 1:  # the model's order; `snn-run calibrate` adds each one's measured_us
                    lv[key]["candidates"] = [{"kernel": n, "predicted_us": round(float(t), 3)} for n, t in cands]
            unchanged = pb and pb.get("levels", {}).keys() == lv.keys() and all(
                same_kernel(pb["levels"][key].get("kernel"), e["kernel"]) for key, e in lv.items())
            per_batch[str(b)] = {
                "threshold": pb.get("threshold", DEFAULT_THRESHOLD) if unchanged else DEFAULT_THRESHOLD,
                "threshold_source": pb.get("threshold_source", "default") if unchanged else "default",
                "levels": lv}
        layers.append({"index": layer.index, "name": layer.name, "shape": shape_dict(layer.shape),
                       "batches": per_batch})

    epi = units[epi_name].record
    extra = {}
    kw = getattr(stages.plan_network, "keywords", None) or {}
    if kw.get("model"):  # which stage-3 model planned these kernels (snn-codegen build --model)
        extra["model"] = kw["model"]
    if kw.get("candidates", 1) > 1:  # configs per level for calibrate to choose from (--candidates)
        extra["candidates"] = kw["candidates"]
    if sel_name:  # one-thread kernel: reads a layer's zero counter, sets its conditional node (runtime/graph.py)
        extra["selector"] = {"cubin": units[sel_name].record["cubin"], "function": sel_name,
                             **_resources(units[sel_name].record)}
    return {"network": net.name, "gpu": gpu_name, "arch": arch, "compute_capability": capability,
            "batches": list(batches), "levels": [round(lv, 2) for lv in levels], "nvcc": tc.version,
            "epilogue": {"cubin": epi["cubin"], "function": EPILOGUE_FUNCTION, **_resources(epi)},
            **extra, "kernels": kernels, "layers": layers}
