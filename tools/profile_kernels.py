"""Run sparse-conv kernels once each, for Nsight Compute (where a kernel's time goes).

    ncu --clock-control none -k regex:sconv --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section SchedulerStats --section LaunchStats \\
        --metrics lts__t_bytes.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum \\
        --csv --page raw python3 tools/profile_kernels.py [KERNEL[@SPARSITY] ...] > raw.csv
    python3 tools/profile_kernels.py --summarize raw.csv [KERNEL[@SPARSITY] ...]   # a table: time, issue, stalls

KERNEL: a sparse kernel's name as a bundle's manifest or tools/bench_kernels.py names it
(KernelConfig.name), run at sparsity 0.7 unless @SPARSITY follows; without any, CASES: a kernel of each
family the planner uses on ResNet-152 layers, batch 1 and 32, two of them also at 0.99 (the fixed cost).
Kernels are rendered as the build renders them, compiled through the cubin cache ($SNN_CACHE_DIR) and run
through snn.runtime.check (inputs ReLU-like, never all zero; weights random).
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from fit_costmodel import parse_kernel  # beside this script

from snn.codegen.config import KernelConfig
from snn.codegen.emit import render_sparse
from snn.codegen.spec import ConvShape

S256 = ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1))
S128 = ConvShape(128, 128, 28, 28, 3, 3, (1, 1), (1, 1))
ONE = ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0))
# (label, shape, batch, config, sparsity)
CASES = [
    ("3x3 256@14 b1 classic 4x8 tc8 t64n1", S256, 1, KernelConfig(4, 8, 8, 64, 1), 0.7),
    ("3x3 256@14 b1 warp-tiled 2x7 tc32 n4 w2x2", S256, 1, KernelConfig(2, 7, 32, 32, 4, 2, 2), 0.7),
    ("3x3 128@28 b32 classic 7x7 tc128 t128n1", S128, 32, KernelConfig(7, 7, 128, 128, 1), 0.7),
    ("3x3 128@28 b32 classic 7x7 tc128 t128n1 s.99", S128, 32, KernelConfig(7, 7, 128, 128, 1), 0.99),
    ("3x3 256@14 b32 warp-tiled 2x7 tc128 n4 w4x2", S256, 32, KernelConfig(2, 7, 128, 32, 4, 4, 2), 0.7),
    ("3x3 256@14 b32 warp-tiled 2x7 tc128 n4 w4x2 s.99", S256, 32, KernelConfig(2, 7, 128, 32, 4, 4, 2), 0.99),
    ("1x1 1024>256@14 b32 classic 1x7 tc128 t32n8", ONE, 32, KernelConfig(1, 7, 128, 32, 8), 0.7),
    ("1x1 1024>256@14 b32 warp-tiled 1x7 tc128 n8 w2x2", ONE, 32, KernelConfig(1, 7, 128, 32, 8, 2, 2), 0.7),
]

SHOW = [("time us", "gpu__time_duration.sum", 1e-3), ("issue %", "smsp__issue_active.avg.pct_of_peak_sustained_active", 1),
        ("occ %", "sm__warps_active.avg.pct_of_peak_sustained_active", 1),
        ("L2 MB", "lts__t_bytes.sum", 1e-6), ("ffma/inst", None, 1),
        ("M inst", "smsp__inst_executed.sum", 1e-6),
        ("smem conflicts M", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", 1e-6),
        ("smem wavefronts M", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 1e-6)]
STALL = "smsp__average_warps_issue_stalled_"


def cases(args: list[str]) -> list[tuple]:
    """(label, kernel, shape, batch, sparsity) of the named kernels, else of CASES."""
    if not args:
        return [(label, render_sparse(sh, b, cfg), sh, b, s) for label, sh, b, cfg, s in CASES]
    out = []
    for arg in args:
        name, _, sparsity = arg.partition("@")
        parsed = parse_kernel(name)
        if parsed is None:
            raise SystemExit(f"{name}: not a sparse kernel's name (e.g. {CASES[0][3].name(CASES[0][1], 1)})")
        sh, cfg, b = parsed
        out.append((arg, render_sparse(sh, b, cfg), sh, b, float(sparsity or 0.7)))
    return out


def run(args: list[str]) -> None:
    from snn.runtime.check import KernelRunner, relu_input
    ks = cases(args)
    runner = KernelRunner()
    bad = runner.compile([k for _, k, *_ in ks])
    if bad:
        print(f"stack or spills: {bad}", file=sys.stderr)
    torch = runner.torch
    gen = torch.Generator(device="cuda")
    gen.manual_seed(11)
    for label, k, sh, b, s in ks:
        x = relu_input(torch, (b, sh.H, sh.W, sh.C), s, gen)
        w = torch.randn((sh.C, sh.R, sh.S, sh.N), generator=gen, device="cuda")
        out = torch.empty((b, sh.P, sh.Q, sh.N), device="cuda")
        runner.run(k, x, w, out)
        torch.cuda.synchronize()
        print(f"{label}: {k.name}", flush=True)


def _num(v: str) -> float:
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return float("nan")


def summarize(path: Path, args: list[str]) -> str:
    text = path.read_text().splitlines()
    start = next(i for i, ln in enumerate(text) if ln.startswith('"ID"'))
    rows = [r for r in csv.DictReader(text[start:]) if r.get("Kernel Name", "").startswith("sconv")]
    labels = [label for label, *_ in cases(args)]  # ncu lists the launches in order: one per case
    head = ["kernel", *[h for h, _, _ in SHOW], "top stalls (warps per issued instruction)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for i, r in enumerate(rows):
        name = labels[i] if len(rows) == len(labels) else r["Kernel Name"].split("(")[0]
        vals = []
        for _, key, scale in SHOW:
            if key is None:
                ffma = _num(r.get("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "nan"))
                inst = _num(r.get("smsp__inst_executed.sum", "nan"))
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
    if len(sys.argv) >= 3 and sys.argv[1] == "--summarize":
        print(summarize(Path(sys.argv[2]), sys.argv[3:]))
    else:
        run(sys.argv[1:])
