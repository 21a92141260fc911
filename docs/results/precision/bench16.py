"""16-bit sparse kernels against FP32 ones and cuDNN per ResNet-152 conv shape, at batch 1 and 8.

For every distinct sparse conv shape of the spec, the planner's best classic config at sparsity 0.6 (ResNet-152's
MAC-weighted trained-like level, network_specs/profiles) is rendered in FP32, BF16 and FP16 and timed on the same
ReLU-like input (16-bit kernels: the input rounded to 16 bits), with the timer of docs/bench.md (CUDA events, L2
flushed, median), against cuDNN (torch F.conv2d, benchmark mode, the faster of NCHW and channels_last) in FP32
(TF32 off), TF32, BF16 and FP16. A kernel's steps as the check runner runs them: the launch, and for a channel
split the zero-fill of its FP32 sums (no epilogue). Each kernel's output is checked against float64 first.
The per-network rows weigh each shape by its number of convs: the sum of the convs' times, no epilogues.

    python3 bench16.py --compile-only          # CPU: fill the cubin cache ($SNN_CACHE_DIR)
    python3 bench16.py OUT.json                # GPU
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
from pathlib import Path

from snn.codegen.emit import render_sparse
from snn.codegen.gpu import load_gpu
from snn.codegen.plan import plan_network
from snn.codegen.spec import load_spec

ROOT = Path(__file__).resolve().parents[4]
PRECISIONS = ("fp32", "bf16", "fp16")
LEVEL = 0.6


def work(spec: str, batches) -> list[dict]:
    """Per (shape, batch): the classic config and its kernel in each precision, and how many convs share it."""
    net = load_spec(ROOT / "network_specs" / f"{spec}.yaml")
    gpu = load_gpu(os.environ.get("GPU", "h100"))
    out = []
    for b in batches:
        plan = plan_network(net, gpu, b, (LEVEL,), candidates=8)
        count = collections.Counter(lp.layer.shape for lp in plan.layers)
        seen = set()
        for lp in plan.layers:
            sh = lp.layer.shape
            if sh in seen:
                continue
            seen.add(sh)
            cands = [c for c, _ in lp.choices[LEVEL].candidates() if not c.warp_tiled and not c.cluster]
            if not cands:
                continue
            cfg = cands[0]
            out.append({"shape": sh, "batch": b, "convs": count[sh], "config": cfg.tag(),
                        "kernels": {p: render_sparse(sh, b, cfg, p) for p in PRECISIONS}})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--spec", default="resnet152")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--compile-only", action="store_true")
    a = ap.parse_args(argv)
    todo = work(a.spec, [int(b) for b in a.batch.split(",")])
    kernels = [k for e in todo for k in e["kernels"].values()]
    if a.compile_only:
        from snn.codegen.compile import Compiler, problems
        rec = Compiler().compile({k.name: k.source for k in kernels}, "sm_90").records
        print(f"{len(rec)} kernels, with spills: {[n for n, r in rec.items() if problems(r)]}")
        return 0
    from snn.runtime.check import TOLERANCE, KernelRunner, conv_float64, relu_input
    from snn.runtime.measure.timing import Env, Timer
    env = Env()
    torch = env.torch
    torch.backends.cudnn.benchmark = True
    runner = KernelRunner(device=env.dev)
    bad = runner.compile(kernels)
    timer = Timer(env, a.reps, 5)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(5)
    dts = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    rows = []
    for e in todo:
        sh, b = e["shape"], e["batch"]
        x = relu_input(torch, (b, sh.H, sh.W, sh.C), LEVEL, gen)
        w = torch.randn((sh.C, sh.R, sh.S, sh.N), generator=gen, device="cuda")
        row = {"shape": sh.tag(), "batch": b, "convs": e["convs"], "config": e["config"], "sparsity": LEVEL}
        for p, k in e["kernels"].items():
            xp, wp = x.to(dts[p]), w.to(dts[p]).float()
            out = torch.full((b, sh.P, sh.Q, sh.N), float("nan"), device="cuda",
                             dtype=dts[p] if k.epilogue else torch.float32)
            want = conv_float64(torch, xp, wp, sh)
            runner.run(k, xp, wp, out)
            rel = float(((out.double() - want).abs().max() / want.abs().max()).item())
            ok = k.name not in bad and rel <= (TOLERANCE if p == "fp32" or not k.epilogue else 2.0 ** -7)
            row[f"snn_{p}_us"] = statistics.median(timer([lambda: runner.run(k, xp, wp, out)])) if ok else None
            row[f"snn_{p}_rel_err"] = rel
        for p in ("fp32", "tf32", "bf16", "fp16"):
            env.set_tf32(p == "tf32")
            dt = dts.get(p, torch.float32)
            best = float("inf")
            for fmt in (torch.contiguous_format, torch.channels_last):
                xi = x.permute(0, 3, 1, 2).to(dt).contiguous(memory_format=fmt)
                wi = w.permute(3, 0, 1, 2).to(dt).contiguous(memory_format=fmt)
                run = lambda: torch.nn.functional.conv2d(xi, wi, stride=sh.stride, padding=sh.padding)  # noqa: E731
                best = min(best, statistics.median(timer([run])))
            row[f"cudnn_{p}_us"] = best
        env.set_tf32(False)
        rows.append(row)
        print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    totals = []
    for b in sorted({r["batch"] for r in rows}):
        rs = [r for r in rows if r["batch"] == b]
        t = {"batch": b, "convs": sum(r["convs"] for r in rs)}
        for col in [c for c in rs[0] if c.endswith("_us")]:
            vals = [r[col] * r["convs"] for r in rs if r[col] is not None]
            t[col.replace("_us", "_ms")] = round(sum(vals) / 1e3, 3) if len(vals) == len(rs) else None
        totals.append(t)
    doc = {"environment": env.info(), "spec": a.spec, "level": LEVEL, "reps": a.reps, "bad_kernels": bad,
           "rows": rows, "totals": totals}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1, default=str))
    cols = [c for c in totals[0] if c.endswith("_ms")]
    print("\n| batch | convs | " + " | ".join(cols) + " |\n|" + "---|" * (len(cols) + 2))
    for t in totals:
        print(f"| {t['batch']} | {t['convs']} | " + " | ".join(str(t[c]) for c in cols) + " |")
    return 1 if bad or any(r[f"snn_{p}_us"] is None for r in rows for p in PRECISIONS) else 0


if __name__ == "__main__":
    sys.exit(main())
