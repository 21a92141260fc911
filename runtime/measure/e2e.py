"""`snn-run bench e2e`: whole-network time (and energy per image) of snn against the dense network on cuDNN,
FP32 and TF32, eager and CUDA-graph replayed: torchvision's model where it has one, and our executor with
every conv dense. Wall time of whole forward passes, the host included, as a user sees it; optionally
with a sparsity profile (measure.profiles) set on the weights."""
from __future__ import annotations

import statistics
import time

import numpy as np

from snn.codegen.spec import Network, load_spec

from .common import SCHEMA
from .inputs import load_caches, load_image_pool, load_weights
from .profiles import apply_profile
from .timing import Env, Nvml, event_median_s, kernel_sum


def _torchvision_model(env: Env, net: Network, sd: dict):
    try:
        import torchvision
        model = torchvision.models.get_model(net.name, weights=None)
    except Exception as e:
        return None, f"torchvision has no model '{net.name}' ({type(e).__name__})"
    missing, unexpected = model.load_state_dict({k: v.cpu() for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        return None, f"torchvision's {net.name} does not match the spec ({(missing + unexpected)[:3]})"
    return model.eval().to(env.device).to(memory_format=env.torch.channels_last), None


def _time_forward(env: Env, fn, inputs, reps, warmup) -> list[float]:
    """Wall time of whole forward passes (ms): the host's part counts, as it does for a user."""
    for i in range(warmup):
        fn(inputs[i % len(inputs)])
    env.sync()
    out = []
    for i in range(reps):
        x = inputs[i % len(inputs)]
        env.sync()
        t = time.perf_counter()
        fn(x)
        env.sync()
        out.append((time.perf_counter() - t) * 1e3)
    return out


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


def _graphed(env: Env, model, example):
    torch = env.torch
    static_x = example.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = model(static_x)

    def run(x):
        static_x.copy_(x)
        g.replay()
        return static_y
    return run


def _rel_err(torch, y, ref) -> float:
    return float((torch.linalg.vector_norm((y - ref).double()) / torch.linalg.vector_norm(ref.double())).item())


def _trace_rows(trace) -> list[dict]:
    return [{"name": t.name, "sparsity": None if t.sparsity is None else round(t.sparsity, 4),
             "path": t.path, "kernel": t.kernel, "ms_synced": None if t.ms is None else round(t.ms, 4)}
            for t in trace]


def _replay_ms(env: Env, replay, reps: int = 30) -> float:
    """Median GPU time of one graph replay (CUDA events), the number kernel_sum is compared with."""
    return round(event_median_s(env.torch, replay, reps, warmup=1) * 1e3, 4)


def bench_e2e(spec: str, cache_dir: str, gpu: str, batches: list[int], images_dir: str | None,
              weights_arg: str | None = None, seed: int = 0, profile: list[float] | None = None,
              reps: int = 20, warmup: int = 3, graphs: bool = True, energy: bool = True,
              cpu_dry_run: bool = False, log=print, checkpoint=None) -> dict:
    from ..executor import Executor
    net = load_spec(spec)
    env = Env(cpu_dry_run)
    torch = env.torch
    mpath, caches = load_caches(env, net, spec, cache_dir, gpu, batches)
    sd, warning = load_weights(env, net, weights_arg, seed)
    pool, pool_info = load_image_pool(net, images_dir, max(batches), seed)
    pool = pool.to(env.device)
    prof_report = None
    if profile:
        sd, prof_report = apply_profile(net, sd, pool, profile)
    sd_cpu = {k: v.detach().cpu() for k, v in sd.items()}
    nv = Nvml.open() if energy and not env.cpu else None
    doc = {"schema": SCHEMA, "kind": "e2e", "network": net.name, "spec": spec, "manifest": str(mpath),
           "environment": env.info(), "weights": weights_arg or "random (seeded, BN calibrated)",
           "weights_warning": warning, "images": pool_info,
           "sparsity_profile": profile, "sparsity_profile_note": (
               "folded-BN biases shifted so that each ReLU feeding a conv reaches the target sparsity on "
               "the images above: sparsity is SET, not that of trained weights") if profile else None,
           "profile_report": prof_report, "batches": batches,
           "timing": {"reps": reps, "warmup": warmup, "what": (
               "wall time of one forward pass (host included, synchronised), median over reps; inputs "
               "rotate over sets of images. snn: the executor, per layer cuDNN or our kernels by the zero "
               "counter (FP32 exact), as one CUDA graph with the decision taken on the device (runtime/graph.py; "
               "copy in, replay, branches read back), or eager with host dispatch when graphs are off; "
               "snn_eager: the eager path. dense_exec_fp32(_graph): the same executor with every conv on cuDNN "
               "(FP32), eager (graph-replayed). torchvision_*: torchvision's model, channels_last, eager or "
               "CUDA-graph replay. kernel_sum: GPU time of one snn graph replay's kernels (CUPTI) against the "
               "replay's own time (CUDA events).")},
           "energy_available": nv is not None, "complete": False, "runs": {}}
    rng = np.random.default_rng(seed)
    for B in batches:
        cache = caches[B]
        sets = [pool[torch.as_tensor(rng.permutation(pool.shape[0])[:B].tolist(), device=env.device)
                     % pool.shape[0]] for _ in range(3)]
        # the executor folds BN from a CPU state_dict (as weights.load returns it): device tensors
        # there meet its CPU zeros for bias-free convs
        snn = Executor(net, sd_cpu, env.backend(cache), cache, str(env.device), "auto")
        dense = Executor(net, sd_cpu, env.backend(cache), cache, str(env.device), "dense")
        tv, why = _torchvision_model(env, net, sd)
        tv_sets = [x.contiguous(memory_format=torch.channels_last) for x in sets]
        rec: dict = {"times_ms": {}, "energy": {}, "notes": {}}
        with torch.inference_mode():
            tracer = Executor(net, sd_cpu, env.backend(cache), cache, str(env.device), "auto", trace=True)
            y_snn = tracer.forward(sets[0])
            rec["layers"] = _trace_rows(tracer.last_trace)
            y_dense = dense.forward(sets[0])
            rec["rel_err_snn_vs_dense"] = _rel_err(torch, y_snn, y_dense)
            del tracer
            plan = [("snn", snn.forward, sets, False), ("dense_exec_fp32", dense.forward, sets, False)]
            if graphs and not env.cpu:
                # snn is the whole forward as one CUDA graph with device-side dispatch; the eager
                # path (host dispatch) and the dense executor graphed are kept beside it
                plan = [("snn_eager", snn.forward, sets, False), ("dense_exec_fp32", dense.forward, sets, False)]
                from ..cuda import Device
                from ..graph import GraphRunner
                for name, ex in (("snn", snn), ("dense_exec_fp32_graph", dense)):
                    try:
                        runner = GraphRunner(ex, Device())
                        y_graph = runner(sets[0])  # captures for this batch size
                        plan.insert(0 if name == "snn" else len(plan), (name, runner, sets, False))
                        if runner.notes:
                            rec["notes"][name + "_dense_layers"] = list(runner.notes)
                        if name == "snn":
                            rec["rel_err_snn_graph_vs_dense"] = _rel_err(torch, y_graph, dense.forward(sets[0]))
                            rec["graph_trace"] = _trace_rows(snn.last_trace)
                            replay = runner.replayer(sets[0])
                            rec["kernel_sum"] = kernel_sum(torch, replay)
                            rec["kernel_sum"]["replay_ms"] = _replay_ms(env, replay)
                            if "kernel_sum_ms" in rec["kernel_sum"]:
                                rec["kernel_sum"]["replay_over_kernel_sum"] = round(
                                    rec["kernel_sum"]["replay_ms"] / rec["kernel_sum"]["kernel_sum_ms"], 4)
                    except Exception as e:  # report it and time the rest; the eager path still answers
                        rec["notes"][name] = f"graph path failed: {type(e).__name__}: {str(e)[:300]}"
                        if name == "snn":
                            plan.insert(0, ("snn", snn.forward, sets, False))
            if tv is not None:
                plan += [("torchvision_fp32", tv, tv_sets, False), ("torchvision_tf32", tv, tv_sets, True)]
                if graphs and not env.cpu:
                    for name, tf32 in (("torchvision_fp32_graph", False), ("torchvision_tf32_graph", True)):
                        env.set_tf32(tf32)
                        try:
                            plan.append((name, _graphed(env, tv, tv_sets[0]), tv_sets, tf32))
                        except Exception as e:  # capture can fail on odd builds; say so, go on
                            rec["notes"][name] = f"graph capture failed: {type(e).__name__}: {str(e)[:200]}"
                        env.set_tf32(False)
            else:
                rec["notes"]["torchvision"] = why
            for name, fn, xs, tf32 in plan:
                env.set_tf32(tf32)
                t = _time_forward(env, fn, xs, reps, warmup)
                rec["times_ms"][name] = {"median_ms": round(statistics.median(t), 4),
                                         "times_ms": [round(v, 4) for v in t]}
                e = _energy(env, nv, fn, xs)
                if e:
                    e["mj_per_image"] = round(e["energy_mj"] / (e["runs"] * B), 3)
                rec["energy"][name] = e
                env.set_tf32(False)
        base = rec["times_ms"]["snn"]["median_ms"]
        rec["speedup_snn_over"] = {k: round(v["median_ms"] / base, 4) for k, v in rec["times_ms"].items() if k != "snn"}
        if rec["energy"].get("snn"):
            rec["energy_ratio_over_snn"] = {k: round(v["mj_per_image"] / rec["energy"]["snn"]["mj_per_image"], 4)
                                            for k, v in rec["energy"].items() if v and k != "snn"}
        sp = [l["sparsity"] for l in rec["layers"] if l["sparsity"] is not None]
        rec["mean_conv_input_sparsity"] = round(float(np.mean(sp)), 4) if sp else None
        rec["sparse_layers"] = sum(1 for l in rec["layers"] if l["path"] == "sparse")
        doc["runs"][str(B)] = rec
        log(f"{net.name} b{B}: snn {base:.3f} ms; " + ", ".join(
            f"{k} {v['median_ms']:.3f} ms" for k, v in rec["times_ms"].items() if k != "snn")
            + f"; {rec['sparse_layers']}/{len(rec['layers'])} convs sparse, mean input sparsity "
            f"{rec['mean_conv_input_sparsity']}")
        del snn, dense, sets, tv_sets
        if not env.cpu:
            torch.cuda.empty_cache()
        if checkpoint:
            checkpoint(doc)
    doc["complete"] = True
    return doc
