"""`snn-run calibrate`: measure, per conv layer, batch bucket and sparsity level, cuDNN (FP32, TF32
off, NHWC) against the layer's sparse kernel for that level, on real activations thresholded to the
level (runtime/bench.py), and write into the manifest:

- `levels[level]["measured_us"]`: the sparse kernel's median time (its steps: memset if any, launches);
  `levels[level]["dense_us"]`: cuDNN FP32 on the same inputs;
- `threshold`: the lowest level from which the sparse kernel wins at that level and every higher one
  (1.0 and `"never": true` in `calibration` when it never wins), `threshold_source: "calibrated"`.

The epilogue (bias + ReLU + zero count) runs after the conv on both paths, so it is not part of
either number (bench layers reports it). Identical shapes are measured once per batch. Progress is
kept in `calibration.json` beside the manifest after every shape, so an interrupted run resumes where
it stopped; `force` measures again.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np

from codegen.spec import load_spec

from . import bench
from .errors import RunError

SIDECAR = "calibration.json"


def measurement_key(shape_tag: str, batch: int, level: float, kernel: str) -> str:
    """A rebuilt kernel (another config, another name) is measured again; the same one is not."""
    return f"{shape_tag}|b{batch}|{bench.level_key(level)}|{kernel}"


def read_sidecar(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and isinstance(doc.get("measurements"), dict):
            return doc
    except (OSError, ValueError):
        pass
    return {"schema": 1, "measurements": {}}


def apply_to_manifest(data: dict, measurements: dict, net) -> list[dict]:
    """Write measured times and thresholds into the manifest dict (in place) for every layer, batch
    and level that has a measurement; returns one summary row per (layer, batch)."""
    shapes = {c.name: c.shape for c in net.convs}
    rows = []
    for layer in data["layers"]:
        shape = shapes.get(layer["name"])
        if shape is None:
            continue
        for b, entry in layer.get("batches", {}).items():
            pairs = {}
            for lk, choice in entry["levels"].items():
                m = measurements.get(measurement_key(shape.tag(), int(b), float(lk), choice["kernel"]))
                if m is None:  # not measured, or measured for a kernel that has since been rebuilt
                    choice["measured_us"] = None
                    choice.pop("dense_us", None)
                    continue
                choice["measured_us"] = m["sparse_us"]
                choice["dense_us"] = m["dense_us"]
                pairs[float(lk)] = (m["sparse_us"], m["dense_us"])
            if not pairs:
                continue
            lowest = bench.lowest_winning_level(pairs)
            entry["threshold"] = 1.0 if lowest is None else lowest
            entry["threshold_source"] = "calibrated"
            entry["calibration"] = {"never": lowest is None, "levels_measured": len(pairs),
                                    "dense_us_median": round(float(np.median([d for _, d in pairs.values()])), 3)}
            rows.append({"layer": layer["name"], "batch": int(b), "threshold": entry["threshold"],
                         "never": lowest is None})
    return rows


def calibrate(spec: str, cache_dir: str, gpu: str, batches: list[int] | None, levels: list[float] | None,
              images_dir: str | None, weights_arg: str | None = None, seed: int = 0, reps: int = 30,
              warmup: int = 5, force: bool = False, bar=None, cpu_dry_run: bool = False, log=print) -> dict:
    from . import manifest
    net = load_spec(spec)
    env = bench.Env(cpu_dry_run)
    torch = env.torch
    first = batches[0] if batches else 1
    mpath = manifest.locate(cache_dir, net, spec, gpu, first, env.name, env.cc)
    data = json.loads(Path(mpath).read_text())
    built = sorted(int(b) for b in data.get("batches", []))
    batches = batches or built
    for b in batches:
        if b not in built:
            raise RunError(f"{mpath}: no kernels for batch {b} (built for {', '.join(map(str, built))}); "
                           f"rebuild with: {manifest.build_command(spec, Path(mpath).parent.name, b)}")
    caches = {b: manifest.load(mpath, net, spec, b, env.cc) for b in batches}
    all_levels = sorted(float(x) for x in data.get("levels", [])) or None
    levels = levels or all_levels
    sidecar_path = Path(mpath).parent / SIDECAR
    side = read_sidecar(sidecar_path)
    meas = side["measurements"]
    sources = bench.relu_sources(net)
    names = [c.name for c in net.convs if c.name in caches[batches[0]].layers and c.name in sources]
    groups = bench.distinct_shapes(net, names)

    todo = []  # (group, batch, level, kernel)
    for g in groups:
        rep = g["layers"][0]
        shape = next(c.shape for c in net.convs if c.name == rep)
        for b in batches:
            entry = caches[b].layer_entry(rep, b)
            if not entry:
                continue
            for lv in levels:
                choice = entry["levels"].get(bench.level_key(lv))
                if choice is None:
                    continue
                key = measurement_key(shape.tag(), b, lv, choice["kernel"])
                if force or key not in meas:
                    todo.append((g, b, lv, choice["kernel"]))
    log(f"{net.name}: {len(groups)} distinct shapes x {len(batches)} batch(es) x {len(levels)} level(s); "
        f"{len(todo)} measurement(s) to make, the rest in {sidecar_path}")
    if todo:
        sd, _ = bench._weights(env, net, weights_arg, seed)
        pool, pool_info = bench.load_image_pool(net, images_dir, max(batches), seed)
        side["images"], side["environment"] = pool_info, env.info()
        need = {g["layers"][0] for g, *_ in todo}
        with torch.inference_mode():
            _, z_all = bench.forward(net, sd, pool.to(env.device), keep=need)
        timer = bench.Timer(env, reps, warmup)
        rng = np.random.default_rng(seed)
        perms = [rng.permutation(pool.shape[0]) for _ in range(bench.N_SETS)]
        F = torch.nn.functional
        with (bar(len(todo)) if bar else contextlib.nullcontext()) as progress, torch.inference_mode():
            last_rep = None
            for g, b, lv, kernel in todo:
                rep = g["layers"][0]
                conv = next(c for c in net.convs if c.name == rep)
                shape, z = conv.shape, z_all[rep]
                weight = sd[f"{conv.param}.weight"].float().contiguous()
                sets = [z[torch.as_tensor(p[:b].tolist(), device=z.device) % z.shape[0]] for p in perms]
                xs = [bench.at_level(s, lv) for s in sets]
                rec = bench.measure_layer(env, timer, env.backend(caches[b]), caches[b], kernel, shape, weight, xs,
                                          nchw=False)
                meas[measurement_key(shape.tag(), b, lv, kernel)] = {
                    "sparse_us": rec["times"]["sparse"]["median_us"],
                    "dense_us": rec["times"]["dense_fp32_nhwc"]["median_us"],
                    "dense_tf32_us": rec["times"]["dense_tf32_nhwc"]["median_us"],
                    "sparsity": [round(float((x == 0).float().mean().item()), 4) for x in xs],
                    "rel_err_vs_cudnn_fp32": rec.get("rel_err_vs_cudnn_fp32"), "layers": g["layers"]}
                del xs, sets
                if rep != last_rep:  # progress on disk after every shape: safe to interrupt
                    bench.write_json(side, sidecar_path)
                    last_rep = rep
                if progress:
                    progress.update(1)
        bench.write_json(side, sidecar_path)
    rows = apply_to_manifest(data, meas, net)
    bench.write_json(data, mpath)
    return {"schema": bench.SCHEMA, "kind": "calibrate", "spec": spec, "environment": env.info(),
            "images": side.get("images"), "timing": {"reps": reps, "warmup": warmup,
                                                     "what": "median us; sparse: the kernel's steps; dense: cuDNN FP32 NHWC"},
            "manifest": str(mpath), "sidecar": str(sidecar_path), "rows": rows, "levels": levels,
            "batches": batches, "network": net.name, "measurements": meas}


def format_rows(result: dict) -> list[str]:
    lines = [f"{'layer':<40} {'batch':>5} {'threshold':>9}"]
    for r in result["rows"]:
        t = "never" if r["never"] else f"{r['threshold']:.2f}"
        lines.append(f"{r['layer']:<40} {r['batch']:>5} {t:>9}")
    return lines
