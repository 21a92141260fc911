"""Eager vs CUDA-graph forward passes on the GPU, against dense torch eager and dense torch graph.

    PYTHONPATH=. python3 tools/bench_graphs.py --spec network_specs/resnet152.yaml --batches 1,8 \
        --photos DIR --out bench.json

Per batch size (ms per forward, CUDA events around `iters` back-to-back calls, after warm-up):
  torch_eager         torchvision model, dense cuDNN FP32 (TF32 off), NCHW, launched from Python
  torch_graph         the same captured with torch.cuda.graphs and replayed
  snn_eager           our executor, host dispatch (a counter read per eligible layer), auto
  snn_graph           our executor as one graph, device dispatch: per layer snn_select + one SWITCH node
                      over {cuDNN, the layer's sparse kernels}
  snn_graph_dense     our executor as one graph, --force dense (all cuDNN, no selectors)
*_replay is graph.replay() alone; snn_graph_* includes copying the input in and reading the branches
back. kernel_sum_ms: the GPU time of every kernel/memset/memcpy of one replay (torch.profiler, CUPTI).
Inputs are real photographs (their activations set the sparsity), weights seeded random + BN calibration.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snn.codegen.spec import load_spec  # noqa: E402
from snn.runtime import executor, images, manifest, weights  # noqa: E402
from snn.runtime.cuda import Device  # noqa: E402
from snn.runtime.graph import GraphRunner  # noqa: E402
from snn.runtime.kernels import CudaBackend  # noqa: E402
from snn.runtime.measure.timing import kernel_sum as _kernel_sum  # noqa: E402


def timed(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return {"ms": a.elapsed_time(b) / iters, "host_ms": (time.perf_counter() - t0) * 1e3 / iters}


def kernel_sum(fn):
    return _kernel_sum(torch, fn)


def photos(folder, n):
    arrays = []
    for p in images.discover(folder)[0]:
        try:
            arrays.append(torch.from_numpy(images.preprocess(p)))
        except Exception:
            continue
    return torch.stack([arrays[i % len(arrays)] for i in range(n)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="network_specs/resnet152.yaml")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--photos", required=True)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    net = load_spec(a.spec)
    dev = Device()
    sd = weights.load(net, None, seed=0, device="cuda")[0]
    import torchvision
    tv = torchvision.models.get_model(net.name, weights=None)
    tv.load_state_dict(sd, strict=False)
    tv = tv.eval().cuda()
    doc = {"network": net.name, "device": dev.name, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "iters": a.iters, "batches": {}}
    for B in [int(b) for b in a.batches.split(",")]:
        r = doc["batches"][str(B)] = {}
        path = manifest.locate("generated", net, a.spec, "auto", B, dev.name, dev.compute_capability)
        cache = manifest.load(path, net, a.spec, B, dev.compute_capability)
        x = photos(a.photos, B).cuda()
        with torch.inference_mode():
            ref = tv(x)
            r["torch_eager"] = timed(lambda: tv(x), a.iters)
            sx = x.clone()
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    tv(sx)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                tv(sx)
            r["torch_graph"] = timed(g.replay, a.iters)
            r["torch_graph"].update(kernel_sum(g.replay))

            ex = executor.Executor(net, sd, CudaBackend(dev, cache), cache, "cuda", "auto")
            r["snn_eager"] = timed(lambda: ex.forward(x), a.iters)
            out = ex.forward(x)
            r["snn_eager"]["rel_err_vs_torch"] = ((out.double() - ref.double()).abs().max() / ref.double().abs().max()).item()
            for key in ("snn_graph",):
                try:
                    t0 = time.perf_counter()
                    runner = GraphRunner(ex, dev)
                    out = runner.forward(x)
                    cap_s = time.perf_counter() - t0
                    tr = ex.last_trace
                    r[key] = timed(lambda: runner.forward(x), a.iters)
                    replay = runner.replayer(x)
                    r[key + "_replay"] = timed(replay, a.iters)
                    r[key + "_replay"].update(kernel_sum(replay))
                    meas = [t for t in tr if t.sparsity is not None]
                    r[key].update({
                        "capture_s": cap_s,
                        "rel_err_vs_torch": ((out.double() - ref.double()).abs().max() / ref.double().abs().max()).item(),
                        "top5_equal": bool(torch.equal(out.topk(5).indices, ref.topk(5).indices)),
                        "device_dispatched_layers": len(meas),
                        "sparse_layers": sum(t.path == "sparse" for t in meas),
                        "mean_sparsity": sum(t.sparsity for t in meas) / max(1, len(meas)),
                        "layers": [[t.name, round(t.sparsity, 4), t.kernel] for t in meas]})
                    del runner, replay
                except Exception as e:  # report and go on: the other numbers still count
                    r[key] = {"error": f"{type(e).__name__}: {e}"}
                torch.cuda.synchronize()
            exd = executor.Executor(net, sd, CudaBackend(dev, cache), cache, "cuda", "dense")
            try:
                rd = GraphRunner(exd, dev)
                rd.forward(x)
                replay_d = rd.replayer(x)
                r["snn_graph_dense_replay"] = timed(replay_d, a.iters)
                r["snn_graph_dense_replay"].update(kernel_sum(replay_d))
            except Exception as e:
                r["snn_graph_dense_replay"] = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "layers"} for k, v in r.items()}, indent=1),
              flush=True)
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
