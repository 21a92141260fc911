"""`snn-run bench e2e`: whole-network time (and energy per image) of snn against the dense baselines a PyTorch
user would run instead (measure.baselines: eager, CUDA-graph replayed and torch.compile, each in FP32 with
TF32 off, TF32, FP16 and BF16), in one run, on the same images. snn runs once per sparsity profile
(measure.profiles: the biases feeding each ReLU shifted so each conv's input reaches its target on the
images); the baselines' time does not depend on the zeros, so they run once, on the first profile's weights.
Every number is the wall time of whole forward passes, the host included, as a user sees it."""
from __future__ import annotations

import statistics
import tempfile
import time

import numpy as np

from snn.codegen.spec import Network, load_spec

from .baselines import EXACT, Baselines, strongest
from .common import SCHEMA
from .inputs import load_caches, load_image_pool, load_weights
from .profiles import apply_profile
from .timing import Env, Nvml, event_median_s, kernel_sum, wall_times_ms

WHAT = ("wall time of one forward pass (host included, synchronised), median over reps; inputs rotate over "
        "3 sets of images. snn: the executor, per layer cuDNN FP32 or our kernels by the zero counter (exact "
        "FP32), as one CUDA graph with the decision taken on the device (copy in, replay, branches read back); "
        "snn_eager (with --no-graph): host dispatch. Baselines: measure.baselines (the network's PyTorch model, "
        "channels_last; eager, CUDA-graph replayed, torch.compile inductor+freezing+reduce-overhead; FP32 with "
        "TF32 off, TF32, FP16, BF16). dense_exec_fp32: snn's own executor with every conv on cuDNN FP32 (what "
        "the sparse dispatch buys; not a baseline). kernel_sum: GPU time of one snn graph replay's kernels "
        "(CUPTI) against the replay's own time (CUDA events).")


def _energy(env: Env, nv, fn, inputs, min_s: float = 0.5, min_reps: int = 5) -> dict | None:
    if nv is None or env.cpu:
        return None
    env.sync()
    e0, t0, n = nv.energy_mj(), time.perf_counter(), 0
    if e0 is None:
        return None
    while n < min_reps or time.perf_counter() - t0 < min_s:
        fn(inputs[n % len(inputs)])
        n += 1
    env.sync()
    e1, dt = nv.energy_mj(), time.perf_counter() - t0
    return {"runs": n, "seconds": round(dt, 4), "energy_mj": e1 - e0, "mean_power_w": round((e1 - e0) / 1e3 / dt, 2)}


def _rel_err(torch, y, ref) -> float:
    return float((torch.linalg.vector_norm((y.double() - ref.double())) / torch.linalg.vector_norm(ref.double())).item())


def _trace_rows(trace, targets: dict | None = None) -> list[dict]:
    return [{"name": t.name, "sparsity": None if t.sparsity is None else round(t.sparsity, 4),
             "target": (targets or {}).get(t.name), "path": t.path, "kernel": t.kernel,
             "ms_synced": None if t.ms is None else round(t.ms, 4)} for t in trace]


def _measure(env, nv, fn, xs, reps, warmup, B) -> dict:
    t = wall_times_ms(fn, xs, reps, warmup, env.sync)
    rec = {"median_ms": round(statistics.median(t), 4), "times_ms": [round(v, 4) for v in t]}
    e = _energy(env, nv, fn, xs)
    if e:
        e["mj_per_image"] = round(e["energy_mj"] / (e["runs"] * B), 3)
    rec["energy"] = e
    return rec


def _snn_run(env, net, sd_cpu, cache, sets, targets, graphs, reps, warmup, nv, B, dense_ref, profiled) -> dict:
    """snn on one profile's weights: the trace of set 0, the graph-replayed (or eager) time; its graph runner is
    appended to `profiled` for its CUPTI kernel sum (_kernel_sums), which runs after every time is taken."""
    from ..executor import Executor
    torch = env.torch
    snn = Executor(net, sd_cpu, env.backend(cache), cache, str(env.device), "auto")
    tracer = Executor(net, sd_cpu, env.backend(cache), cache, str(env.device), "auto", trace=True)
    y = tracer.forward(sets[0])
    rec: dict = {"layers": _trace_rows(tracer.last_trace, targets), "notes": {}}
    rec["rel_err_vs_fp64"] = _rel_err(torch, y, dense_ref)
    del tracer
    fn = snn.forward
    if graphs and not env.cpu:
        from ..cuda import Device
        from ..graph import GraphRunner
        try:
            runner = GraphRunner(snn, Device())
            y = runner(sets[0])  # captures for this batch size
            rec["rel_err_graph_vs_fp64"] = _rel_err(torch, y, dense_ref)
            rec["graph_trace"] = _trace_rows(snn.last_trace, targets)
            if runner.notes:
                rec["notes"]["dense_layers"] = list(runner.notes)
            rec["replay_ms"] = round(event_median_s(torch, runner.replayer(sets[0]), 30, warmup=1) * 1e3, 4)
            fn = runner
            profiled.append((rec, runner, sets[0]))
        except Exception as e:  # report it and time the eager path instead
            rec["notes"]["graph"] = f"graph path failed, eager timed: {type(e).__name__}: {str(e)[:300]}"
    rec.update(_measure(env, nv, fn, sets, reps, warmup, B))
    rec["how"] = "graph" if fn is not snn.forward else "eager"
    trace = rec.get("graph_trace") or rec["layers"]
    sp = [r["sparsity"] for r in trace if r["sparsity"] is not None]
    rec["mean_conv_input_sparsity"] = round(float(np.mean(sp)), 4) if sp else None
    rec["sparse_layers"] = sum(1 for r in trace if r["path"] == "sparse")
    rec["convs"] = len(trace)
    return rec


def _kernel_sums(torch, profiled) -> None:
    """Each graph's CUPTI kernel sum into its run's record, once every time of the bench has been taken: CUPTI
    stays attached to the process after torch.profiler ends (kineto does not tear it down), and a launch costs
    more from then on, so a time taken after it would carry that (ResNet-152's two graphs at batch 1 launched from
    an idle GPU in 0.017 ms without CUPTI, docs/results/fusion/h200/call/call_probe.log, and in 0.04-0.10 ms after
    it, .../priorities/). The runners stay alive until then."""
    for rec, runner, x in profiled:
        ks = rec["kernel_sum"] = kernel_sum(torch, runner.replayer(x))
        ks["replay_ms"] = rec.pop("replay_ms")
        if "kernel_sum_ms" in ks:
            ks["replay_over_kernel_sum"] = round(ks["replay_ms"] / ks["kernel_sum_ms"], 4)
        if "activities_per_call" in ks:
            ks["activities_per_conv"] = round(ks["activities_per_call"] / rec["convs"], 3)


def bench_e2e(spec: str, cache_dir: str, gpu: str, batches: list[int], images_dir: str | None,
              weights_arg: str | None = None, seed: int = 0, profiles: list | None = None,
              precisions=("fp32", "tf32", "fp16", "bf16"), kinds=("eager", "graph", "compile"),
              reps: int = 20, warmup: int = 3, graphs: bool = True, energy: bool = True,
              cpu_dry_run: bool = False, log=print, checkpoint=None, snn_precisions=("bf16", "fp16")) -> dict:
    """profiles: measure.profiles.Profile list (none: the weights' own sparsity, one run labelled 'weights').
    snn_precisions: snn's 16-bit precisions also timed (every conv dense on the tensor cores, fused), on the
    first profile's weights, against the baselines of the same precision: error against float64 and top-5."""
    from ..executor import Executor, reference
    net: Network = load_spec(spec)
    env = Env(cpu_dry_run)
    torch = env.torch
    mpath, caches = load_caches(env, net, spec, cache_dir, gpu, batches)
    sd, warning = load_weights(env, net, weights_arg, seed)
    pool, pool_info = load_image_pool(net, images_dir, max(batches), seed)
    pool = pool.to(env.device)
    runs_on: dict[str, dict] = {}  # profile label -> state dict (CPU) and its report
    prof_docs = []
    with torch.no_grad():
        for p in profiles or [None]:
            if p is None:
                runs_on["weights"] = {"sd": sd, "targets": {}}
                prof_docs.append({"name": "weights", "description": "the weights' own sparsity on the images"})
                continue
            sd_p, report = apply_profile(net, sd, pool, p)
            runs_on[p.name] = {"sd": sd_p, "targets": {r["conv"]: r["target"] for r in report}}
            dev = [abs(r["realized"] - r["target"]) for r in report
                   if r.get("realized") is not None and not r.get("pooled")]
            prof_docs.append({"name": p.name, "description": p.description, "path": p.path, "per_conv": report,
                              "max_abs_realized_minus_target": round(max(dev), 4) if dev else None})
            log(f"profile {p.name}: {len(report)} convs targeted, realized within {max(dev, default=0):.3f} of target")
    first = prof_docs[0]["name"]
    nv = Nvml.open() if energy and not env.cpu else None
    doc = {"schema": SCHEMA, "kind": "e2e", "network": net.name, "spec": spec, "manifest": str(mpath),
           "environment": env.info(), "weights": weights_arg or "random (seeded, BN calibrated)",
           "weights_warning": warning, "images": pool_info, "batches": batches,
           "profiles": prof_docs, "baselines_on_profile": first,
           "profile_note": ("sparsity SET by shifting the folded-BN (or conv) bias feeding each ReLU so that each conv's "
                            "input reaches the profile's target on the images above; per conv: target, realized on the "
                            "images, and what snn's zero counter measured on the GPU") if profiles else None,
           "precisions": list(precisions), "baseline_kinds": list(kinds),
           "timing": {"reps": reps, "warmup": warmup, "what": WHAT},
           "energy_available": nv is not None, "complete": False, "runs": {}}
    rng = np.random.default_rng(seed)
    bundles16: dict = {}   # precision -> its 16-bit bundle's cache, built on first use into `tmp`
    profiled: list = []    # (snn run's record, its graph runner, its input): their CUPTI sums come last
    with torch.no_grad(), tempfile.TemporaryDirectory(prefix="snn-bench16-") as tmp:
        for B in batches:
            cache = caches[B]
            sets = [pool[torch.as_tensor(rng.permutation(pool.shape[0])[:B].tolist(), device=env.device)
                         % pool.shape[0]] for _ in range(3)]
            rec: dict = {"baselines": {}, "snn": {}, "notes": {}}
            sd0 = runs_on[first]["sd"]
            ref0 = reference(net, sd0, sets[0], dtype=torch.float64)
            base = Baselines(env, net, sd0, precisions, kinds, log)
            rec["baseline_model"] = base.source
            top5: dict[str, object] = {}   # the eager model's top-5 in each precision, for snn's 16-bit runs
            for n, meta, fn, xs in base.variants(sets):
                try:
                    y = fn(xs[0])
                    meta["rel_err_vs_fp64"] = _rel_err(torch, y.float(), ref0)
                    if meta["kind"] == "eager":
                        top5[meta["precision"]] = y.float().topk(5, dim=1).indices
                    rec["baselines"][n] = meta | _measure(env, nv, fn, xs, reps, warmup, B)
                except Exception as e:  # timing a variant failed: say so, go on
                    base.notes[n] = f"failed while timing: {type(e).__name__}: {str(e)[:300]}"
            rec["notes"].update(base.notes)
            del base
            sd0_cpu = {k: v.detach().cpu() for k, v in sd0.items()}   # the dense and 16-bit runs' weights
            dense = Executor(net, sd0_cpu, env.backend(cache), cache, str(env.device), "dense")
            rec["dense_exec_fp32"] = _dense_exec(env, dense, sets, graphs, reps, warmup, B)
            del dense
            if not env.cpu:  # cuDNN's fused calls need the GPU
                rec["snn16"] = {}
                for p in snn_precisions:
                    try:
                        if p not in bundles16:
                            bundles16[p] = _bundle16(spec, cache, batches, p, tmp)
                        rec["snn16"][p] = _snn16_run(env, net, sd0_cpu, bundles16[p], sets, graphs, reps, warmup, nv, B,
                                                     ref0, rec["baselines"], top5.get(p), p)
                    except Exception as e:  # said, like a baseline that cannot run
                        rec["notes"][f"snn_{p}"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
            for label, r in runs_on.items():
                sd_cpu = sd0_cpu if label == first else {k: v.detach().cpu() for k, v in r["sd"].items()}
                ref = ref0 if label == first else reference(net, r["sd"], sets[0], dtype=torch.float64)
                rec["snn"][label] = _snn_run(env, net, sd_cpu, cache, sets, r["targets"], graphs, reps, warmup,
                                             nv, B, ref, profiled)
                if not env.cpu:
                    torch.cuda.empty_cache()
            rec["strongest"] = {"same_precision": strongest(rec["baselines"], EXACT)[0],
                                "overall": strongest(rec["baselines"])[0]}
            rec["speedup"] = {label: {k: (round(rec["baselines"][b]["median_ms"] / s["median_ms"], 4) if b else None)
                                      for k, b in rec["strongest"].items()} for label, s in rec["snn"].items()}
            doc["runs"][str(B)] = rec
            log(f"{net.name} b{B}: " + "; ".join(
                f"snn[{label}] {s['median_ms']:.3f} ms ({s['sparse_layers']}/{s['convs']} sparse)"
                for label, s in rec["snn"].items()) + "; " + ", ".join(
                f"{k} {v['median_ms']:.3f}" for k, v in rec["baselines"].items())
                + f"; strongest FP32 {rec['strongest']['same_precision']}, overall {rec['strongest']['overall']}"
                + "".join(f"; snn {p} {s['median_ms']:.3f} ms (x{s['speedup_vs_same_precision']} vs "
                          f"{s['strongest_same_precision']})" for p, s in rec.get("snn16", {}).items()))
            del sets
            if not env.cpu:
                torch.cuda.empty_cache()
            if checkpoint:
                checkpoint(doc)
        _kernel_sums(torch, profiled)
    doc["complete"] = True
    return doc


def _bundle16(spec: str, cache, batches: list[int], precision: str, out: str):
    """The 16-bit bundle of the fp32 bundle's spec, GPU and batches, built into `out` (nvcc compiles its epilogue,
    max-pool and tensor-core kernels) and loaded as snn.load would: what the 16-bit runs time."""
    from snn.codegen.build import build_spec
    from .. import manifest
    r = build_spec(spec, cache.gpu, batches, out=out, precision=precision)
    return manifest.load(r.manifest_path, load_spec(cache.spec_path), cache.spec_path, max(batches),
                         tuple(r.manifest["compute_capability"]), precision=precision)


def _snn16_run(env, net, sd_cpu, cache16, sets, graphs, reps, warmup, nv, B, ref, baselines, top5, precision) -> dict:
    """snn in 16 bits (every conv on the tensor cores, the bundle's kernel or cuDNN's whichever measured faster,
    bias / residual / ReLU fused, the bundle's epilogue kernel for what neither fuses): its time, its error against
    float64 next to the baselines' of the same precision, its top-5 against the eager model's. The run snn.load
    makes of a 16-bit bundle (cache16)."""
    from .. import tensorcore
    from ..executor import Executor
    from ..kernels import CudaBackend
    torch = env.torch
    ex = Executor(net, sd_cpu, CudaBackend(env.dev, cache16), cache16, str(env.device), "dense", precision=precision)
    tcc = tensorcore.attach(ex, env.dev, [B])   # as snn.load: per layer the faster of cuDNN and the bundle's kernels
    fn, how = _runner(env, ex, sets, graphs)
    rec = _measure(env, nv, fn, sets, reps, warmup, B)
    rec["how"] = how
    rec["tensorcore_convs"] = sum(k is not None for k in tcc.choice.values()) if tcc else 0
    y = fn(sets[0]).float()
    rec["rel_err_vs_fp64"] = _rel_err(torch, y, ref)
    same = {k: v for k, v in baselines.items() if v.get("precision") == precision}
    eager = next((v for v in same.values() if v.get("kind") == "eager"), None)
    if eager and eager.get("rel_err_vs_fp64"):
        rec["rel_err_over_eager"] = round(rec["rel_err_vs_fp64"] / eager["rel_err_vs_fp64"], 4)
    if top5 is not None:
        mine = y.topk(5, dim=1).indices
        rec["top5_identical_to_eager"] = round(float((mine == top5).all(dim=1).float().mean().item()), 4)
    name, ms = strongest(baselines, precision)
    rec["strongest_same_precision"] = name
    rec["speedup_vs_same_precision"] = round(ms / rec["median_ms"], 4) if ms else None
    name, ms = strongest(baselines)
    rec["speedup_vs_strongest"] = round(ms / rec["median_ms"], 4) if ms else None
    return rec


def _runner(env, ex, sets, graphs):
    """(the executor as one CUDA graph, or eager where that fails or is off; how it runs)."""
    fn, how = ex.forward, "eager"
    if graphs and not env.cpu:
        from ..cuda import Device
        from ..graph import GraphRunner
        try:
            fn, how = GraphRunner(ex, Device()), "graph"
            fn(sets[0])
        except Exception as e:
            fn, how = ex.forward, f"eager (graph failed: {type(e).__name__})"
    return fn, how


def _dense_exec(env, dense, sets, graphs, reps, warmup, B) -> dict:
    fn, how = _runner(env, dense, sets, graphs)
    rec = _measure(env, None, fn, sets, reps, warmup, B)
    rec["how"] = how
    return rec
