"""Where a 16-bit forward pass spends its GPU time: snn's engine (`snn.load` of a 16-bit bundle, its CUDA graph)
beside torch.compile of the same model in the same precision (measure.baselines: inductor, freezing, CUDA graphs).
Every GPU activity of 5 calls (CUPTI through torch.profiler), per name and grouped by kind; each side's replay or
call time (CUDA events, median of 50); snn's replay() from an idle GPU (how long it takes to return, and to finish). Seeded random weights, random input (the time of a dense path does not
depend on the zeros).

    python3 breakdown.py NET PRECISION BATCHES OUT.json [--no-compile]
"""
import argparse
import json
import os
import sys
from pathlib import Path

import torch

import snn
from snn.codegen.spec import load_spec
from snn.runtime.measure.baselines import _compiled, model_for
from snn.runtime.measure.inputs import load_weights
from snn.runtime.measure.timing import Env, cuda_activities, event_median_s, exit_skipping_teardown, idle_call_ms


def kind(name: str) -> str:
    n = name.lower()
    if any(t in n for t in ("conv", "xmma", "implicit", "cudnn", "gemm", "sm90", "nhwc", "fprop", "cutlass")):
        return "conv / gemm"
    if "cat" in n:
        return "concat"
    if "pool" in n:
        return "pooling"
    if "memcpy" in n or "copy" in n:
        return "copy"
    if "memset" in n:
        return "memset"
    if "triton" in n or "elementwise" in n or "vectorized" in n or "addcmul" in n or "relu" in n:
        return "pointwise"
    return "other"


def activities(fn, iters=5) -> dict:
    fn()
    torch.cuda.synchronize()
    names = cuda_activities(torch, fn, iters)
    kinds: dict[str, list] = {}
    for n, (c, us) in names.items():
        k = kinds.setdefault(kind(n), [0, 0.0])
        k[0] += c / iters
        k[1] += us / iters / 1e3
    top = sorted(names.items(), key=lambda kv: -kv[1][1])[:25]
    return {"kernel_sum_ms": round(sum(v[1] for v in kinds.values()), 4),
            "activities": round(sum(v[0] for v in kinds.values()), 1),
            "by_kind": {k: {"per_call": round(c, 1), "ms": round(ms, 4)} for k, (c, ms) in sorted(kinds.items())},
            "top": [{"name": n[:160], "per_call": c / iters, "ms": round(us / iters / 1e3, 4)} for n, (c, us) in top]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("net")
    ap.add_argument("precision", choices=["bf16", "fp16"])
    ap.add_argument("batches")
    ap.add_argument("out", type=Path)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args(argv)
    env = Env()
    net = load_spec(a.net)
    batches = [int(b) for b in a.batches.split(",")]
    sd, _ = load_weights(env, net, None, 0)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]
    bundle = snn.build(f"network_specs/{a.net}.yaml", gpu=os.environ.get("GPU", "h100"), batch=batches, out="/tmp/snn_breakdown16",
                       precision=a.precision).manifest_path.parent
    torch.save(sd, "/tmp/snn_breakdown16/weights.pth")
    doc = {"net": a.net, "precision": a.precision, "gpu": env.name, "rows": []}
    with torch.inference_mode():
        for B in batches:
            x = torch.randn(B, 3, 224, 224, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
            e = snn.load(bundle, weights="/tmp/snn_breakdown16/weights.pth", batch=B, precision=a.precision)
            e(x)
            replay = e.graph.replayer(x)
            launch_ms, call_ms = idle_call_ms(torch, replay)   # the host's part: replay() from an idle GPU
            row = {"batch": B, "snn": {"replay_ms": round(event_median_s(torch, replay, 50, warmup=5) * 1e3, 4),
                                       "replay_launch_ms": round(launch_ms, 4), "replay_call_ms": round(call_ms, 4),
                                       **activities(replay)}}
            del e, replay
            if not a.no_compile:
                model, _ = model_for(env, net, sd)
                model = model.to(dt)
                xc = x.to(dt).contiguous(memory_format=torch.channels_last)
                fn, secs = _compiled(torch, model, xc)
                row["compile"] = {"call_ms": round(event_median_s(torch, lambda: fn(xc), 50, warmup=5) * 1e3, 4),
                                  "compile_s": round(secs, 1), **activities(lambda: fn(xc))}
                torch._dynamo.reset()
                del fn, model
            doc["rows"].append(row)
            a.out.write_text(json.dumps(doc, indent=1))
    print(f"{'batch':>5} {'side':>8} {'ms':>7} {'acts':>6}  by kind (ms)")
    for r in doc["rows"]:
        for side in ("snn", "compile"):
            if side in r:
                s = r[side]
                ms = s.get("replay_ms", s.get("call_ms"))
                kinds = ", ".join(f"{k} {v['ms']:.3f}/{v['per_call']:.0f}" for k, v in s["by_kind"].items())
                print(f"{r['batch']:>5} {side:>8} {ms:>7.3f} {s['activities']:>6.0f}  {kinds}")
    return 0


if __name__ == "__main__":
    rc = main()
    exit_skipping_teardown(rc)   # the native teardown after CUPTI has aborted (README, Known limits)
    sys.exit(rc)
