"""Per distinct conv shape of a built FP32 bundle and batch: every dense-kernel tile (codegen/dense.py TILES, each with
the largest one-wave K split) against the bundle's sparse pick at one sparsity level and cuDNN FP32 (TF32 off), on
the same post-ReLU input at that level: each kernel checked against float64 (bias + residual + ReLU fused, the zero
count exact, output poisoned) and timed as ten back-to-back calls in a CUDA graph (median of 15 replays).

    python3 probe.py MANIFEST OUT.json [--level 0.7]

Prints a table per batch; OUT.json holds every time and check.
"""
import argparse
import json
import sys
from pathlib import Path

import torch

from snn.codegen import dense, emit
from snn.codegen.config import KernelConfig
from snn.codegen.spec import ConvShape
from snn.runtime.check import KernelRunner, relu_input
from snn.runtime.executor import Epilogue
from snn.runtime.measure.timing import graph_call_s


def operands(shape: ConvShape, batch: int, level: float, gen):
    """(x, w, bias, out, epi) for one conv: a post-ReLU NHWC input at `level`, CRSN weights, and bias + residual +
    ReLU + zero count fused (executor.Epilogue); drawn from `gen` in a fixed order."""
    x = relu_input(torch, (batch, shape.H, shape.W, shape.C), level, gen)
    w = torch.randn((shape.C, shape.R, shape.S, shape.N), generator=gen, device="cuda") * 0.05
    bias = torch.randn(shape.N, generator=gen, device="cuda")
    res = torch.randn((batch, shape.P, shape.Q, shape.N), generator=gen, device="cuda")
    out = torch.empty((batch, shape.P, shape.Q, shape.N), device="cuda")
    zeros = torch.zeros(1, dtype=torch.int64, device="cuda")
    return x, w, bias, out, Epilogue(bias, res.permute(0, 3, 1, 2), True, zeros, 0)


def cudnn_us(x, w, bias, shape: ConvShape, tf32: bool = False) -> float:
    """cuDNN's µs (channels_last, bias added) on the same operands, timed as the kernels are; TF32 as asked."""
    xn = x.permute(0, 3, 1, 2)
    wn = w.permute(3, 0, 1, 2).contiguous(memory_format=torch.channels_last)
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        return round(graph_call_s(torch, lambda: torch.nn.functional.conv2d(
            xn, wn, bias, shape.stride, shape.padding)) * 1e6, 3)
    finally:
        torch.backends.cudnn.allow_tf32 = False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("manifest")
    ap.add_argument("out")
    ap.add_argument("--level", type=float, default=0.7)
    a = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    doc = json.loads(Path(a.manifest).read_text())
    runner = KernelRunner()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, seen = [], set()
    for layer in doc["layers"]:
        s = layer["shape"]
        shape = ConvShape(s["C"], s["N"], s["H"], s["W"], s["R"], s["S"], tuple(s["stride"]), tuple(s["padding"]))
        for b, entry in layer.get("batches", {}).items():
            b = int(b)
            if (shape, b) in seen or not entry.get("levels"):
                continue
            seen.add((shape, b))
            pick = entry["levels"].get(f"{a.level:.2f}", {}).get("kernel")
            if pick is None:
                continue
            kernels = [emit.render_sparse(shape, b, KernelConfig.from_dict(doc["kernels"][pick]["config"]))]
            for tile in dense.TILES:
                for cfg in dense.candidates(shape, b, tiles=(tile,)):
                    kernels.append(dense.emitted(shape, b, cfg))
            bad = runner.compile(kernels)
            kernels = [k for k in kernels if k.name not in bad]
            x, w, bias, out, epi = operands(shape, b, a.level, gen)
            row = {"shape": shape.tag(), "batch": b, "sparse": pick, "spilled": sorted(bad), "us": {}, "checks": {}}
            for k in kernels:
                row["us"][k.name] = round(graph_call_s(torch, lambda k=k: runner.run(k, x, w, out, epi)) * 1e6, 3)
                c = runner.check_conv(k, shape, b, a.level, gen)
                row["checks"][k.name] = {key: c[key] for key in ("ok", "err_over_allowed", "zeros", "zeros_expected")}
            row["us"]["cudnn_fp32"] = cudnn_us(x, w, bias, shape)
            rows.append(row)
            Path(a.out).write_text(json.dumps({"level": a.level, "manifest": a.manifest, "rows": rows}, indent=1))
    for b in sorted({r["batch"] for r in rows}):
        print(f"\nbatch {b}, level {a.level}: us (ten calls back to back in a graph)")
        print("| shape | sparse | best dense | dense/sparse | cuDNN FP32 | all checks ok |")
        print("|---|---|---|---|---|---|")
        for r in (r for r in rows if r["batch"] == b):
            d = {k: v for k, v in r["us"].items() if k.startswith("dconv_")}
            best = min(d, key=d.get) if d else None
            sp = r["us"].get(r["sparse"])
            print(f"| {r['shape']} | {sp} | {d.get(best)} ({best.split('_')[-2] if best else '-'}) | "
                  f"{round(d[best] / sp, 2) if best and sp else '-'} | {r['us']['cudnn_fp32']} | "
                  f"{all(c['ok'] for c in r['checks'].values())} |")
    sys.exit(0 if all(c["ok"] for r in rows for c in r["checks"].values()) else 1)


if __name__ == "__main__":
    main()
