"""`snn-run bench layers`: the sparse path of each distinct conv shape against cuDNN, timed per docs/bench.md.

What is in each number (the same in the JSON, the plots and the summary):
- `sparse`: every step the manifest lists for the layer's kernel (the dense->compact conversion is fused
  into the conv kernel), with what the network runs after the conv: bias + ReLU + zero count, fused into
  the kernel's store (a kernel that does not fuse it: one `snn_epilogue` launch after it).
- `dense_fp32` / `dense_tf32` / `dense_fp16` / `dense_bf16`: one cuDNN convolution (`F.conv2d`, no bias),
  `cudnn.benchmark=True`, NHWC, in FP32 with TF32 off, TF32, and with weights and input cast to FP16 and
  BF16 (tensor cores); with `nchw`, also NCHW, and the best of the two formats is the baseline.
- `dense_fp32_nhwc_epilogue`: cuDNN FP32 NHWC and then that epilogue (one `snn_epilogue` launch in place):
  the executor's dense path, which calibrate weighs against `sparse`.
- `epilogue`: the `snn_epilogue` launch alone, bias + ReLU in place on the conv output (`epilogue_count`:
  the same, also counting zeros).
Timing: measure.timing (CUDA events, an L2 flush before each run, median of `reps` runs, rotating input
sets). Inputs: measure.inputs (each layer's real pre-activation on photos, thresholded to the level).
measure_layer and measure_epilogue time one layer; calibrate uses measure_layer too.
"""
from __future__ import annotations

import math

import numpy as np

from snn.codegen.spec import load_spec

from ..errors import RunError
from .common import N_SETS, SCHEMA, distinct_shapes, level_key, sample_groups, shape_label, stats
from .inputs import at_level, forward, load_caches, load_image_pool, load_weights, relu_sources
from .timing import Env, Timer


def measure_layer(env: Env, timer: Timer, backend, cache, kernel: str, shape, weight, sets, nchw: bool,
                  check: bool = True, dense: bool = True, precisions=("fp32", "tf32")) -> dict:
    """Time the sparse kernel and cuDNN (in `precisions` of fp32, tf32, fp16, bf16; NHWC, and NCHW if asked;
    none if not `dense`) on the same input sets."""
    from ..executor import Epilogue
    from ..kernels import workspace
    from ..lower import to_layout
    torch = env.torch
    F = torch.nn.functional
    cl = torch.channels_last
    B = sets[0].shape[0]
    kentry = cache.kernel(kernel)
    wk = to_layout(weight, kentry.get("weight_layout", "NCRS"))
    ws = workspace(torch, kentry.get("workspace"), env.device)
    out = torch.empty((B, shape.N, shape.P, shape.Q), device=env.device, memory_format=cl)
    rec: dict = {"kernel": kernel}
    if check:  # poisoned output, then sparse vs cuDNN FP32 on set 0: a wrong kernel is not timed silently
        out.fill_(float("nan"))
        backend.sparse_conv(kernel, kentry, sets[0], wk, out, ws, shape)
        ref = F.conv2d(sets[0], weight, None, shape.stride, shape.padding)
        env.sync()
        err = float((torch.linalg.vector_norm((out - ref).double()) /
                     torch.linalg.vector_norm(ref.double()).clamp_min(1e-30)).item())
        rec["rel_err_vs_cudnn_fp32"] = err if math.isfinite(err) else None
        rec["nan_in_output"] = bool(torch.isnan(out).any().item())
    times, hosts = {}, {}

    def run(name, fns, tf32=False):
        env.set_tf32(tf32)
        times[name] = timer(fns)
        hosts[name] = dict(timer.last)  # host enqueue cost and the sleep that hid it
        env.set_tf32(False)

    bias = torch.randn(shape.N, device=env.device) * 0.01
    counters = torch.zeros(1, dtype=torch.int64, device=env.device)
    epi = Epilogue(bias, None, True, counters, 0)

    def dense_epilogue(x, w):
        y = F.conv2d(x, w, None, shape.stride, shape.padding)
        backend.epilogue(y, None, bias, None, y, counters, 0, True)

    run("sparse", [lambda x=x: backend.sparse_conv(kernel, kentry, x, wk, out, ws, shape, epi) for x in sets])
    if dense:
        wcl, xs = weight.contiguous(memory_format=cl), [x.contiguous(memory_format=cl) for x in sets]
        run("dense_fp32_nhwc_epilogue", [lambda x=x: dense_epilogue(x, wcl) for x in xs])
        del xs
    for p in precisions if dense else ():
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(p, torch.float32)
        for fmt in ("nhwc", "nchw") if nchw else ("nhwc",):
            mf = cl if fmt == "nhwc" else torch.contiguous_format
            w = weight.to(dt).contiguous(memory_format=mf)
            xs = [x.to(dt).contiguous(memory_format=mf) for x in sets]
            run(f"dense_{p}_{fmt}", [lambda x=x, w=w: F.conv2d(x, w, None, shape.stride, shape.padding) for x in xs],
                p == "tf32")
            del xs
    rec["times"] = {k: stats(v) for k, v in times.items()}
    rec["host"] = hosts
    return rec


def measure_epilogue(env: Env, timer: Timer, backend, shape, B) -> dict:
    torch = env.torch
    out = torch.rand((B, shape.N, shape.P, shape.Q), device=env.device).contiguous(memory_format=torch.channels_last)
    bias = torch.randn(shape.N, device=env.device) * 0.01
    counters = torch.zeros(1, dtype=torch.int64, device=env.device)
    res = {"epilogue": timer([lambda: backend.epilogue(out, None, bias, None, out, None, None, True)]),
           "epilogue_count": timer([lambda: backend.epilogue(out, None, bias, None, out, counters, 0, True)])}
    return {k: stats(v) for k, v in res.items()}


def derive_layer(rec: dict) -> dict:
    """Best-of-format baselines and speedups from one level record's medians."""
    t = {k: v["median_us"] for k, v in rec["times"].items()}
    d = {"sparse_us": t["sparse"]}
    for p in ("fp32", "tf32", "fp16", "bf16"):
        ts = [v for k, v in t.items() if k.startswith(f"dense_{p}_")]
        if ts:
            d[f"dense_{p}_us"] = min(ts)
            d[f"speedup_{p}"] = round(d[f"dense_{p}_us"] / d["sparse_us"], 4)
    return d


def useful_tflops(macs: int, sparsity: float, us: float) -> float:
    """Non-zero work only: 2 FLOPs per multiply-accumulate whose input is not zero."""
    return round(2 * macs * (1.0 - sparsity) / us / 1e6, 3)


def bench_layers(spec: str, cache_dir: str, gpu: str, batches: list[int], levels: list[float],
                 images_dir: str | None, weights_arg: str | None = None, seed: int = 0, reps: int = 30,
                 warmup: int = 5, nchw: bool = True, max_shapes: int | None = None, only=(),
                 bar=None, cpu_dry_run: bool = False, log=print, checkpoint=None) -> dict:
    """bar(total) -> a context manager with .update(n) (click.progressbar), or None; checkpoint(doc)
    is called after every shape with the document so far (`complete` false until the end)."""
    import contextlib
    net = load_spec(spec)
    env = Env(cpu_dry_run)
    torch = env.torch
    mpath, caches = load_caches(env, net, spec, cache_dir, gpu, batches)
    c0 = caches[batches[0]]
    sources = relu_sources(net)
    names = [c.name for c in net.convs if c.name in c0.layers and c.name in sources
             and (not only or c.name in only)]
    unknown = set(only) - {c.name for c in net.convs}
    if unknown:
        raise RunError(f"--layer {sorted(unknown)[0]}: {spec} has no conv layer of that name")
    groups = sample_groups(distinct_shapes(net, names), max_shapes)
    sd, warning = load_weights(env, net, weights_arg, seed)
    pool, pool_info = load_image_pool(net, images_dir, max(batches), seed)
    with torch.inference_mode():
        _, z_all = forward(net, sd, pool.to(env.device), keep={g["layers"][0] for g in groups})
    timer = Timer(env, reps, warmup)
    doc = {"schema": SCHEMA, "kind": "layers", "network": net.name, "spec": spec, "manifest": str(mpath),
           "environment": env.info(), "weights": weights_arg or "random (seeded, BN calibrated)",
           "weights_warning": warning, "images": pool_info, "batches": batches, "levels": levels,
           "timing": {"reps": reps, "warmup": warmup, "input_sets": N_SETS, "l2_flush_bytes": 2 * env.l2_bytes(),
                      "what": __doc__.split("What is in each number")[1].split("Timing:")[0].strip()},
           "fp32_peak_tflops": env.fp32_peak_tflops(), "complete": False, "shapes": []}
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(pool.shape[0]) for _ in range(N_SETS)]
    with (bar(len(groups) * len(batches) * len(levels)) if bar else contextlib.nullcontext()) as progress, \
            torch.inference_mode():
        for g in groups:
            _bench_group(env, net, sd, timer, caches, batches, levels, g, z_all, perms, nchw, doc,
                         progress.update if progress else None, log)
            if checkpoint:
                checkpoint(doc)
    doc["complete"] = True
    return doc


def _bench_group(env, net, sd, timer, caches, batches, levels, g, z_all, perms, nchw, doc, progress, log):
    from .. import dispatch
    torch = env.torch
    rep = g["layers"][0]
    conv = next(c for c in net.convs if c.name == rep)
    shape = conv.shape
    z = z_all.pop(rep)
    weight = sd[f"{conv.param}.weight"].float().contiguous()
    entry = {"label": shape_label(shape), "tag": shape.tag(), "layers": g["layers"], "count": len(g["layers"]),
             "macs": shape.macs, "shape": {k: getattr(shape, k) for k in ("C", "N", "H", "W", "R", "S", "P", "Q")}
             | {"stride": list(shape.stride), "padding": list(shape.padding)}, "batches": {}}
    for B in batches:
        cache = caches[B]
        backend = env.backend(cache)
        le = cache.layer_entry(rep, B)
        sets = [z[torch.as_tensor(p[:B].tolist(), device=z.device) % z.shape[0]] for p in perms]
        bent = {"epilogue": measure_epilogue(env, timer, backend, shape, B), "levels": {}}
        for level in levels:
            kernel = dispatch.choose(le, level, "sparse")
            xs = [at_level(s, level) for s in sets]
            rec = measure_layer(env, timer, backend, cache, kernel, shape, weight, xs, nchw,
                                precisions=("fp32", "tf32", "fp16", "bf16"))
            rec["sparsity"] = [round(float((x == 0).float().mean().item()), 4) for x in xs]
            rec.update(derive_layer(rec))
            rec["useful_tflops"] = useful_tflops(shape.macs * B, float(np.mean(rec["sparsity"])), rec["sparse_us"])
            bent["levels"][level_key(level)] = rec
            del xs
            if progress:
                progress(1)
        entry["batches"][str(B)] = bent
        del sets
        if not env.cpu:
            torch.cuda.empty_cache()
    doc["shapes"].append(entry)
    log(f"{net.name} {entry['label']}: " + ", ".join(
        f"b{B} " + "/".join(f"{e['levels'][level_key(lv)]['speedup_fp32']:.2f}" for lv in levels)
        for B, e in ((B, entry["batches"][str(B)]) for B in batches)) + " (speedup vs cuDNN FP32 per level)")

