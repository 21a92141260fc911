"""`snn-codegen build`: plan -> render -> compile -> bundle.

    plan      the planner per batch: layer -> level -> KernelConfig (+ predicted us), and with
              --candidates K up to K - 1 alternatives per level for `snn-run calibrate` to measure
    render    emit.render_sparse once per distinct (shape, batch, config) -- the kernel's name --
              shared across layers and levels; the epilogue and the selector once; at batch <= 8 the dense
              FP32 kernels (codegen/dense.py) each layer is offered as more candidates of every level
    compile   codegen/compile.py: cache misses only, nvcc in parallel through the Makefile
    check     any stack frame or spill fails the build, naming the kernel (the register tile must
              stay in registers)
    bundle    <out>/<network>/<gpu>/: manifest.json, cubins/, src/, spec.yaml (codegen/bundle.py)

A bf16 / fp16 build (--precision) plans no sparse kernels: every conv of the 16-bit engine runs dense on the
tensor cores with its bias, residual and ReLU fused into one launch. It compiles the epilogue in that precision
(what a conv launch does not fuse: DenseNet's pre-activation batchnorm + ReLU) and, per conv and batch up to 4,
the tensor-core kernels the engine measures against cuDNN at load (codegen/tensorcore.py); the bundle is the spec,
those cubins and a manifest that records the precision and every conv as dense.

Nothing here imports torch or needs a GPU, and nothing here reads what `snn-run calibrate` writes.
The planning and rendering stages are reached through `Stages` (see `default_stages`, the one place
that imports the planner and the emitter), so tests and other front ends can inject their own.
"""
from __future__ import annotations

import dataclasses

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import bundle, tensorcore
from .cache import CubinCache
from .compile import ARCH_RE, Compiler, check_arch, problems, resources
from .dense import DenseConfig
from .direct import DirectConfig
from .emit import (EPILOGUE16_VECTOR, EPILOGUE_IN_LD, EPILOGUE_ZERO_RANGE, MAXPOOL_EPILOGUE, MAXPOOL_THREADS,
                   MAXPOOL_VECTOR, PDL,
                   avgpool_function, epilogue_function, maxpool_function)
from .errors import UserError
from .spec import Network

DEFAULT_LEVELS = "0.4:0.9:0.05"
DEFAULT_THRESHOLD = 0.5


# ---------------------------------------------------------------------------------------------
# The stages this module drives, and the one place that imports them

@dataclass
class Stages:
    plan_network: Callable[..., Any]        # (net, gpu, batch, levels) -> Plan
    render_sparse: Callable[..., Any]       # (shape, batch, config) -> EmittedKernel
    render_epilogue: Callable[..., tuple[str, str]]   # (precision="fp32") -> (name, source)
    estimate_resources: Callable[..., tuple[int, int]]  # (shape, config) -> (regs, smem)
    load_gpu: Callable[[str], Any] | None = None
    render_selector: Callable[[], tuple[str, str]] | None = None  # device-side dispatch (runtime/graph.py)
    render_maxpool: Callable[..., tuple[str, str]] | None = None   # (precision="fp32") -> (name, source)
    dense: Any = None   # the dense FP32 kernel's module (codegen/dense.py): candidates, render; None: none offered
    pair: Any = None    # two 1x1 convs in one launch (codegen/pair.py): candidates, render; None: none offered
    direct: Any = None  # the image's conv (codegen/direct.py): eligible, emitted; None: cuDNN runs it


def default_stages(model: str = "snn", candidates: int = 1) -> Stages:
    """The real planner (stage-3 `model`, plan.MODELS; `candidates` configs per level, the model's
    pick first) and emitter (docs/interfaces.md, sections plan and source)."""
    from functools import partial

    from . import dense, direct, pair
    from .emit import render_epilogue, render_maxpool, render_selector, render_sparse
    from .gpu import load_gpu
    from .plan import estimate_resources, plan_network
    kw = {"model": model} | ({"candidates": candidates} if candidates != 1 else {})
    return Stages(partial(plan_network, **kw), render_sparse, render_epilogue, estimate_resources, load_gpu,
                  render_selector, render_maxpool, dense, pair, direct)


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
    from .plan import parse_levels as parse
    return sorted(set(parse(text)))


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
    up_to_date: bool = False    # the bundle was built from the same inputs: nothing planned, rendered or written
    left_out: int = 0           # tensor-core (16-bit) or dense (FP32) kernels left out because ptxas spilled them

    @property
    def ms_per_layer(self) -> float:
        return 1e3 * self.plan_render_s / max(self.layers, 1)

    def summary(self) -> str:
        precision = bundle.precision(self.manifest)
        if precision != bundle.DEFAULT_PRECISION:
            what = (f"{precision}, {self.layers} conv layers, every one dense on the tensor cores ({self.kernels} "
                    f"tensor-core kernels + the epilogue{' and the max pool' if 'maxpool' in self.manifest else ''}, "
                    f"{self.compiled} compiled"
                    + (f"; {self.left_out} more left out: they spill" if self.left_out else "") + ")")
            return (f"{self.manifest['network']} on {self.manifest['gpu']} ({self.manifest['arch']}): "
                    + (f"up to date ({what}, built from the same inputs)" if self.up_to_date else what)
                    + f"; total {self.total_s:.2f} s\nbundle: {self.manifest_path.parent}")
        if self.up_to_date:
            return (f"{self.manifest['network']} on {self.manifest['gpu']} ({self.manifest['arch']}): up to date "
                    f"({self.kernels} kernels + epilogue, {self.cubins} cubins, built from the same inputs); "
                    f"total {self.total_s:.2f} s\nbundle: {self.manifest_path.parent}")
        return (f"{self.manifest['network']} on {self.manifest['gpu']} ({self.manifest['arch']}): "
                f"{self.layers} conv layers, {self.kernels} kernels + epilogue, {self.cubins} cubins, "
                + (f"{self.left_out} dense kernels left out (they spill), " if self.left_out else "")
                + f"{self.cache_hits} cache hits, {self.compiled} compiled in {self.compile_s:.2f} s; "
                f"plan+render {self.ms_per_layer:.2f} ms/layer (nvcc excluded; plan "
                f"{1e3 * self.timings.get('plan_s', 0):.0f} ms, render {1e3 * self.timings.get('render_s', 0):.0f} ms); "
                f"total {self.total_s:.2f} s\nbundle: {self.manifest_path.parent}")


def _gpu_name(gpu) -> str:
    name = getattr(gpu, "name", None)
    if not isinstance(name, str) or not name:
        raise RuntimeError(f"load_gpu gave {gpu!r} without a name (the manifest's folder)")
    return name


def check_runs_on(arch: str, capability: list[int], gpu, gpu_name: str) -> None:
    """A cubin for sm_XY runs on sm_XZ with Z >= Y only (sm_XYa: on exactly X.Y)."""
    own = getattr(gpu, "arch", None)
    m = ARCH_RE.match(own or "")
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
          progress_factory=None, spec_text: str | None = None, inputs: str | None = None,
          precision: str = bundle.DEFAULT_PRECISION) -> BuildResult:
    """Build every cubin that `net` needs on `gpu` into the bundle <out>/<network>/<gpu>/.

    progress_factory(length) -> context manager with .update(n): a progress bar over compilation
    (click.progressbar in the CLI); None for silence. spec_text: the spec to ship in the bundle
    (default: the file the network was read from). inputs: a digest of everything the stages' output
    depends on (build_spec's); a bundle recorded with the same digest, nvcc and arch, and intact, is
    returned as it is (force rebuilds). precision: 'fp32' (the sparse kernels), or 'bf16' / 'fp16' (every conv
    dense on cuDNN's tensor cores: only the epilogue kernel in that precision).
    """
    t_start = time.perf_counter()
    if precision not in bundle.PRECISIONS:
        raise UserError(f"--precision: expected one of {', '.join(bundle.PRECISIONS)}, got {precision!r}")
    dense = precision != bundle.DEFAULT_PRECISION
    stages = stages or default_stages()
    compiler = Compiler(cache, jobs)
    arch = arch or getattr(gpu, "arch", None)
    gpu_name = _gpu_name(gpu)

    tc = compiler.toolchain
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
    if spec_text is None:
        try:
            spec_text = Path(net.path).read_text()
        except (OSError, TypeError):
            spec_text = None  # a network parsed from text: the bundle then needs the spec beside it
    if inputs is not None:
        inputs = hashlib.sha256(f"{inputs}|{tc.version_string}|{arch}".encode()).hexdigest()
        if not force and (same := _unchanged(out_dir, inputs)) is not None:
            return BuildResult(out_dir / bundle.MANIFEST, same, len(net.convs), len(same["kernels"]),
                               len(bundle.cubin_entries(same)), len(bundle.cubin_entries(same)), 0, 0, 0.0, 0.0,
                               time.perf_counter() - t_start, up_to_date=True)
    if dense:
        return _build_16bit(net, gpu_name, arch, capability, tc, batches, precision, out_dir, spec_text, inputs,
                            stages, compiler, force, t_start)

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
    dense_per_layer = _dense_candidates(stages, gpu, plans, wanted, emitted)
    pairs = _pair_candidates(stages, gpu, net, plans, wanted, emitted)
    direct = _direct_kernels(stages, net, plans, wanted, emitted)
    epi_name, epi_source = stages.render_epilogue()
    sel_name, sel_source = stages.render_selector() if stages.render_selector else (None, None)
    pool_name, pool_source = _maxpool_source(net, stages, bundle.DEFAULT_PRECISION)
    plan_render_s = time.perf_counter() - t0

    sources = {name: k.source for name, k in emitted.items()}
    sources[epi_name] = epi_source
    if sel_name:
        sources[sel_name] = sel_source
    if pool_name:
        sources[pool_name] = pool_source
    try:
        written = bundle.write_sources(out_dir, sources)
    except OSError as e:
        raise UserError(f"cannot write to output directory {out_dir}: {e.strerror or e}") from None

    compiled = compiler.compile(sources, arch, force, progress_factory)
    records = compiled.records

    # a dense or pair kernel is one more candidate for calibrate to measure, a direct one stands in for cuDNN: one
    # that spills is left out, not fatal
    optional = dense_per_layer["names"] | pairs["names"] | {k for per in direct.values() for k in per.values()}
    spilled = {n for n in emitted if n in optional and problems(records[n])}
    for n in spilled:
        del emitted[n], wanted[n], records[n]
    direct = {conv: kept for conv, per in direct.items() if (kept := {b: k for b, k in per.items() if k in emitted})}
    # the register tile must stay in registers; launches must name functions the cubin has
    _refuse_spills(records, ": its register tile does not stay in registers")
    for name, k in emitted.items():
        entries = {n for n, d in records[name]["functions"].items() if d["entry"]}
        for step in k.steps:
            if step.get("op") == "launch" and step["function"] not in entries:
                raise RuntimeError(f"kernel {name}: a step launches {step['function']!r} but the cubin has "
                                   f"{sorted(entries)}")
    _check_defines(records, epi_name, epilogue_function(), "epilogue")
    _check_defines(records, pool_name, maxpool_function(), "max-pool")
    _check_defines(records, pool_name, avgpool_function(), "average-pool")

    try:
        placed = bundle.write_cubins(out_dir, records)
        spec_file = bundle.write_spec(out_dir, spec_text)
        manifest = _manifest(net, gpu_name, arch, capability, tc, batches, levels, plans, wanted, emitted,
                             records, placed, epi_name, stages, spec_file, sel_name, pool_name,
                             {k: [c for c in v if c[0] in emitted] for k, v in dense_per_layer["layers"].items()},
                             {k: {**v, "kernels": [n for n in v["kernels"] if n in emitted]}
                              for k, v in pairs["layers"].items()}, direct)
        if inputs is not None:
            manifest["inputs"] = inputs
        manifest_path = bundle.write_manifest(out_dir, manifest)  # last: the bundle's commit mark
    except OSError as e:
        raise UserError(f"cannot write the bundle {out_dir}: {e.strerror or e}") from None
    return BuildResult(manifest_path, manifest, len(net.convs), len(emitted), len(records), compiled.hits,
                       compiled.compiled, written, plan_render_s, compiled.seconds, time.perf_counter() - t_start,
                       {"plan_s": t_plan, "render_s": plan_render_s - t_plan}, left_out=len(spilled))


def _dense_candidates(stages, gpu, plans, wanted, emitted) -> dict:
    """The dense kernels (codegen/dense.py) each planned layer and small batch is offered beside its sparse picks,
    rendered into `wanted` / `emitted`: {"names": {kernel}, "layers": {(layer index, batch): [(kernel, us)]}}. A
    layer that reads a pre-activation gets the kernel that applies it while staging (DenseConfig.in_bn), one whose
    output only a concat reads the kernel that stores into the concat's buffer (DenseConfig.out_ld), as its sparse
    kernels do."""
    out = {"names": set(), "layers": {}}
    dense = stages.dense
    if dense is None:
        return out
    sms, clusters = getattr(gpu, "sms", 132), bool(getattr(gpu, "has_clusters", False))
    mma_tiles = dense.MMA_TILES if getattr(gpu, "tf32x3", False) else ()   # `--tf32x3`: the 3xTF32 tiles too
    for b, plan in plans.items():
        for lp in plan.layers:
            layer, shape = lp.layer, lp.layer.shape
            if layer.groups != 1:
                continue
            for cfg in dense.candidates(shape, b, sms, clusters, in_bn=bool(layer.bn_input),
                                        out_ld=bool(layer.into_concat), mma_tiles=mma_tiles):
                name = cfg.name(shape, b)
                if name not in emitted:
                    emitted[name] = dense.emitted(shape, b, cfg)
                    wanted[name] = (shape, b, cfg)
                    out["names"].add(name)
                out["layers"].setdefault((layer.index, b), []).append(
                    (name, dense.predict_us(shape, b, cfg, sms, getattr(gpu, "boost_clock_mhz", 1755) / 1e3)))
    return out


def _planned_layers(plans) -> set[int]:
    """The indices of the layers some batch's plan holds (the sparse-eligible convs)."""
    return {lp.layer.index for plan in plans.values() for lp in plan.layers}


def _direct_kernels(stages, net, plans, wanted, emitted) -> dict:
    """The direct kernel (codegen/direct.py) of each conv that no plan holds (it never runs sparse: the image's) and
    that the kernel takes, per batch, rendered into `wanted` / `emitted`: {conv name: {batch: kernel}}."""
    out: dict[str, dict[str, str]] = {}
    direct = stages.direct
    if direct is None:
        return out
    planned = _planned_layers(plans)
    for conv in net.convs:
        if conv.index in planned or not direct.eligible(conv.shape, conv.groups):
            continue
        cfg = dataclasses.replace(direct.CONFIG, nchw=conv.input_op == "input")   # the image: as the caller holds it
        for b in plans:
            k = direct.emitted(conv.shape, b, cfg)
            emitted.setdefault(k.name, k)
            wanted.setdefault(k.name, (conv.shape, b, cfg))
            out.setdefault(conv.name, {})[str(b)] = k.name
    return out


def _build_16bit(net, gpu_name, arch, capability, tc, batches, precision, out_dir, spec_text, inputs, stages,
                 compiler, force, t_start) -> BuildResult:
    """A 16-bit bundle: the spec, the epilogue (and max-pool) kernel in that precision, and per conv layer and
    small batch the tensor-core kernels (codegen/tensorcore.py) that the runtime measures against cuDNN's fused
    call at load, every conv recorded as dense (the 16-bit sparse kernels lost to cuDNN's tensor cores on every
    shape measured)."""
    t0 = time.perf_counter()
    epi_name, epi_source = stages.render_epilogue(precision)
    sources = {epi_name: epi_source}
    pool_name, pool_source = _maxpool_source(net, stages, precision)
    if pool_name:
        sources[pool_name] = pool_source
    wanted: dict[str, tuple] = {}  # kernel name -> (shape, batch, config)
    per_layer: dict[str, dict[str, list[str]]] = {}
    for c in net.convs:
        if not tensorcore.eligible(c.shape, c.groups):
            continue
        for b in batches:
            if b > tensorcore.MAX_BATCH:
                continue
            names = []
            for cfg in tensorcore.candidates(c.shape, b):
                fn = tensorcore.name(c.shape, b, cfg, precision)
                if fn not in wanted:
                    wanted[fn] = (c.shape, b, cfg)
                    sources[fn] = tensorcore.render(c.shape, b, cfg, precision)[1]
                names.append(fn)
            per_layer.setdefault(c.name, {})[str(b)] = names
    render_s = time.perf_counter() - t0
    try:
        # an fp32 build's sources and cubins in this folder go, as a rebuild drops stale ones: the manifest names none
        written = bundle.write_sources(out_dir, sources)
    except OSError as e:
        raise UserError(f"cannot write to output directory {out_dir}: {e.strerror or e}") from None
    compiled = compiler.compile(sources, arch, force)
    records = compiled.records
    _refuse_spills({n: records[n] for n in (epi_name, pool_name) if n})
    _check_defines(records, epi_name, epilogue_function(precision), "epilogue")
    _check_defines(records, pool_name, maxpool_function(precision), "max-pool")
    _check_defines(records, pool_name, avgpool_function(precision), "average-pool")
    # a tensor-core kernel is one option the runtime measures beside cuDNN: one that spills is left out, not fatal
    spilled = {fn for fn in wanted if problems(records[fn])}
    if spilled:
        wanted = {fn: v for fn, v in wanted.items() if fn not in spilled}
        records = {fn: r for fn, r in records.items() if fn not in spilled}
        per_layer = {layer: {b: [fn for fn in names if fn not in spilled] for b, names in per_batch.items()}
                     for layer, per_batch in per_layer.items()}
    try:
        placed = bundle.write_cubins(out_dir, records)
        spec_file = bundle.write_spec(out_dir, spec_text)
        kernels = {fn: {**placed[fn], "function": fn, "tensorcore": cfg.tag(),
                        "steps": [{"op": "launch", "function": fn, "grid": tensorcore.grid(shape, b, cfg),
                                   "block": [tensorcore.THREADS], "smem": tensorcore.smem_bytes(cfg),
                                   "args": tensorcore.ARGS, "pdl": PDL}],
                        **resources(records[fn])}
                   for fn, (shape, b, cfg) in wanted.items()}
        manifest = {"format": bundle.FORMAT, "precision": precision, "network": net.name, "gpu": gpu_name,
                    "arch": arch, "compute_capability": capability, "batches": list(batches), "levels": [],
                    "nvcc": tc.version, "spec": spec_file, "dense_reason": bundle.DENSE_16BIT,
                    "epilogue": {**_epilogue_entry(placed[epi_name], records[epi_name], precision),
                                 "vector": EPILOGUE16_VECTOR},
                    **({"maxpool": _maxpool_entry(placed[pool_name], records[pool_name], precision)}
                       if pool_name else {}),
                    "kernels": kernels,
                    "layers": [{"index": c.index, "name": c.name, "shape": shape_dict(c.shape), "path": "dense",
                                **({"batches": {b: {"levels": {}, "tensorcore": names}
                                                for b, names in per_layer[c.name].items()}}
                                   if c.name in per_layer else {})}
                               for c in net.convs]}
        if inputs is not None:
            manifest["inputs"] = inputs
        manifest_path = bundle.write_manifest(out_dir, manifest)  # last: the bundle's commit mark
    except OSError as e:
        raise UserError(f"cannot write the bundle {out_dir}: {e.strerror or e}") from None
    return BuildResult(manifest_path, manifest, len(net.convs), len(wanted), len(records), compiled.hits,
                       compiled.compiled, written, render_s, compiled.seconds, time.perf_counter() - t_start,
                       left_out=len(spilled))


def _refuse_spills(records: dict, why: str = "") -> None:
    """UserError naming the first kernel with a stack frame or spills (and how many more)."""
    bad = [f"{name} ({'; '.join(probs)})" for name, rec in records.items() if (probs := problems(rec))]
    if bad:
        raise UserError(f"kernel {bad[0]} has a stack frame or spills{why}"
                        + (f"; also {len(bad) - 1} more: " + ", ".join(b.split(' ')[0] for b in bad[1:])
                           if len(bad) > 1 else ""))


def _check_defines(records: dict, source: str | None, fn: str | None, what: str) -> None:
    """The bundle's one-a-bundle kernels (epilogue, pools): the cubin of `source` defines the function launched."""
    if source and fn and fn not in records[source]["functions"]:
        raise RuntimeError(f"the {what} source {source} does not define {fn}")


def _maxpool_source(net, stages, precision: str) -> tuple[str | None, str | None]:
    """The bundle's pool kernels where the network has a max- or average-pool layer (and the stages render them)."""
    if stages.render_maxpool is None or not any(n.op in ("maxpool", "avgpool") for n in net.nodes):
        return None, None
    return stages.render_maxpool(precision)


def _maxpool_entry(placed: dict, record: dict, precision: str) -> dict:
    """The manifest's "maxpool": its cubin, function, block, the channels a thread takes, whether it takes its
    producer's epilogue (shift, relu, zeros), the average pool's function in the same cubin (where there is one),
    launch marks, resources."""
    avg = avgpool_function(precision)
    return {**placed, "function": maxpool_function(precision), **({"avg_function": avg} if avg else {}),
            "block": [MAXPOOL_THREADS],
            "vector": MAXPOOL_VECTOR[precision], "epilogue": MAXPOOL_EPILOGUE[precision], "pdl": PDL,
            **resources(record)}


def _epilogue_entry(placed: dict, record: dict, precision: str) -> dict:
    """The manifest's "epilogue": its cubin, function, launch marks and resources."""
    return {**placed, "function": epilogue_function(precision), "pdl": PDL, "zero_range": EPILOGUE_ZERO_RANGE,
            "in_ld": EPILOGUE_IN_LD, **resources(record)}


def _unchanged(out_dir: Path, inputs: str) -> dict | None:
    """The bundle's manifest if it was built from these inputs and every cubin it names is intact."""
    try:
        manifest = json.loads((out_dir / bundle.MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("inputs") != inputs or manifest.get("format") != bundle.FORMAT:
        return None
    return manifest if not bundle.verify(out_dir, manifest) else None


def code_digest() -> str:
    """What the planner and the emitter are: every source file of snn.codegen, its templates and GPU tables."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.suffix in (".py", ".j2", ".yaml") and "__pycache__" not in p.parts:
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _pair_candidates(stages, gpu, net, plans, wanted, emitted) -> dict:
    """The pair kernels (codegen/pair.py) for each of the network's conv pairs (spec.Network.conv_pairs) whose
    shapes allow one, at the planned batches up to pair.MAX_BATCH, rendered into `wanted` / `emitted` (keyed by
    both shapes): {"names": {kernel}, "layers": {(first layer index, batch): {"with": second, "kernels": [...]}}}."""
    out = {"names": set(), "layers": {}}
    pair = stages.pair
    if pair is None:
        return out
    clusters = bool(getattr(gpu, "has_clusters", False))
    planned = _planned_layers(plans)
    for a, b2 in net.conv_pairs:
        if a.index not in planned or b2.index not in planned:
            continue
        for b in plans:
            names = []
            for cfg in pair.candidates(a.shape, b2.shape, b, clusters):
                name = cfg.name(a.shape, b2.shape, b)
                if name not in emitted:
                    emitted[name] = pair.emitted(a.shape, b2.shape, b, cfg)
                    wanted[name] = ((a.shape, b2.shape), b, cfg)
                    out["names"].add(name)
                names.append(name)
            if names:
                out["layers"][(a.index, b)] = {"with": b2.name, "kernels": names}
    return out


def _manifest(net, gpu_name, arch, capability, tc, batches, levels, plans, wanted, emitted, records, placed,
              epi_name, stages, spec_file, sel_name: str | None = None, pool_name: str | None = None,
              dense: dict | None = None, pairs: dict | None = None, direct: dict | None = None) -> dict:
    """dense: {(layer index, batch): [(kernel, predicted us)]}, the dense kernels offered beside each level's picks;
    pairs: {(layer index, batch): {"with": the next conv, "kernels": [...]}}, the pair kernels (codegen/pair.py) a
    layer and the conv after it may run as, recorded in the first layer's batch entry as "pair"; direct: {conv name:
    {batch: kernel}}, the direct kernels (codegen/direct.py) of the convs that always run dense, as "direct"."""
    kernels = {}
    dense = dense or {}
    pairs = pairs or {}
    for name, k in emitted.items():
        shape, b, config = wanted[name]
        second = None
        if isinstance(shape, tuple):   # a pair kernel's (first, second) shapes
            shape, second = shape
            regs, smem = 0, stages.pair.smem_bytes(shape, second, config)
        elif isinstance(config, DenseConfig):
            regs, smem = 0, stages.dense.smem_bytes(config, shape)
        elif isinstance(config, DirectConfig):
            regs, smem = 0, stages.direct.smem_bytes(shape, config)
        else:
            regs, smem = stages.estimate_resources(shape, config)
        kernels[name] = {**placed[name], "shape": shape_dict(shape), **({"second": shape_dict(second)} if second else {}),
                         "batch": b,
                         "config": config.to_dict(), "steps": k.steps, "workspace": k.workspace,
                         "weight_layout": k.weight_layout, "epilogue": k.epilogue, **resources(records[name]),
                         **({"input_layout": k.input_layout} if k.input_layout != "NHWC" else {}),
                         "estimate": {"registers": int(regs), "smem": int(smem)}}

    layers = []
    first = plans[batches[0]]
    for i, lp in enumerate(first.layers):
        layer = lp.layer
        per_batch = {}
        for b in batches:
            choices = plans[b].layers[i].choices
            assert plans[b].layers[i].layer.index == layer.index  # plans list the same layers per batch
            lv = {}
            for level in sorted(choices):
                cands = [(c.name(layer.shape, b), t) for c, t in choice_candidates(choices[level])]
                cands += dense.get((layer.index, b), [])
                key = f"{level:.2f}"
                lv[key] = {"kernel": cands[0][0], "predicted_us": round(float(cands[0][1]), 3)}
                if len(cands) > 1:  # the model's order; `snn-run calibrate` measures them all
                    lv[key]["candidates"] = [{"kernel": n, "predicted_us": round(float(t), 3)} for n, t in cands]
            per_batch[str(b)] = {"threshold": DEFAULT_THRESHOLD, "threshold_source": "default", "levels": lv}
            if pairs.get((layer.index, b), {}).get("kernels"):
                per_batch[str(b)]["pair"] = pairs[(layer.index, b)]
        layers.append({"index": layer.index, "name": layer.name, "shape": shape_dict(layer.shape),
                       "batches": per_batch})

    extra = {}
    kw = getattr(stages.plan_network, "keywords", None) or {}
    if kw.get("model"):  # which stage-3 model planned these kernels (snn-codegen build --model)
        extra["model"] = kw["model"]
    if kw.get("candidates", 1) > 1:  # configs per level for calibrate to choose from (--candidates)
        extra["candidates"] = kw["candidates"]
    if sel_name:  # one-thread kernel: reads a layer's zero counter, sets its conditional node (runtime/graph.py)
        extra["selector"] = {**placed[sel_name], "function": sel_name, "pdl": PDL, **resources(records[sel_name])}
    if pool_name:
        extra["maxpool"] = _maxpool_entry(placed[pool_name], records[pool_name], bundle.DEFAULT_PRECISION)
    if direct:
        extra["direct"] = direct
    return {"format": bundle.FORMAT, "precision": bundle.DEFAULT_PRECISION, "network": net.name, "gpu": gpu_name,
            "arch": arch, "compute_capability": capability, "batches": list(batches),
            "levels": [round(lv, 2) for lv in levels],
            "nvcc": tc.version, "spec": spec_file,
            "epilogue": _epilogue_entry(placed[epi_name], records[epi_name], bundle.DEFAULT_PRECISION),
            **extra, "kernels": kernels, "layers": layers}


def build_spec(spec: str | Path, gpu: str = "h100", batch: int | str | list[int] = 1,
               levels: str | list[float] = DEFAULT_LEVELS, out: str | Path = "generated", *, jobs: int | None = None,
               rebuild: bool = False, arch: str | None = None, model: str = "snn", candidates: int = 1,
               clusters: bool = False, tf32x3: bool = False, progress_factory=None,
               precision: str = bundle.DEFAULT_PRECISION) -> BuildResult:
    """`snn.build` and `snn-codegen build`: a spec file and option values to a bundle in <out>/<network>/<gpu>/."""
    from .spec import load_spec
    batches = parse_batches(",".join(map(str, batch)) if isinstance(batch, (list, tuple)) else str(batch))
    lvls = sorted(set(levels)) if isinstance(levels, (list, tuple)) else parse_levels(levels)
    if precision not in bundle.PRECISIONS:
        raise UserError(f"--precision: expected one of {', '.join(bundle.PRECISIONS)}, got {precision!r}")
    if precision != bundle.DEFAULT_PRECISION:  # options that shape sparse kernels, which a 16-bit bundle has none of
        for opt, given in (("--candidates", candidates != 1), ("--clusters", clusters), ("--tf32x3", tf32x3)):
            if given:
                raise UserError(f"{opt}: a {precision} bundle has no sparse kernels (every conv runs dense on "
                                f"cuDNN's tensor cores); leave {opt} out or build with --precision fp32")
    net = load_spec(spec)
    stages = default_stages(model, candidates)
    try:
        target = stages.load_gpu(gpu)
    except (KeyError, ValueError, FileNotFoundError) as e:  # unless load_gpu raises UserError itself
        raise UserError(f"--gpu {gpu}: {e}") from None
    if clusters:  # channel splits summed in thread-block clusters (docs/kernels.md): an opt-in, sm_90+
        if not target.has_clusters:
            raise UserError(f"--clusters: {target.name} ({target.arch}) has no thread-block clusters (sm_90 and later)")
        target = dataclasses.replace(target, clusters=True)
    if tf32x3:  # the dense kernel's 3xTF32 tiles (codegen/dense.py): mma.sync on TF32, sm_80+
        if not target.has_tf32:
            raise UserError(f"--tf32x3: {target.name} ({target.arch}) has no TF32 tensor cores (sm_80 and later)")
        target = dataclasses.replace(target, tf32x3=True)
    # everything the plan and the sources depend on, so that a rebuild from the same inputs does nothing
    gpu_desc = target.to_dict() if hasattr(target, "to_dict") else repr(target)
    inputs = json.dumps({"spec": Path(net.path).read_text(), "gpu": gpu_desc, "batches": batches,
                         "levels": [round(x, 6) for x in lvls], "model": model, "candidates": candidates,
                         "precision": precision, "code": code_digest()}, sort_keys=True)
    return build(net, target, batches, lvls, out=out, jobs=jobs, force=rebuild, arch=arch, stages=stages,
                 progress_factory=progress_factory, inputs=inputs, precision=precision)
