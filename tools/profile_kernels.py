#!/usr/bin/env python3
"""Run a few sparse-convolution kernels once each, for Nsight Compute (where the time of a kernel goes).

    ncu --clock-control none -k regex:sconv --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section LaunchStats \
        --metrics lts__t_bytes.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum \
        --csv --page raw python3 tools/profile_kernels.py > raw.csv
    python3 tools/profile_kernels.py --summarize raw.csv      # one line per kernel: time, issue, stalls

Cases: (label, shape, batch, config, sparsity), the best kernels of the batch-32 bench
(docs/results/kernels/run6-images) and two batch-1 ones (run7-profile also has an images-per-block
kernel, measured before that emitter option was reverted); inputs as in check_kernels (ReLU-like, never
all zero), weights random, cubins from check_kernels' cache ($SNN_CACHE_DIR or .carry/kcache).
"""
from __future__ import annotations

import csv
import dataclasses
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from snn.codegen import emit  # noqa: E402
from snn.codegen.config import KernelConfig  # noqa: E402
from snn.codegen.spec import ConvShape  # noqa: E402


def S3(c, n, h):
    return ConvShape(c, n, h, h, 3, 3, (1, 1), (1, 1))


CASES = [
    ("128@28 b32 7x7 t128n1", S3(128, 128, 28), 32, KernelConfig(7, 7, 128, 128, 1), 0.7),
    ("128@28 b32 7x7 t128n1 s.99", S3(128, 128, 28), 32, KernelConfig(7, 7, 128, 128, 1), 0.99),
    ("256@14 b32 7x7 t64n2", S3(256, 256, 14), 32, KernelConfig(7, 7, 128, 64, 2), 0.7),
    ("512@7 b32 4x7 t64n2", S3(512, 512, 7), 32, KernelConfig(4, 7, 128, 64, 2), 0.7),
    ("1x1 1024>256@14 b32 4x4 t32n4", ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)), 32,
     KernelConfig(4, 4, 128, 32, 4), 0.7),
    ("DN 128>32@28 b32 4x4 t32n1", S3(128, 32, 28), 32, KernelConfig(4, 4, 128, 32, 1), 0.7),
    ("64@56 b1 4x8 tc8 t64n1", S3(64, 64, 56), 1, KernelConfig(4, 8, 8, 64, 1), 0.7),
    ("256@14 b1 4x8 tc8 t64n1", S3(256, 256, 14), 1, KernelConfig(4, 8, 8, 64, 1), 0.7),
]

# SNN_PROFILE_CASES=v8: nt 8 (two float4 a tap and pixel) against the nt 2/4 twins it was meant to beat
# (docs/perf-notes.md, v8), batch 32, sparsity 0.7; run10/run11-l1 profiled earlier versions of this list
# (their summary.md names the kernels; run11 had weights through L1, an option since removed).
ONE = ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0))
CASES_V8 = [
    ("1x1 1024>256@14 1x14 tc128 t32n4", ONE, 32, KernelConfig(1, 14, 128, 32, 4), 0.7),
    ("1x1 1024>256@14 1x14 tc128 t32n8", ONE, 32, KernelConfig(1, 14, 128, 32, 8), 0.7),
    ("1x1 1024>256@14 1x7 tc128 t32n8", ONE, 32, KernelConfig(1, 7, 128, 32, 8), 0.7),
    ("256@14 4x8 tc32 t64n2", S3(256, 256, 14), 32, KernelConfig(4, 8, 32, 64, 2), 0.7),
    ("256@14 2x4 tc64 t32n8", S3(256, 256, 14), 32, KernelConfig(2, 4, 64, 32, 8), 0.7),
]
# SNN_PROFILE_CASES=v9: warp-tiled blocks (emit.render_sparse_ws; "warps" among the options) against the
# batch-32 winner they were meant to beat (docs/perf-notes.md, v9), sparsity 0.7.
CASES_V9 = [
    ("256@14 4x8 tc32 t64n2", S3(256, 256, 14), 32, KernelConfig(4, 8, 32, 64, 2), 0.7),
    ("256@14 ws 4x4 tc64 n4 w2x2", S3(256, 256, 14), 32, KernelConfig(4, 4, 64, 32, 4), 0.7, {"warps": (2, 2)}),
    ("256@14 ws 4x7 tc64 n4 w4x2", S3(256, 256, 14), 32, KernelConfig(4, 7, 64, 32, 4), 0.7, {"warps": (4, 2)}),
    ("128@28 ws 4x4 tc64 n4 w1x2", S3(128, 128, 28), 32, KernelConfig(4, 4, 64, 32, 4), 0.7, {"warps": (1, 2)}),
    ("128@28 4x4 tc64 t64n2", S3(128, 128, 28), 32, KernelConfig(4, 4, 64, 64, 2), 0.7),
    ("256@14 ws 2x4 tc64 n8 w2x2", S3(256, 256, 14), 32, KernelConfig(2, 4, 64, 32, 8), 0.7, {"warps": (2, 2)}),
]
# SNN_PROFILE_CASES=v10: where the fixed cost of the batch-32 warp-tiled kernels goes (session 6: 72-78 us at
# sparsity 0.99 on the ResNet-152 3x3 layers, half their time at 0.7; docs/results/h100/bench-s6): the plan's
# kernels at 0.99 and 0.7.
ONE_WS = KernelConfig(1, 7, 128, 32, 8, 2, 2)
CASES_V10 = [
    ("256@14 ws 2x7 tc128 n4 w4x2 s.99", S3(256, 256, 14), 32, KernelConfig(2, 7, 128, 32, 4, 4, 2), 0.99),
    ("256@14 ws 2x7 tc128 n4 w4x2", S3(256, 256, 14), 32, KernelConfig(2, 7, 128, 32, 4, 4, 2), 0.7),
    ("128@28 ws 2x7 tc128 n4 w4x2 s.99", S3(128, 128, 28), 32, KernelConfig(2, 7, 128, 32, 4, 4, 2), 0.99),
    ("DN@56 ws 4x8 tc128 n1 w2x1 s.99", S3(128, 32, 56), 32, KernelConfig(4, 8, 128, 32, 1, 2, 1), 0.99),
    ("1x1 1024>256@14 ws 1x7 tc128 n8 w2x2 s.99", ONE, 32, ONE_WS, 0.99),
    ("1x1 1024>256@14 ws 1x7 tc128 n8 w2x2", ONE, 32, ONE_WS, 0.7),
]
CASES = {"v8": CASES_V8, "v9": CASES_V9, "v10": CASES_V10}.get(os.environ.get("SNN_PROFILE_CASES", ""), CASES)

SHOW = [("time us", "gpu__time_duration.sum", 1e-3), ("issue %", "smsp__issue_active.avg.pct_of_peak_sustained_active", 1),
        ("occ %", "sm__warps_active.avg.pct_of_peak_sustained_active", 1),
        ("L2 MB", "lts__t_bytes.sum", 1e-6), ("ffma/inst", None, 1),
        ("M inst", "smsp__inst_executed.sum", 1e-6),
        ("smem conflicts M", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", 1e-6),
        ("smem wavefronts M", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 1e-6)]
STALL = "smsp__average_warps_issue_stalled_"


def kernels():
    """(label, kernel, shape, batch, sparsity); a case's optional sixth field holds render_sparse options."""
    out = []
    for label, sh, b, cfg, s, *rest in CASES:
        kw = dict(rest[0]) if rest else {}
        if "warps" in kw:
            wh, ww = kw.pop("warps")
            cfg = dataclasses.replace(cfg, wh=wh, ww=ww)
        k = emit.render_sparse(sh, b, cfg, **kw)
        out.append((label, k, sh, b, s))
    return out


def run():
    import torch
    import check_kernels as ck
    cache = Path(os.environ.get("SNN_CACHE_DIR", ROOT / ".carry" / "kcache"))
    ks = kernels()
    drv = ck.Driver(torch)
    for name, (cub, _) in ck.compile_all({k.name: k.source for _, k, *_ in ks}, cache, "sm_90", os.cpu_count() or 1).items():
        drv.load(name, cub)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(11)
    for label, k, sh, b, s in ks:
        x = ck.relu_input(torch, (b, sh.H, sh.W, sh.C), s, gen)
        w = torch.randn((sh.C, sh.R, sh.S, sh.N), generator=gen, device="cuda")
        out = torch.empty((b, sh.P, sh.Q, sh.N), device="cuda")
        drv.run_steps(k.steps, {"input": x, "weight": w, "output": out})
        torch.cuda.synchronize()
        print(f"{label}: {k.name}", flush=True)


def _num(v: str) -> float:
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return float("nan")


def summarize(path: Path) -> str:
    text = path.read_text().splitlines()
    start = next(i for i, ln in enumerate(text) if ln.startswith('"ID"'))
    rows = list(csv.DictReader(text[start:]))
    rows = [r for r in rows if r.get("Kernel Name", "").startswith("sconv")]
    labels = [label for label, *_ in kernels()]  # ncu lists launches in order: one per case
    head = ["kernel", *[h for h, _, _ in SHOW], "top stalls (warps per issued instruction)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for i, r in enumerate(rows):
        name = labels[i] if len(rows) == len(labels) else r["Kernel Name"].split("(")[0]
        vals = []
        for _, key, scale in SHOW:
            if key is None:
                ffma, inst = _num(r.get("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "nan")), _num(r.get("smsp__inst_executed.sum", "nan"))
                vals.append(f"{ffma / 32 / inst:.2f}" if inst == inst and inst > 0 else "?")
            else:
                vals.append(f"{_num(r.get(key, 'nan')) * scale:.1f}")
        stalls = sorted(((_num(v), k[len(STALL):].replace("_per_issue_active.ratio", ""))
                         for k, v in r.items() if k.startswith(STALL) and k.endswith("_per_issue_active.ratio")
                         and "not_issued" not in k), reverse=True)
        top = ", ".join(f"{n} {v:.1f}" for v, n in stalls[:4] if v == v)
        lines.append(f"| {name} | " + " | ".join(vals) + f" | {top} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--summarize":
        print(summarize(Path(sys.argv[2])))
    else:
        run()
