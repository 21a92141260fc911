"""Does a dense candidate's time alone (calibrate's Timer, from the bundle's tuning file) or its time back to back
in a small CUDA graph (ten calls, timing.graph_call_s, a ReLU'd random input) rank the candidates as the network's
own graph does? Per conv shape with two or more sparsity-free candidates, each candidate is made the static kernel
of every layer of the shape and the network (trained-like profile, the photos) replayed: median of 40.

    python3 probe.py NET BATCH PHOTO_DIR OUT.json      (run.sh probe: after `snn-run calibrate`)
"""
import json
import os
import sys
import time

from snn.codegen.spec import load_spec
from snn.runtime import tuning
from snn.runtime.calibrate import sparsity_free
from snn.runtime.cuda import Device
from snn.runtime.executor import Epilogue, Executor
from snn.runtime.graph import GraphRunner
from snn.runtime.kernels import workspace
from snn.runtime.lower import to_layout
from snn.runtime.measure import common
from snn.runtime.measure.inputs import load_caches, load_image_pool, load_weights
from snn.runtime.measure.profiles import apply_profile, resolve_profile
from snn.runtime.measure.timing import Env, event_median_s, graph_call_s

net_name, B, photos, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t0 = time.time()
env = Env(False)
torch = env.torch
net = load_spec(net_name)
_, caches = load_caches(env, net, net_name, "generated", os.environ.get("GPU", "h100"), [B])
cache = caches[B]
data = cache.data
meas = json.load(open(f"generated/{net_name}/h100/tuning.json"))["measurements"]
sd, _ = load_weights(env, net, None, 0)
pool, _ = load_image_pool(net, photos, B, 0)
pool = pool.to(env.device)
profile = resolve_profile("trained", net)
dev = Device()
backend = env.backend(cache)


def replay_ms(override):
    saved = {}
    for name, k in override.items():
        e = cache.layer_entry(name, B)
        saved[name] = e.get("static_kernel")
        e["static_kernel"] = k
    try:
        ex = Executor(net, sd_p, env.backend(cache), cache, str(env.device), "auto")
        runner = GraphRunner(ex, dev)
        runner(x)
        rp = runner.replayer(x)
        ms = event_median_s(torch, rp, 40, warmup=5) * 1e3
        trace = [(t.name, t.path, getattr(t, "kernel", None)) for t in ex.last_trace]
        del rp, runner, ex
    finally:
        for name, k in saved.items():
            e = cache.layer_entry(name, B)
            if k is None:
                e.pop("static_kernel", None)
            else:
                e["static_kernel"] = k
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return ms, trace


with torch.no_grad():
    sd_p, _ = apply_profile(net, sd, pool, profile)
    sd_p = {k: v.detach().cpu() for k, v in sd_p.items()}
    x = pool[:B].contiguous()
    base = [replay_ms({})[0]]
    _, base_trace = replay_ms({})
    groups = common.distinct_shapes(net, [c.name for c in net.convs if cache.layer_entry(c.name, B)])
    groups.sort(key=lambda g: -len(g["layers"]))
    rows = []
    for g in groups:
        rep = g["layers"][0]
        conv = next(c for c in net.convs if c.name == rep)
        shape = conv.shape
        entry = cache.layer_entry(rep, B)
        names = []
        for lk, ch in entry["levels"].items():
            for c in ch.get("candidates", []) or [{"kernel": ch["kernel"]}]:
                if c["kernel"] not in names and sparsity_free(cache.kernel(c["kernel"])):
                    names.append(c["kernel"])
        if len(names) < 2:
            continue
        iso = {}
        for n in names:
            for lk in entry["levels"]:
                m = meas.get(tuning.kernel_key(data, shape.tag(), B, float(lk), n))
                if m and m.get("sparse_us"):
                    iso[n] = m["sparse_us"]
                    iso_dense = m.get("dense_us")
        weight = sd_p[f"{conv.param}.weight"].float().contiguous().to(env.device)
        xin = torch.relu(torch.randn(B, shape.C, shape.H, shape.W, device=env.device)).contiguous(
            memory_format=torch.channels_last)
        out = torch.empty((B, shape.N, shape.P, shape.Q), device=env.device, memory_format=torch.channels_last)
        bias = torch.randn(shape.N, device=env.device) * 0.01
        counters = torch.zeros(1, dtype=torch.int64, device=env.device)
        epi = Epilogue(bias, None, True, counters, 0)
        b2b = {}
        for n in names:
            ke = cache.kernel(n)
            wk = to_layout(weight, ke.get("weight_layout", "NCRS"))
            ws = workspace(torch, ke.get("workspace"), env.device)
            b2b[n] = graph_call_s(torch, lambda: backend.sparse_conv(n, ke, xin, wk, out, ws, shape, epi)) * 1e6
        ing = {}
        for n in names:
            ing[n] = replay_ms({l: n for l in g["layers"]})[0]
        base.append(replay_ms({})[0])
        calib = {t[2] for t in base_trace if t[0] in g["layers"]}
        row = {"shape": common.shape_label(shape), "layers": len(g["layers"]), "calibrated": sorted(map(str, calib)),
               "isolated_us": iso, "b2b_us": b2b, "in_graph_ms": ing, "cudnn_iso_us": iso_dense}
        rows.append(row)
        print(f"{row['shape']} x{row['layers']} calibrated {row['calibrated']}", flush=True)
        for n in names:
            print(f"   {n[-40:]:>40} iso {iso.get(n, float('nan')):7.2f} b2b {b2b[n]:7.2f}  net {ing[n]:.4f} ms",
                  flush=True)
doc = {"network": net_name, "batch": B, "base_ms": base, "rows": rows,
       "trace": base_trace}
json.dump(doc, open(out_path, "w"), indent=1)
print(f"{net_name} b{B}: base replays {', '.join(f'{b:.4f}' for b in base)}; {time.time() - t0:.0f} s")
