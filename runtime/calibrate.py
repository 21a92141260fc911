"""`snn-run calibrate`: measure, per conv layer, batch bucket and sparsity level, cuDNN (FP32, TF32
off, NHWC) against the layer's sparse kernel for that level, on real activations thresholded to the
level (runtime/bench.py), and write into the manifest:

- `levels[level]["measured_us"]`: the sparse kernel's median time (its steps: memset if any, launches);
  `levels[level]["dense_us"]`: cuDNN FP32 on the same inputs;
- `threshold`: the lowest level from which the sparse kernel wins at that level and every higher one
  (1.0 and `"never": true` in `calibration` when it never wins, or when it wins by less than a
  decision on the device costs, dispatch.DECISION_COST_US, at its best level: `"decision_unpaid": true`),
  `threshold_source: "calibrated"`;
- `static_kernel`: see static_kernel() below.

A level built with candidates (`snn-codegen build --candidates K`: the model's pick and its next best configs)
has every candidate measured on the same inputs; the fastest one whose output matches cuDNN becomes the level's
`kernel` (and `predicted_us`) if it beats the model's pick by TUNE_MARGIN, each candidate gets its `measured_us`,
and the thresholds follow from the chosen kernels. cuDNN is timed once per level (with the first candidate
measured). `tune=False` keeps the model's picks.

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

from snn.codegen.spec import load_spec

from . import bench, dispatch
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


MAX_REL_ERR = 1e-4  # a candidate whose output is further than this from cuDNN FP32 is never chosen
# an alternative replaces the model's pick only when it measured at least this much faster: at batch 1 candidates
# often differ by less than the run-to-run noise (tune-s8: DenseNet-201's retuned batch-1 levels gained nothing)
TUNE_MARGIN = 0.02


def candidates(choice: dict, tune: bool = True) -> list[str]:
    """The kernels calibrate measures for one level: the model's pick first, then the alternatives built with it."""
    names = [c["kernel"] for c in choice.get("candidates", [])] or [choice["kernel"]]
    return names if tune else names[:1]


def _choose(choice: dict, shape, b: int, lk: str, measurements: dict, tune: bool) -> tuple[float, float] | None:
    """Set the level's kernel to its fastest correct measured candidate, the model's pick unless an alternative is
    TUNE_MARGIN faster (in place); (sparse us, dense us) or None."""
    names = candidates(choice, tune)
    found = {n: m for n in names if (m := measurements.get(measurement_key(shape.tag(), b, float(lk), n)))}
    for c in choice.get("candidates", []):
        c["measured_us"] = found[c["kernel"]]["sparse_us"] if c["kernel"] in found else None
    dense = next((m["dense_us"] for m in found.values() if m.get("dense_us") is not None), None)
    ok = {n: m for n, m in found.items() if "rel_err_vs_cudnn_fp32" not in m or  # (recorded since session 1)
          (m["rel_err_vs_cudnn_fp32"] is not None and m["rel_err_vs_cudnn_fp32"] < MAX_REL_ERR)}
    if len(names) > 1:  # tuned: the fastest correct one; a level none of whose candidates was measured keeps its pick
        best = min(ok, key=lambda n: (ok[n]["sparse_us"], names.index(n)), default=names[0])
        if names[0] in ok and ok[best]["sparse_us"] > ok[names[0]]["sparse_us"] * (1 - TUNE_MARGIN):
            best = names[0]
        choice["kernel"] = best
        choice["predicted_us"] = next(c["predicted_us"] for c in choice["candidates"] if c["kernel"] == best)
    elif choice.get("candidates"):  # --no-tune: back to the model's pick
        choice["kernel"], choice["predicted_us"] = names[0], choice["candidates"][0]["predicted_us"]
    m = found.get(choice["kernel"])
    if m is None or dense is None:  # not measured, or measured for a kernel that has since been rebuilt
        choice["measured_us"] = None
        choice.pop("dense_us", None)
        return None
    choice["measured_us"] = m["sparse_us"]
    choice["dense_us"] = dense
    return m["sparse_us"], dense


def apply_to_manifest(data: dict, measurements: dict, net, tune: bool = True) -> list[dict]:
    """Write measured times, the chosen candidates and thresholds into the manifest dict (in place) for
    every layer, batch and level that has a measurement; returns one summary row per (layer, batch)."""
    shapes = {c.name: c.shape for c in net.convs}
    rows = []
    for layer in data["layers"]:
        shape = shapes.get(layer["name"])
        if shape is None:
            continue
        for b, entry in layer.get("batches", {}).items():
            pairs, gains = {}, []
            for lk, choice in entry["levels"].items():
                if (pair := _choose(choice, shape, int(b), lk, measurements, tune)) is not None:
                    pairs[float(lk)] = pair
                    pick = choice.get("candidates", [{}])[0].get("measured_us")
                    if pick:  # the model's pick over the chosen candidate
                        gains.append(pick / pair[0])
            if not pairs:
                continue
            lowest = bench.lowest_winning_level(pairs)
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
            rows.append({"layer": layer["name"], "shape": bench.shape_label(shape), "batch": int(b),
                         "threshold": entry["threshold"], "never": never, "static": static is not None,
                         "tuned_levels": sum(g > 1 for g in gains), "tuned_gain": bench.geomean(gains)})
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
    return entry["levels"][bench.level_key(levels[0])]["kernel"]


def calibrate(spec: str, cache_dir: str, gpu: str, batches: list[int] | None, levels: list[float] | None,
              images_dir: str | None, weights_arg: str | None = None, seed: int = 0, reps: int = 30,
              warmup: int = 5, force: bool = False, bar=None, cpu_dry_run: bool = False, log=print,
              exhaustive: dict | None = None, tune: bool = True) -> dict:
    """exhaustive: {"layers": n, "configs": n, "level": x} to also time a sample of stage-1 survivors
    for a sample of layers at batches[0] (built here with nvcc through the cubin cache). tune: measure
    every candidate a level was built with and keep the fastest (else the model's pick only)."""
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
                for kernel in candidates(choice, tune):
                    if force or measurement_key(shape.tag(), b, lv, kernel) not in meas:
                        todo.append((g, b, lv, kernel))
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
        with (bar(len(todo)) if bar else contextlib.nullcontext()) as progress, torch.inference_mode():
            last_rep = None
            timed_dense = set()  # (shape, batch, level): cuDNN is timed with the first candidate measured
            for g, b, lv, kernel in todo:
                rep = g["layers"][0]
                conv = next(c for c in net.convs if c.name == rep)
                shape, z = conv.shape, z_all[rep]
                weight = sd[f"{conv.param}.weight"].float().contiguous()
                sets = [z[torch.as_tensor(p[:b].tolist(), device=z.device) % z.shape[0]] for p in perms]
                xs = [bench.at_level(s, lv) for s in sets]
                dense = (shape.tag(), b, lv) not in timed_dense
                timed_dense.add((shape.tag(), b, lv))
                rec = bench.measure_layer(env, timer, env.backend(caches[b]), caches[b], kernel, shape, weight, xs,
                                          nchw=False, dense=dense)
                t = {k: v["median_us"] for k, v in rec["times"].items()}
                meas[measurement_key(shape.tag(), b, lv, kernel)] = {
                    "sparse_us": t["sparse"], "dense_us": t.get("dense_fp32_nhwc"),
                    "dense_tf32_us": t.get("dense_tf32_nhwc"),
                    "sparsity": [round(float((x == 0).float().mean().item()), 4) for x in xs],
                    "rel_err_vs_cudnn_fp32": rec.get("rel_err_vs_cudnn_fp32"), "layers": g["layers"]}
                del xs, sets
                if rep != last_rep:  # progress on disk after every shape: safe to interrupt
                    bench.write_json(side, sidecar_path)
                    last_rep = rep
                if progress:
                    progress.update(1)
        bench.write_json(side, sidecar_path)
    rows = apply_to_manifest(data, meas, net, tune)
    bench.write_json(data, mpath)
    exh = None
    if exhaustive:
        plan = build_exhaustive(spec, Path(mpath).parent.name, batches[0], exhaustive["level"], exhaustive["layers"],
                                exhaustive["configs"])
        sd, _ = bench._weights(env, net, weights_arg, seed)
        exh = time_exhaustive(env, net, sd, plan, images_dir, seed, reps, warmup, data["epilogue"], log)
    return {"schema": bench.SCHEMA, "kind": "calibrate", "spec": spec, "environment": env.info(),
            "images": side.get("images"), "timing": {"reps": reps, "warmup": warmup,
                                                     "what": "median us; sparse: the kernel's steps; dense: cuDNN FP32 NHWC"},
            "manifest": str(mpath), "sidecar": str(sidecar_path), "rows": rows, "levels": levels,
            "batches": batches, "network": net.name, "measurements": meas, "exhaustive": exh}


def format_rows(result: dict) -> list[str]:
    tuned = any(r.get("tuned_gain") for r in result["rows"])
    head = f"{'layer':<40} {'batch':>5} {'threshold':>9}"
    lines = [head + ("  tuned levels (model's pick / chosen)" if tuned else "")]
    for r in result["rows"]:
        t = "never" if r["never"] else f"{r['threshold']:.2f}" + (" static" if r.get("static") else "")
        extra = f"  {r['tuned_levels']} ({r['tuned_gain']:.3f}x)" if tuned and r.get("tuned_gain") else ""
        lines.append(f"{r['layer']:<40} {r['batch']:>5} {t:>9}{extra}")
    return lines


# ------------------------------------------------------------------ --exhaustive (paper Fig. 8, sampled)
def exhaustive_plan(net, gpu, batch: int, level: float, n_layers: int, n_configs: int, model: str = "snn") -> list[dict]:
    """A sample of layers (distinct shapes, kernels larger than 1x1 first, evenly spaced) and, per
    layer, the model's choice plus up to n_configs stage-1 survivors: the model's next best ones and
    the rest evenly spread over stage 1 (all of stage 1 is hundreds to thousands of kernels)."""
    from snn.codegen import costmodel
    sources = bench.relu_sources(net)
    groups = bench.distinct_shapes(net, [c.name for c in net.convs if c.name in sources])
    big = [g for g in groups if g["shape"].R > 1 and tuple(g["shape"].stride) == (1, 1)] \
        or [g for g in groups if g["shape"].R > 1] or groups
    step = max(1, len(big) / max(1, n_layers))
    picked = [big[int(i * step)] for i in range(min(n_layers, len(big)))]
    out = []
    for g in picked:
        shape = g["shape"]
        st = costmodel.stages(shape, gpu, batch, level, model)
        chosen = st["stage3"][0]
        top = [c for c in st["stage3"][1:1 + n_configs // 3]]
        rest = [c for c in st["stage1"] if c != chosen and c not in top]
        k = max(0, n_configs - 1 - len(top))
        spread = [rest[int(i * len(rest) / k)] for i in range(k)] if k and rest else []
        configs = [chosen] + top + [c for c in spread if c not in top]
        out.append({"layer": g["layers"][0], "layers": g["layers"], "shape": shape, "configs": configs,
                    "stage1": len(st["stage1"]), "model_config": chosen})
    return out


def build_exhaustive(spec: str, gpu_name: str, batch: int, level: float, n_layers: int, n_configs: int,
                     jobs: int | None = None, progress=None) -> list[dict]:
    """Render and compile (cubin cache: hits are free) the sampled configs; returns per layer the
    kernel entries the runtime needs (cubin, steps, workspace, weight_layout) with the model's numbers."""
    import os

    from snn.codegen import costmodel, emit
    from snn.codegen.build import KEY_FLAGS, Unit, compile_units, find_nvcc, toolchain
    from snn.codegen.cache import CubinCache, cache_key
    from snn.codegen.gpu import load_gpu
    from snn.codegen import ptxas
    net = load_spec(spec)
    gpu = load_gpu(gpu_name)
    cache = CubinCache()
    tc = toolchain(find_nvcc(), cache)
    plan = exhaustive_plan(net, gpu, batch, level, n_layers, n_configs)
    units, emitted = {}, {}
    for p in plan:
        for cfg in p["configs"]:
            k = emit.render_sparse(p["shape"], batch, cfg)
            emitted[k.name] = k
            units[k.name] = Unit(k.name, k.source, cache_key(k.source, tc.version_string, KEY_FLAGS, gpu.arch))
    for u in units.values():
        u.record = cache.lookup(u.key)
    misses = [u for u in units.values() if u.record is None]
    compile_units(misses, gpu.arch, tc, cache, jobs or os.cpu_count() or 1, progress)
    out = []
    for p in plan:
        cands = []
        for rank, cfg in enumerate(p["configs"]):
            name = cfg.name(p["shape"], batch)
            k, rec = emitted[name], units[name].record
            funcs = {n: ptxas.FunctionResources.from_dict(d) for n, d in rec["functions"].items()}
            probs = ptxas.problems(funcs)
            ev = costmodel.evaluate_config(p["shape"], gpu, batch, level, cfg)
            cands.append({"kernel": name, "config": cfg.to_dict(), "model_choice": rank == 0,
                          "predicted_us": ev.get("predicted_us"), "cubin": rec["cubin"], "steps": k.steps,
                          "workspace": k.workspace, "weight_layout": k.weight_layout,
                          "spills": "; ".join(probs) or None})
        out.append({"layer": p["layer"], "layers": p["layers"], "label": bench.shape_label(p["shape"]),
                    "tag": p["shape"].tag(), "batch": batch, "level": level, "stage1_survivors": p["stage1"],
                    "candidates": cands})
    return out


def time_exhaustive(env, net, sd, plan: list[dict], images_dir, seed: int, reps: int, warmup: int,
                    epilogue: dict, log=print) -> list[dict]:
    """Time every sampled candidate on the layer's real activations at the level; model vs best."""
    torch = env.torch

    class _One:  # what CudaBackend needs of a cache
        def __init__(self, entries):
            self.entries, self.epilogue = entries, epilogue

        def kernel(self, name):
            return self.entries[name]

    pool, _ = bench.load_image_pool(net, images_dir, max(p["batch"] for p in plan), seed)
    with torch.inference_mode():
        _, z_all = bench.forward(net, sd, pool.to(env.device), keep={p["layer"] for p in plan})
    timer = bench.Timer(env, reps, warmup)
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(pool.shape[0]) for _ in range(bench.N_SETS)]
    from .lower import to_layout
    results = []
    with torch.inference_mode():
        for p in plan:
            conv = next(c for c in net.convs if c.name == p["layer"])
            shape, z, B = conv.shape, z_all[p["layer"]], p["batch"]
            xs = [bench.at_level(z[torch.as_tensor(q[:B].tolist(), device=z.device) % z.shape[0]], p["level"])
                  for q in perms]
            weight = sd[f"{conv.param}.weight"].float().contiguous()
            ref = torch.nn.functional.conv2d(xs[0], weight, None, shape.stride, shape.padding)
            entries = {c["kernel"]: c for c in p["candidates"]}
            backend = env.backend(_One(entries))
            out = torch.empty((B, shape.N, shape.P, shape.Q), device=env.device, memory_format=torch.channels_last)
            for c in p["candidates"]:
                if c["spills"]:
                    c["measured_us"] = None
                    continue
                wk = to_layout(weight, c["weight_layout"])
                ws = {k: torch.empty(max(1, int(v)), dtype=torch.uint8, device=env.device)
                      for k, v in (c["workspace"] or {}).items()}
                out.fill_(float("nan"))
                backend.sparse_conv(c["kernel"], c, xs[0], wk, out, ws, shape)
                err = float((torch.linalg.vector_norm((out - ref).double()) / torch.linalg.vector_norm(ref.double())).item())
                c["rel_err"] = err if np.isfinite(err) else None
                t = timer([lambda x=x: backend.sparse_conv(c["kernel"], c, x, wk, out, ws, shape) for x in xs])
                c["measured_us"] = bench.stats(t)["median_us"]
            ok = [c for c in p["candidates"] if c.get("measured_us") and c.get("rel_err") is not None and c["rel_err"] < 1e-4]
            model = next(c for c in p["candidates"] if c["model_choice"])
            best = min(ok, key=lambda c: c["measured_us"]) if ok else None
            res = {k: v for k, v in p.items() if k != "candidates"}
            res.update({"model_kernel": model["kernel"], "model_us": model.get("measured_us"),
                        "best_kernel": best["kernel"] if best else None, "best_us": best["measured_us"] if best else None,
                        "model_over_best": (model["measured_us"] / best["measured_us"]) if best and model.get("measured_us") else None,
                        "model_rank": (sorted(c["measured_us"] for c in ok).index(model["measured_us"]) + 1)
                        if model in ok else None, "timed": len(ok),
                        "candidates": [{k: v for k, v in c.items() if k not in ("steps", "cubin")} for c in p["candidates"]]})
            results.append(res)
            log(f"exhaustive {res['label']} b{B} @{p['level']}: model {res['model_us']} us, best of {len(ok)} "
                f"{res['best_us']} us (ratio {res['model_over_best']})")
    return results
