"""Time rendered kernels against cuDNN on the GPU: the measurements tools/fit_costmodel.py fits and scores.

    python tools/fit_costmodel.py picks --out picks.json      # CPU: layers, a grid of configs, the plan's picks
    python tools/bench_kernels.py picks.json --out bench      # GPU: bench/bench.json (+ bench.csv)

For every (layer, batch) of the picks file, every config it names (the grid and the plan's pick) is
rendered as the build renders it, compiled through the cubin cache ($SNN_CACHE_DIR), checked against
float64 at each level (a wrong kernel is listed in bad_kernels, not timed) and timed: the kernel's steps
only (memset when tc < C + the launch), inputs ReLU-like with the level's share of zeros, snn-run bench's
timer (CUDA events, L2 flushed before each run, host launch cost kept out, median of --reps runs). cuDNN
FP32 and TF32 (the faster of NCHW and NHWC) on the same layer, benchmark mode on.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

from snn.codegen.config import KernelConfig
from snn.codegen.emit import render_sparse
from snn.codegen.spec import ConvShape
from snn.runtime.check import TOLERANCE, KernelRunner, conv_float64, relu_input
from snn.runtime.measure.timing import Env, Timer


def layers(spec: dict) -> list[dict]:
    """One entry per (layer, batch) of a picks file: its shape, levels and configs (grid and picks)."""
    out: dict[tuple, dict] = {}
    for g in spec["groups"]:
        c = g["conv"]
        shape = ConvShape(c["C"], c["N"], c["H"], c["W"], c["R"], c["S"], tuple(c["stride"]), tuple(c["padding"]))
        e = out.setdefault((shape, g["batch"]), {"layer": g["layer"], "shape": shape, "batch": g["batch"],
                                                 "levels": set(), "configs": set()})
        e["levels"].add(float(g["level"]))
        e["configs"].update(KernelConfig.from_dict(d) for d in g["grid"] + [g["plan"]])
    return list(out.values())


def cudnn_us(env: Env, timer: Timer, x, w, shape: ConvShape) -> dict:
    """cuDNN's µs on NHWC input x and CRSN weights w, FP32 and TF32: the faster of NCHW and NHWC."""
    torch = env.torch
    out = {}
    for tf32 in (False, True):
        env.set_tf32(tf32)
        best = float("inf")
        for fmt in (torch.contiguous_format, torch.channels_last):
            xi = x.permute(0, 3, 1, 2).contiguous(memory_format=fmt)
            wi = w.permute(3, 0, 1, 2).contiguous(memory_format=fmt)
            run = lambda: torch.nn.functional.conv2d(xi, wi, stride=shape.stride, padding=shape.padding)  # noqa: E731
            best = min(best, statistics.median(timer([run])))
        out["tf32" if tf32 else "fp32"] = best
    env.set_tf32(False)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("picks", type=Path, help="written by `tools/fit_costmodel.py picks`")
    ap.add_argument("--out", type=Path, required=True, help="folder for bench.json and bench.csv")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("-j", "--jobs", type=int, default=None, help="nvcc jobs (default: every CPU)")
    a = ap.parse_args(argv)
    env = Env()
    torch = env.torch
    runner = KernelRunner(jobs=a.jobs, device=env.dev)
    todo = layers(json.loads(a.picks.read_text()))
    for e in todo:
        e["kernels"] = [render_sparse(e["shape"], e["batch"], c) for c in sorted(e["configs"])]
    spills = runner.compile([k for e in todo for k in e["kernels"]])
    print(f"{sum(len(e['kernels']) for e in todo)} kernels compiled or cached; with spills or stack: {len(spills)}",
          flush=True)
    timer = Timer(env, a.reps, a.warmup)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(3)
    rows = []
    for e in todo:
        shape, batch = e["shape"], e["batch"]
        w = torch.randn((shape.C, shape.R, shape.S, shape.N), generator=gen, device="cuda")  # CRSN
        dense = None
        for level in sorted(e["levels"]):
            x = relu_input(torch, (batch, shape.H, shape.W, shape.C), level, gen)
            if dense is None:  # cuDNN on the first level's input (its time does not follow the zeros)
                dense = cudnn_us(env, timer, x, w, shape)
            out = torch.empty((batch, shape.P, shape.Q, shape.N), device="cuda")
            want = conv_float64(torch, x, w, shape)
            tol = TOLERANCE * float(want.abs().max()) + TOLERANCE
            per, bad = [], []
            for k in e["kernels"]:
                if k.name in spills:
                    bad.append(k.name)
                    continue
                out.fill_(float("nan"))
                runner.run(k, x, w, out)
                if not float((out.double() - want).abs().max()) <= tol:  # NaN fails too
                    bad.append(k.name)
                    continue
                per.append((statistics.median(timer([lambda k=k: runner.run(k, x, w, out)])), k.name))
            per.sort()
            t_best, k_best = per[0] if per else (float("nan"), None)
            rows.append({"layer": e["layer"], "shape": shape.tag(), "batch": batch, "sparsity": level,
                         "cudnn_fp32_us": round(dense["fp32"], 2), "cudnn_tf32_us": round(dense["tf32"], 2),
                         "sparse_best_us": round(t_best, 2), "best_kernel": k_best,
                         "speedup_vs_fp32": round(dense["fp32"] / t_best, 3),
                         "speedup_vs_tf32": round(dense["tf32"] / t_best, 3), "candidates": len(per),
                         "bad_kernels": bad, "all_us": {n: round(t, 2) for t, n in per}})
            print(f"{e['layer']} b={batch} s={level}: best {t_best:.1f} us ({k_best}) of {len(per)} | cuDNN fp32 "
                  f"{dense['fp32']:.1f} tf32 {dense['tf32']:.1f}" + (f" | BAD {bad}" if bad else ""), flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    doc = {"environment": env.info(), "picks": str(a.picks), "reps": a.reps, "spills": spills,
           "ptxas": {n: r["functions"] for n, r in runner.records.items()}, "bench": rows}
    (a.out / "bench.json").write_text(json.dumps(doc, indent=1))
    with open(a.out / "bench.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=[k for k in rows[0] if k != "all_us"] if rows else ["layer"])
        wr.writeheader()
        for r in rows:
            wr.writerow({k: v for k, v in r.items() if k != "all_us"})
    failed = any(r["bad_kernels"] for r in rows)
    print(f"wrote {a.out / 'bench.json'}; {'some kernels FAILED the float64 check' if failed else 'all kernels ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
