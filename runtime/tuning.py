"""Tuning: what `snn-run calibrate` measured, kept apart from the bundle and merged in at load.

    tuning.json  {"schema": 1, "network", "gpu", "arch",
                  "measurements": {"<shape tag>|b<batch>|<level>|<kernel>|<cubin sha256>": {
                      "sparse_us", "dense_us", "dense_tf32_us", "sparsity", "rel_err_vs_cudnn_fp32", "layers"}},
                  "graph": {"<shape tag>|b<batch>": {"kernel": <name> | null, "sha256", "ms": {...}, "layers"}},
                  "images", "environment"}

A measurement is keyed by the kernel's cubin checksum, so a rebuild that leaves a kernel unchanged
keeps its measurements and one that changes it invalidates only that kernel's entries. `calibrate`
writes this file and nothing else; the build never reads it. At load, `apply` derives from the
measurements that still match the bundle, in the in-memory manifest only:

- per level: the kernel (the fastest correct candidate where the build made several, kept only if it
  beats the model's pick by TUNE_MARGIN, and a 3xTF32 tile only if it beats the FP32 kernels by as much), its
  `measured_us` and cuDNN's `dense_us`;
- per layer and batch: `threshold`, the lowest level from which the sparse kernel wins at that level
  and every higher one (dispatch.NEVER when it never wins, or wins by less than a decision on the
  device costs), `threshold_source: "calibrated"`, and `static_kernel` (see static_kernel());
- per shape and batch, where calibrate tried the dense candidates in the network's graph
  (runtime/calibrate_graph.py) and one beat the choice above: that kernel as every such layer's `static_kernel`.

No torch here: the runtime merges tuning on any machine, and the CPU tests check it.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from snn.codegen.cache import atomic_write

from . import dispatch
from .errors import RunError

SCHEMA = 1
MAX_REL_ERR = 1e-4  # a candidate whose output is further than this from cuDNN FP32 is never chosen
# an alternative replaces the model's pick only when it measured at least this much faster: at batch 1
# candidates often differ by less than the run-to-run noise, and changes under 2 % did not hold up on
# held-out photos (-3 to +3 %)
TUNE_MARGIN = 0.02


class TuningError(RunError):
    pass


def level_key(level: float) -> str:
    return f"{level:.2f}"


def shape_label(shape) -> str:
    st = f"/{shape.stride[0]}" if shape.stride[0] != 1 else ""
    return f"{shape.R}x{shape.S}{st} {shape.C}->{shape.N} @{shape.H}x{shape.W}"


def geomean(xs) -> float | None:
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def measurement_key(shape_tag: str, batch: int, level: float, kernel: str, sha256: str) -> str:
    """A rebuilt kernel (another config, or the same name with other code) is measured again; the same one is not."""
    return f"{shape_tag}|b{batch}|{level_key(level)}|{kernel}|{sha256}"


def kernel_key(manifest: dict, shape_tag: str, batch: int, level: float, kernel: str) -> str:
    return measurement_key(shape_tag, batch, level, kernel, manifest["kernels"][kernel].get("sha256", ""))


def graph_key(shape_tag: str, batch: int) -> str:
    return f"{shape_tag}|b{batch}"


def graph_valid(manifest: dict, verdicts: dict) -> bool:
    """Every kept kernel of these in-graph verdicts is still in the bundle, unchanged."""
    kernels = manifest.get("kernels", {})
    return all(v.get("kernel") is None or kernels.get(v["kernel"], {}).get("sha256", "") == v.get("sha256", "")
               for v in verdicts.values())


def empty(manifest: dict) -> dict:
    return {"schema": SCHEMA, "network": manifest.get("network"), "gpu": manifest.get("gpu"),
            "arch": manifest.get("arch"), "measurements": {}}


def read(path: str | Path, manifest: dict) -> dict:
    """The tuning file at path for this bundle's manifest; an empty one if there is none yet."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return empty(manifest)
    except (OSError, ValueError) as e:
        raise TuningError(f"{path}: not a tuning file ({e}); delete it or run `snn-run calibrate` again") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("measurements"), dict):
        raise TuningError(f"{path}: not a tuning file (no 'measurements' mapping)")
    for field in ("network", "arch"):
        if doc.get(field) is not None and doc.get(field) != manifest.get(field):
            raise TuningError(f"{path}: measured for {field} {doc.get(field)!r}, the bundle is "
                              f"{manifest.get(field)!r}; use that bundle's tuning file or calibrate this one")
    return doc


def write(path: str | Path, doc: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(doc, indent=1) + "\n")
    return path


def candidates(choice: dict, tune: bool = True) -> list[str]:
    """The kernels calibrate measures for one level: the model's pick first, then the alternatives built with it."""
    names = [c["kernel"] for c in choice.get("candidates", [])] or [choice["kernel"]]
    return names if tune else names[:1]


def lowest_winning_level(pairs: dict[float, tuple[float, float]]) -> float | None:
    """pairs: level -> (sparse_us, dense_us). The lowest level from which the sparse path is faster at
    that level and at every higher measured level (one noisy win below a loss does not count);
    None if it never wins at the highest level."""
    best = None
    for level in sorted(pairs, reverse=True):
        s, d = pairs[level]
        if s is None or d is None or not s < d:
            break
        best = level
    return best


def _mma(manifest: dict, kernel: str) -> bool:
    """A 3xTF32 tile of the dense kernel (codegen/dense.py, `build --tf32x3`)."""
    return bool(manifest["kernels"].get(kernel, {}).get("config", {}).get("mma"))


def _choose(manifest: dict, choice: dict, shape, b: int, lk: str, measurements: dict,
            tune: bool) -> tuple[float, float] | None:
    """Set the level's kernel to its fastest correct measured candidate, the model's pick unless an alternative is
    TUNE_MARGIN faster, an FP32 kernel unless a 3xTF32 one is TUNE_MARGIN faster (in place); (sparse us, dense us)
    or None."""
    names = candidates(choice, tune)
    found = {n: m for n in names if (m := measurements.get(kernel_key(manifest, shape.tag(), b, float(lk), n)))}
    for c in choice.get("candidates", []):
        c["measured_us"] = found[c["kernel"]]["sparse_us"] if c["kernel"] in found else None
    dense = next((m["dense_us"] for m in found.values() if m.get("dense_us") is not None), None)
    ok = {n: m for n, m in found.items()
          if m.get("rel_err_vs_cudnn_fp32") is not None and m["rel_err_vs_cudnn_fp32"] < MAX_REL_ERR}

    def fastest(pool):  # the model's pick unless one of pool is TUNE_MARGIN faster
        best = min(pool, key=lambda n: (pool[n]["sparse_us"], names.index(n)), default=names[0])
        if names[0] in pool and pool[best]["sparse_us"] > pool[names[0]]["sparse_us"] * (1 - TUNE_MARGIN):
            best = names[0]
        return best

    if len(names) > 1:  # tuned: the fastest correct one; a level none of whose candidates was measured keeps its pick
        best = fastest(ok)
        # a 3xTF32 tile (FP32's accuracy, not its rounding) only where it beats the FP32 kernels by the margin too:
        # DenseNet-201's near-ties on them bought nothing in the graph and moved its logits 5x further from float64
        fp32 = {n: m for n, m in ok.items() if not _mma(manifest, n)}
        if _mma(manifest, best) and fp32:
            f = fastest(fp32)
            if ok[best]["sparse_us"] > ok[f]["sparse_us"] * (1 - TUNE_MARGIN):
                best = f
        choice["kernel"] = best
        choice["predicted_us"] = next(c["predicted_us"] for c in choice["candidates"] if c["kernel"] == best)
    elif choice.get("candidates"):  # tune=False: back to the model's pick
        choice["kernel"], choice["predicted_us"] = names[0], choice["candidates"][0]["predicted_us"]
    m = found.get(choice["kernel"])
    if m is None or dense is None:  # not measured, or measured for a kernel that has since been rebuilt
        choice["measured_us"] = None
        choice.pop("dense_us", None)
        return None
    choice["measured_us"] = m["sparse_us"]
    choice["dense_us"] = dense
    return m["sparse_us"], dense


def apply(manifest: dict, measurements: dict, net, tune: bool = True, graph: dict | None = None) -> list[dict]:
    """Write measured times, the chosen candidates and thresholds into the (in-memory) manifest for
    every layer, batch and level that has a measurement, then the in-graph verdicts (`graph`: the tuning
    file's section) whose kernel is unchanged; returns one summary row per (layer, batch)."""
    shapes = {c.name: c.shape for c in net.convs}
    rows = []
    for layer in manifest["layers"]:
        shape = shapes.get(layer["name"])
        if shape is None:
            continue
        for b, entry in layer.get("batches", {}).items():
            pairs, gains = {}, []
            for lk, choice in entry["levels"].items():
                if (pair := _choose(manifest, choice, shape, int(b), lk, measurements, tune)) is not None:
                    pairs[float(lk)] = pair
                    pick = choice.get("candidates", [{}])[0].get("measured_us")
                    if pick:  # the model's pick over the chosen candidate
                        gains.append(pick / pair[0])
            if not pairs:
                continue
            lowest = lowest_winning_level(pairs)
            static = static_kernel(entry, pairs) if lowest is not None else None
            # a decision that saves less than it costs at its best level is not taken: dense, no decision
            unpaid = lowest is not None and static is None and max(d - s for s, d in pairs.values()) < \
                dispatch.DECISION_COST_US
            never = lowest is None or unpaid
            entry["threshold"] = dispatch.NEVER if never else lowest
            entry["threshold_source"] = "calibrated"
            entry.pop("static_kernel", None)
            if static:
                entry["static_kernel"] = static
            entry["calibration"] = {"never": never, "decision_unpaid": unpaid, "levels_measured": len(pairs),
                                    "dense_us_median": round(float(np.median([d for _, d in pairs.values()])), 3),
                                    "min_dense_over_sparse": round(min(d / s for s, d in pairs.values()), 3),
                                    "static": static is not None}
            verdict = (graph or {}).get(graph_key(shape.tag(), int(b)))
            in_graph = verdict.get("kernel") if verdict and graph_valid(manifest, {"": verdict}) else None
            if in_graph and any(in_graph in candidates(c) for c in entry["levels"].values()):
                entry["static_kernel"] = in_graph
                entry["calibration"]["in_graph"] = in_graph
            else:
                in_graph = None
            rows.append({"layer": layer["name"], "shape": shape_label(shape), "batch": int(b),
                         "threshold": entry["threshold"], "never": never, "static": static is not None,
                         "tuned_levels": sum(g > 1 for g in gains), "tuned_gain": geomean(gains),
                         "in_graph": in_graph})
    return rows


def static_kernel(entry: dict, pairs: dict[float, tuple[float, float]]) -> str | None:
    """The kernel a layer runs at any sparsity, or None.

    A decision on the device costs dispatch.DECISION_COST_US per layer and buys something only where
    the sparse kernel can lose. When it won at every measured level (the lowest built one included)
    and its time extrapolated to a dense input (a straight line in density through the measured
    levels) is still within DECISION_COST_US of cuDNN's best, the layer runs the lowest level's kernel
    (made for the densest inputs) at any sparsity: no selector, no conditional node."""
    lowest_built = min(float(k) for k in entry["levels"]) if entry["levels"] else None
    if not pairs or lowest_built is None or abs(min(pairs) - lowest_built) > 1e-9:
        return None
    if any(not s < d for s, d in pairs.values()):
        return None
    levels = sorted(pairs)
    density = 1.0 - np.array(levels)
    sparse = np.array([pairs[lv][0] for lv in levels])
    at_dense = float(np.polyval(np.polyfit(density, sparse, 1), 1.0)) if len(levels) > 1 else float(sparse[0])
    if at_dense > min(d for _, d in pairs.values()) + dispatch.DECISION_COST_US:
        return None
    return entry["levels"][level_key(levels[0])]["kernel"]


def validity(manifest: dict, measurements: dict) -> tuple[int, int]:
    """(measurements that match a kernel of the bundle, those that do not: measured on a kernel since rebuilt)."""
    shas = {(name, k.get("sha256")) for name, k in manifest.get("kernels", {}).items()}
    valid = sum((key.split("|")[3], key.split("|")[4]) in shas for key in measurements if key.count("|") == 4)
    return valid, len(measurements) - valid
