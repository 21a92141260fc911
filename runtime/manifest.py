"""A bundle as the runtime sees it: find generated/<network>/<gpu>/manifest.json, check it fits this
spec, this GPU and this batch size (every cubin it uses inside the bundle and matching its checksum),
merge the tuning file in, and say exactly how to rebuild it when it does not fit.

No torch and no GPU here: the caller passes the device's name and compute capability. In memory, the
cubin paths are made absolute; the files on disk are only read.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from snn.codegen import bundle as bundle_format
from snn.codegen.spec import ConvShape, Network

from . import tuning
from .errors import RunError

MANIFEST = "manifest.json"
DEFAULT_CACHE = "generated"
_SHAPE_INTS = ("C", "N", "H", "W", "R", "S")


class CacheError(RunError):
    """Missing or stale kernel cache; the message ends with the command that fixes it."""


def build_command(spec_path: str, gpu: str, batch: int, precision: str | None = None) -> str:
    cmd = f"snn-codegen build {shlex.quote(str(spec_path))} --gpu {gpu} --batch {batch}"
    return cmd + (f" --precision {precision}" if precision else "")


def _rebuilt_as(precision: str) -> str | None:
    """The --precision a rebuild of a bundle built for `precision` names (none for the default)."""
    return None if precision == bundle_format.DEFAULT_PRECISION else precision


def guess_gpu_name(device_name: str) -> str:
    """The name `snn-codegen build --gpu` knows for this device, e.g. 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    flat = re.sub(r"[^a-z0-9]", "", device_name.lower())
    try:
        from snn.codegen.gpu import known_gpus  # written by the codegen side; may not exist yet
        names = sorted(known_gpus(), key=len, reverse=True)
    except Exception:
        names = []
    for n in names:
        if re.sub(r"[^a-z0-9]", "", n.lower()) in flat:
            return n
    m = re.search(r"\b([a-z]{1,2}\d{2,3}[a-z]?)\b", device_name.lower())
    return m.group(1) if m else "auto"


def shape_dict(shape: ConvShape) -> dict:
    return {**{k: getattr(shape, k) for k in _SHAPE_INTS}, "stride": list(shape.stride),
            "padding": list(shape.padding)}


def _shape_mismatch(recorded: dict, shape: ConvShape) -> str | None:
    """None if the manifest's shape dict agrees with the spec's (fields it lacks are not judged)."""
    want = shape_dict(shape)
    for k, v in want.items():
        if k not in recorded:
            continue
        got = recorded[k]
        got = list(got) if isinstance(got, (list, tuple)) else got
        if isinstance(v, list) and not isinstance(got, list):
            got = [got, got]
        if got != v:
            return f"{k}={got} in the cache, {v} in the spec"
    return None


@dataclass
class Cache:
    """A validated manifest for one batch bucket set."""
    path: Path
    data: dict
    spec_path: str
    gpu: str
    layers: dict[str, dict] = field(default_factory=dict)  # conv name -> manifest layer
    tuning_path: Path | None = None   # the tuning file merged in, if any
    tuning_rows: list = field(default_factory=list)  # per (layer, batch) that the tuning file calibrated

    @property
    def bundle(self) -> Path:
        return self.path.parent

    @property
    def precision(self) -> str:
        return bundle_format.precision(self.data)

    @property
    def batches(self) -> list[int]:
        return sorted(int(b) for b in self.data["batches"])

    def bucket(self, n: int, limit: int) -> int:
        """Smallest built batch size >= n (and <= limit): a short last batch is padded up to it."""
        fits = [b for b in self.batches if n <= b <= limit]
        if not fits:
            raise CacheError(f"{self.path}: no kernels for a batch of {n} (built for "
                             f"{', '.join(map(str, self.batches))}); rebuild with: "
                             f"{build_command(self.spec_path, self.gpu, limit, _rebuilt_as(self.precision))}")
        return fits[0]

    def layer_entry(self, conv_name: str, batch: int) -> dict | None:
        """The per-batch entry that dispatch.choose() reads, or None if the layer has no kernels."""
        layer = self.layers.get(conv_name)
        if layer is None:
            return None
        return layer.get("batches", {}).get(str(batch))

    def kernel(self, name: str) -> dict:
        return self.data["kernels"][name]

    @property
    def epilogue(self) -> dict:
        return self.data["epilogue"]

    def direct_kernel(self, conv_name: str, batch: int) -> str | None:
        """The direct kernel (codegen/direct.py) the build made for a conv that always runs dense, or None (cuDNN)."""
        return (self.data.get("direct") or {}).get(conv_name, {}).get(str(batch))

    @property
    def maxpool(self) -> dict | None:
        """The bundle's max-pool kernel (None: the network has no max pool, or an older build; torch pools)."""
        return self.data.get("maxpool")


def locate(cache_dir: str | Path, net: Network, spec_path: str, gpu: str, batch: int,
           device_name: str, compute_capability: tuple[int, int]) -> Path:
    """Path of the manifest to use; `gpu` may be 'auto' (pick the build matching this device)."""
    cache_dir = Path(cache_dir)
    if gpu != "auto":
        path = cache_dir / net.name / gpu / MANIFEST
        if not path.is_file():
            raise CacheError(f"no kernel cache for {net.name} on {gpu} ({path} not found); build it with: "
                             f"{build_command(spec_path, gpu, batch)}")
        return path
    guess = guess_gpu_name(device_name)
    candidates = []
    for p in sorted((cache_dir / net.name).glob(f"*/{MANIFEST}")):
        try:
            cc = tuple(json.loads(p.read_text()).get("compute_capability", ()))
        except (OSError, ValueError, AttributeError):
            cc = ()
        if cc == tuple(compute_capability):
            candidates.append(p)
    if not candidates:
        raise CacheError(f"no kernel cache for {net.name} built for this GPU ({device_name}, compute "
                         f"capability {compute_capability[0]}.{compute_capability[1]}) under "
                         f"{cache_dir / net.name}; build it with: {build_command(spec_path, guess, batch)}")
    if len(candidates) > 1:
        named = [p for p in candidates if p.parent.name == guess]
        if len(named) != 1:
            raise CacheError(f"several kernel caches fit this GPU ({', '.join(p.parent.name for p in candidates)}); "
                             f"choose one with --gpu")
        candidates = named
    return candidates[0]


def load(path: str | Path, net: Network, spec_path: str, batch: int,
         compute_capability: tuple[int, int], gpu: str | None = None,
         tuning_path: str | Path | None | bool = None, precision: str | None = None) -> Cache:
    """Read and validate a bundle's manifest; any mismatch is a CacheError naming the rebuild command.

    tuning_path: the tuning file to merge in (None: the bundle's tuning.json if there is one; False:
    none, the bundle as built). precision: the one the caller runs in (None: the bundle's); another
    than the bundle's is refused."""
    path = Path(path)
    gpu = gpu or path.parent.name
    built_for = bundle_format.DEFAULT_PRECISION  # until the manifest says: a rebuild keeps the bundle's precision

    def stale(msg: str) -> CacheError:
        return CacheError(f"{path}: {msg}; rebuild with: {build_command(spec_path, gpu, batch, _rebuilt_as(built_for))}")

    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CacheError(f"no kernel cache for {net.name} on {gpu} ({path} not found); build it with: "
                         f"{build_command(spec_path, gpu, batch)}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise stale(f"cannot read: {e}") from None
    except ValueError as e:
        raise stale(f"not valid JSON ({e}); the build was probably interrupted") from None
    if not isinstance(data, dict):
        raise stale("not a manifest (top level is not a JSON object)")
    if data.get("format") != bundle_format.FORMAT:
        raise stale(f"bundle format {data.get('format')!r}, this snn reads format {bundle_format.FORMAT}")
    built_for = bundle_format.precision(data)
    if built_for not in bundle_format.PRECISIONS:
        bad, built_for = built_for, bundle_format.DEFAULT_PRECISION  # the rebuild then names no --precision
        raise stale(f"field 'precision' is {bad!r}, not one of {', '.join(bundle_format.PRECISIONS)}")
    if precision is not None and precision != built_for:
        raise CacheError(f"{path}: built for {built_for}, the run asks for {precision}; rebuild with: "
                         f"{build_command(spec_path, gpu, batch, precision)}")
    sixteen = built_for != bundle_format.DEFAULT_PRECISION  # no conv kernels: every conv dense (cuDNN)
    for key, typ in (("network", str), ("compute_capability", list), ("batches", list),
                     ("epilogue", dict), ("kernels", dict), ("layers", list)):
        if not isinstance(data.get(key), typ):
            raise stale(f"field '{key}' is missing or not a {typ.__name__}")
    pool = data.get("maxpool")
    if pool is not None and not (isinstance(pool, dict) and {"cubin", "function", "block", "vector"} <= set(pool)):
        raise stale("field 'maxpool' is not an entry with cubin, function, block and vector")
    if data["network"] != net.name:
        raise stale(f"built for network '{data['network']}', the spec is '{net.name}'")
    cc = tuple(data["compute_capability"])
    if cc != tuple(compute_capability):
        raise stale(f"built for compute capability {'.'.join(map(str, cc))} ({data.get('arch', '?')}), "
                    f"this GPU is {compute_capability[0]}.{compute_capability[1]}")
    built = sorted(int(b) for b in data["batches"])
    if batch not in built:
        raise stale(f"no kernels for batch size {batch} (built for {', '.join(map(str, built)) or 'none'})")

    convs = {c.name: c for c in net.convs}
    layers: dict[str, dict] = {}
    for i, layer in enumerate(data["layers"]):
        name = layer.get("name") if isinstance(layer, dict) else None
        if name not in convs:
            raise stale(f"layers[{i}] names conv '{name}', which the spec {spec_path} does not have")
        bad = _shape_mismatch(layer.get("shape") or {}, convs[name].shape)
        if bad:
            raise stale(f"layer '{name}' was built for another shape ({bad})")
        for b, entry in (layer.get("batches") or {}).items():
            if not isinstance(entry, dict) or not isinstance(entry.get("levels"), dict):
                raise stale(f"layer '{name}' batch {b}: no 'levels' mapping")
            for level, choice in entry["levels"].items():
                try:
                    float(level)
                except ValueError:
                    raise stale(f"layer '{name}' batch {b}: level {level!r} is not a number") from None
                k = choice.get("kernel") if isinstance(choice, dict) else None
                if k not in data["kernels"]:
                    raise stale(f"layer '{name}' batch {b} level {level}: kernel {k!r} is not in 'kernels'")
            for k in entry.get("tensorcore", []):
                if k not in data["kernels"]:
                    raise stale(f"layer '{name}' batch {b}: tensor-core kernel {k!r} is not in 'kernels'")
            for k in (entry.get("pair") or {}).get("kernels", []):
                if k not in data["kernels"]:
                    raise stale(f"layer '{name}' batch {b}: pair kernel {k!r} is not in 'kernels'")
            if "threshold" in entry and not isinstance(entry["threshold"], (int, float)):
                raise stale(f"layer '{name}' batch {b}: threshold {entry['threshold']!r} is not a number")
        layers[name] = layer

    direct = data.get("direct") or {}
    if not isinstance(direct, dict):
        raise stale("field 'direct' is not a mapping of conv names")
    for name, per in direct.items():
        if name not in convs:
            raise stale(f"direct names conv '{name}', which the spec {spec_path} does not have")
        for b, k in (per.items() if isinstance(per, dict) else [("?", None)]):
            if not isinstance(k, str) or k not in data["kernels"]:
                raise stale(f"direct conv '{name}' batch {b}: kernel {k!r} is not in 'kernels'")
            bad = _shape_mismatch(data["kernels"][k].get("shape") or {}, convs[name].shape)
            if bad:
                raise stale(f"direct conv '{name}': kernel {k} was built for another shape ({bad})")
            layout = data["kernels"][k].get("input_layout", "NHWC")
            if layout not in ("NHWC", "NCHW") or (layout == "NCHW" and convs[name].input_op != "input"):
                raise stale(f"direct conv '{name}': kernel {k} reads its input as {layout!r}; only the image's conv "
                            f"reads NCHW, the rest NHWC")
    for k, kern in data["kernels"].items():
        for key in ("cubin", "steps"):
            if key not in kern:
                raise stale(f"kernel '{k}' has no '{key}'")
    tpath, rows = None, []
    if sixteen and tuning_path:
        raise CacheError(f"{tuning_path}: a {built_for} bundle has no sparse kernels, so no tuning applies to it "
                         f"({path}: every conv runs dense on the tensor cores)")
    if tuning_path is not False and not sixteen:
        tpath = Path(tuning_path) if tuning_path else path.parent / bundle_format.TUNING
        if tuning_path and not tpath.is_file():
            raise CacheError(f"{tpath}: no such tuning file (`snn-run calibrate --tuning {tpath}` writes one)")
        if tpath.is_file():
            doc = tuning.read(tpath, data)
            rows = tuning.apply(data, doc["measurements"], net, graph=doc.get("graph"))
        else:
            tpath = None
    # every cubin this batch size can run, inside the bundle and intact; then absolute paths in memory
    entries = [(layer.get("batches") or {}).get(str(batch), {}) for layer in layers.values()]
    used = {c["kernel"] for e in entries for c in e.get("levels", {}).values()}
    used |= {c["kernel"] for e in entries for lv in e.get("levels", {}).values() for c in lv.get("candidates", [])}
    used |= {k for e in entries for k in e.get("tensorcore", [])}
    used |= {k for e in entries for k in (e.get("pair") or {}).get("kernels", [])}
    used |= {per[str(batch)] for per in direct.values() if str(batch) in per}
    problems = bundle_format.verify(path.parent, data, used)
    if problems:
        raise stale(f"{problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    for entry in bundle_format.cubin_entries(data).values():
        entry["cubin"] = str(path.parent / entry["cubin"])
    return Cache(path, data, spec_path, gpu, layers, tpath, rows)
