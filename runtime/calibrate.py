"""`snn-run calibrate`: measure, per conv layer, batch bucket and sparsity level, cuDNN (FP32, TF32
off, NHWC) against the layer's sparse kernel for that level (every candidate kernel where the build
made several: `snn-codegen build --candidates K`), on real activations thresholded to the level, and
write the measurements to the tuning file (runtime/tuning.py: tuning.json in the bundle, or a path
the user names). The bundle itself is never written; the runtime derives thresholds, static kernels
and the measured choice among candidates from the tuning file at load.

Both numbers include the epilogue the network runs after the conv (bias + ReLU + zero count): fused
into the sparse kernel's store, one snn_epilogue launch after cuDNN. Identical shapes are measured once per batch;
cuDNN once per level; a dense candidate (codegen/dense.py: its time does not depend on the input's zeros) once per
shape and batch, its measurement shared by the levels that offer it. Progress is written to the tuning file after
every shape, so an interrupted run resumes where it stopped; `remeasure` measures again what the file already holds.
Last, the dense candidates of the shapes several layers share are tried in the network's own CUDA graph, where
their ranking alone does not hold (runtime/calibrate_graph.py); its verdicts go to the same file.
"""
from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path

import numpy as np

from snn.codegen.spec import load_spec

from .measure import common, inputs, timing
from .measure.layer import measure_layer
from .errors import RunError


def sparsity_free(kentry: dict) -> bool:
    """A kernel whose time does not depend on its input's zeros (the dense FP32 kernel, codegen/dense.py)."""
    return kentry.get("config", {}).get("family") == "dense"


def _measured_at_another_level(meas: dict, key, shape, b: int, levels, lv: float, kernel: str) -> dict | None:
    for other in levels:
        m = meas.get(key(shape, b, other, kernel)) if other != lv else None
        if m and m.get("sparse_us") is not None:
            return m
    return None


def calibrate(spec: str, cache_dir: str, gpu: str, batches: list[int] | None, levels: list[float] | None,
              images_dir: str | None, weights_arg: str | None = None, seed: int = 0, reps: int = 30,
              warmup: int = 5, remeasure: bool = False, bar=None, cpu_dry_run: bool = False, log=print,
              exhaustive: dict | None = None, tune: bool = True, tuning_path: str | None = None,
              graph: bool = True) -> dict:
    """exhaustive: {"layers": n, "configs": n, "level": x} to also time a sample of stage-1 survivors
    for a sample of layers at batches[0] (built here with nvcc through the cubin cache). tune: measure
    every candidate a level was built with and keep the fastest (else the model's pick only).
    tuning_path: where the measurements go (default: tuning.json in the bundle). graph: then try the
    dense candidates of the most repeated shapes in the network's CUDA graph (runtime/calibrate_graph.py;
    not in a CPU dry run, nor with tune off)."""
    from snn.codegen import bundle

    from . import manifest, tuning
    net = load_spec(spec)
    env = timing.Env(cpu_dry_run)
    torch = env.torch
    first = batches[0] if batches else 1
    mpath = manifest.locate(cache_dir, net, spec, gpu, first, env.name, env.cc)
    data = json.loads(Path(mpath).read_text())
    if (p := bundle.precision(data)) != bundle.DEFAULT_PRECISION:  # no tuning file: a script must not assume one
        raise RunError(f"{mpath}: every conv of a {p} bundle runs dense on cuDNN's tensor cores, so there is nothing "
                       f"to calibrate; calibrate an fp32 bundle, built with: "
                       f"{manifest.build_command(spec, Path(mpath).parent.name, first)}")
    built = sorted(int(b) for b in data.get("batches", []))
    batches = batches or built
    for b in batches:
        if b not in built:
            raise RunError(f"{mpath}: no kernels for batch {b} (built for {', '.join(map(str, built))}); "
                           f"rebuild with: {manifest.build_command(spec, Path(mpath).parent.name, b)}")
    # the bundle as built (the model's picks): measurements are made and keyed against it
    caches = {b: manifest.load(mpath, net, spec, b, env.cc, tuning_path=False) for b in batches}
    data = caches[batches[0]].data
    all_levels = sorted(float(x) for x in data.get("levels", [])) or None
    levels = levels or all_levels
    tpath = Path(tuning_path) if tuning_path else Path(mpath).parent / bundle.TUNING
    side = tuning.read(tpath, data)
    meas = side["measurements"]
    sources = inputs.relu_sources(net)
    names = [c.name for c in net.convs if c.name in caches[batches[0]].layers and c.name in sources]
    groups = common.distinct_shapes(net, names)

    def key(shape, b, lv, kernel):
        return tuning.kernel_key(data, shape.tag(), b, lv, kernel)

    todo = []  # (group, batch, level, kernel)
    for g in groups:
        rep = g["layers"][0]
        shape = next(c.shape for c in net.convs if c.name == rep)
        for b in batches:
            entry = caches[b].layer_entry(rep, b)
            if not entry:
                continue
            for lv in levels:
                choice = entry["levels"].get(tuning.level_key(lv))
                if choice is None:
                    continue
                for kernel in tuning.candidates(choice, tune):
                    if remeasure or key(shape, b, lv, kernel) not in meas:
                        todo.append((g, b, lv, kernel))
    valid, stale = tuning.validity(data, meas)
    log(f"{net.name}: {len(groups)} distinct shapes x {len(batches)} batch(es) x {len(levels)} level(s); "
        f"{len(todo)} measurement(s) to make, {valid} valid in {tpath}"
        + (f" ({stale} of kernels since rebuilt, ignored)" if stale else ""))
    loaded = None

    def weights_and_images():
        nonlocal loaded
        if loaded is None:
            sd, _ = inputs.load_weights(env, net, weights_arg, seed)
            pool, pool_info = inputs.load_image_pool(net, images_dir, max(batches), seed)
            side["images"], side["environment"] = pool_info, env.info()
            loaded = sd, pool
        return loaded

    if todo:
        sd, pool = weights_and_images()
        need = {g["layers"][0] for g, *_ in todo}
        with torch.inference_mode():
            _, z_all = inputs.forward(net, sd, pool.to(env.device), keep=need)
        timer = timing.Timer(env, reps, warmup)
        rng = np.random.default_rng(seed)
        perms = [rng.permutation(pool.shape[0]) for _ in range(common.N_SETS)]
        with (bar(len(todo)) if bar else contextlib.nullcontext()) as progress, torch.inference_mode():
            last_rep = None
            timed_dense = set()  # (shape, batch, level): cuDNN is timed with the first candidate measured
            for g, b, lv, kernel in todo:
                rep = g["layers"][0]
                conv = next(c for c in net.convs if c.name == rep)
                shape, z = conv.shape, z_all[rep]
                once = sparsity_free(caches[b].kernel(kernel))
                if once and (done := _measured_at_another_level(meas, key, shape, b, levels, lv, kernel)):
                    meas[key(shape, b, lv, kernel)] = dict(done, sparsity=None)
                    if progress:
                        progress.update(1)
                    continue
                weight = sd[f"{conv.param}.weight"].float().contiguous()
                sets = [z[torch.as_tensor(p[:b].tolist(), device=z.device) % z.shape[0]] for p in perms]
                xs = [inputs.at_level(s, lv) for s in sets]
                dense = (shape.tag(), b, lv) not in timed_dense
                timed_dense.add((shape.tag(), b, lv))
                rec = measure_layer(env, timer, env.backend(caches[b]), caches[b], kernel, shape, weight, xs,
                                          nchw=False, dense=dense)
                t = {k: v["median_us"] for k, v in rec["times"].items()}
                meas[key(shape, b, lv, kernel)] = {
                    "sparse_us": t["sparse"], "dense_us": t.get("dense_fp32_nhwc_epilogue"),
                    "dense_tf32_us": t.get("dense_tf32_nhwc"),
                    "sparsity": [round(float((x == 0).float().mean().item()), 4) for x in xs],
                    "rel_err_vs_cudnn_fp32": rec.get("rel_err_vs_cudnn_fp32"), "layers": g["layers"]}
                del xs, sets
                if rep != last_rep:  # progress on disk after every shape: safe to interrupt
                    tuning.write(tpath, side)
                    last_rep = rep
                if progress:
                    progress.update(1)
        tuning.write(tpath, side)
    if graph and tune and not cpu_dry_run:
        from .calibrate_graph import calibrate_in_graph
        sd, pool = weights_and_images()
        calibrate_in_graph(env, net, spec, mpath, tpath, side, caches, sd, pool, remeasure=remeasure, log=log)
    rows = tuning.apply(copy.deepcopy(data), meas, net, tune, graph=side.get("graph") if tune else None)
    exh = None
    if exhaustive:
        plan = build_exhaustive(spec, Path(mpath).parent.name, batches[0], exhaustive["level"], exhaustive["layers"],
                                exhaustive["configs"])
        sd, _ = inputs.load_weights(env, net, weights_arg, seed)
        exh = time_exhaustive(env, net, sd, plan, images_dir, seed, reps, warmup, data["epilogue"], log)
    return {"schema": common.SCHEMA, "kind": "calibrate", "spec": spec, "environment": env.info(),
            "images": side.get("images"), "timing": {"reps": reps, "warmup": warmup,
                                                     "what": "median us; sparse: the kernel's steps; dense: cuDNN FP32 NHWC"},
            "manifest": str(mpath), "tuning": str(tpath), "rows": rows, "levels": levels,
            "batches": batches, "network": net.name, "measurements": meas, "exhaustive": exh}


def format_rows(result: dict) -> list[str]:
    tuned = any(r.get("tuned_gain") for r in result["rows"])
    head = f"{'layer':<40} {'batch':>5} {'threshold':>9}"
    lines = [head + ("  tuned levels (model's pick / chosen)" if tuned else "")]
    for r in result["rows"]:
        t = "never" if r["never"] else f"{r['threshold']:.2f}" + (" static" if r.get("static") else "")
        extra = f"  {r['tuned_levels']} ({r['tuned_gain']:.3f}x)" if tuned and r.get("tuned_gain") else ""
        extra += f"  in the graph: {r['in_graph']}" if r.get("in_graph") else ""
        lines.append(f"{r['layer']:<40} {r['batch']:>5} {t:>9}{extra}")
    return lines


# ------------------------------------------------------------------ --exhaustive (paper Fig. 8, sampled)
def exhaustive_plan(net, gpu, batch: int, level: float, n_layers: int, n_configs: int, model: str = "snn") -> list[dict]:
    """A sample of layers (distinct shapes, kernels larger than 1x1 first, evenly spaced) and, per
    layer, the model's choice plus up to n_configs stage-1 survivors: the model's next best ones and
    the rest evenly spread over stage 1 (all of stage 1 is hundreds to thousands of kernels)."""
    from snn.codegen.plan import stages
    sources = inputs.relu_sources(net)
    groups = common.distinct_shapes(net, [c.name for c in net.convs if c.name in sources])
    big = [g for g in groups if g["shape"].R > 1 and tuple(g["shape"].stride) == (1, 1)] \
        or [g for g in groups if g["shape"].R > 1] or groups
    step = max(1, len(big) / max(1, n_layers))
    picked = [big[int(i * step)] for i in range(min(n_layers, len(big)))]
    out = []
    for g in picked:
        shape = g["shape"]
        st = stages(shape, gpu, batch, level, model)
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
                     jobs: int | None = None) -> list[dict]:
    """Render and compile (cubin cache: hits are free) the sampled configs; returns per layer the
    kernel entries the runtime needs (cubin, steps, workspace, weight_layout) with the model's numbers."""
    from snn.codegen import emit
    from snn.codegen.compile import Compiler, problems
    from snn.codegen.gpu import load_gpu
    from snn.codegen.plan import evaluate_config
    net = load_spec(spec)
    gpu = load_gpu(gpu_name)
    plan = exhaustive_plan(net, gpu, batch, level, n_layers, n_configs)
    emitted = {}
    for p in plan:
        for cfg in p["configs"]:
            k = emit.render_sparse(p["shape"], batch, cfg)
            emitted[k.name] = k
    records = Compiler(jobs=jobs).compile({n: k.source for n, k in emitted.items()}, gpu.arch).records
    out = []
    for p in plan:
        cands = []
        for rank, cfg in enumerate(p["configs"]):
            name = cfg.name(p["shape"], batch)
            k, rec = emitted[name], records[name]
            probs = problems(rec)
            ev = evaluate_config(p["shape"], gpu, batch, level, cfg)
            cands.append({"kernel": name, "config": cfg.to_dict(), "model_choice": rank == 0,
                          "predicted_us": ev.get("predicted_us"), "cubin": rec["cubin"], "steps": k.steps,
                          "workspace": k.workspace, "weight_layout": k.weight_layout, "epilogue": k.epilogue,
                          "spills": "; ".join(probs) or None})
        out.append({"layer": p["layer"], "layers": p["layers"], "label": common.shape_label(p["shape"]),
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

    pool, _ = inputs.load_image_pool(net, images_dir, max(p["batch"] for p in plan), seed)
    with torch.inference_mode():
        _, z_all = inputs.forward(net, sd, pool.to(env.device), keep={p["layer"] for p in plan})
    timer = timing.Timer(env, reps, warmup)
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(pool.shape[0]) for _ in range(common.N_SETS)]
    from .kernels import workspace
    from .lower import to_layout
    results = []
    with torch.inference_mode():
        for p in plan:
            conv = next(c for c in net.convs if c.name == p["layer"])
            shape, z, B = conv.shape, z_all[p["layer"]], p["batch"]
            xs = [inputs.at_level(z[torch.as_tensor(q[:B].tolist(), device=z.device) % z.shape[0]], p["level"])
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
                ws = workspace(torch, c["workspace"], env.device)
                out.fill_(float("nan"))
                backend.sparse_conv(c["kernel"], c, xs[0], wk, out, ws, shape)
                err = float((torch.linalg.vector_norm((out - ref).double()) / torch.linalg.vector_norm(ref.double())).item())
                c["rel_err"] = err if np.isfinite(err) else None
                t = timer([lambda x=x: backend.sparse_conv(c["kernel"], c, x, wk, out, ws, shape) for x in xs])
                c["measured_us"] = common.stats(t)["median_us"]
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
