"""Compile a sample of sparse-conv kernels and compare ptxas' registers / static smem with the cost
model's estimate (docs/costmodel.md, "Estimate vs ptxas").

    python tools/fit_resources.py compile [--n 280] [-j 2] [--out docs/results/costmodel/ptxas_sample.csv]
    python tools/fit_resources.py report  [--csv docs/results/costmodel/ptxas_sample.csv]

`compile`: distinct conv shapes of resnet152, densenet201 and vgg19 (every densenet shape would
swamp the sample: one in four of its 106 is kept), configs drawn at random (seed 0) from
config_space(shape) among those the emitter can build, each rendered with emit.render_sparse
(batch 1, the `mask` loop the build emits) and compiled with
`nvcc -cubin -arch=sm_90 -O3 -std=c++17 -Xptxas -v`. One CSV row per kernel.
`report`: median / max absolute error of the old estimate (double-buffered weight chunk, 8-byte
COO values: frozen below) and of plan.estimate_resources, plus a least-squares fit of the
register formula's constants for reference.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from snn.codegen.plan import config_space, estimate_resources  # noqa: E402
from snn.codegen import emit, ptxas  # noqa: E402
from snn.codegen.config import KernelConfig  # noqa: E402
from snn.codegen.spec import ConvShape, load_spec  # noqa: E402

NETS = ("resnet152", "densenet201", "vgg19")
FLAGS = ["-O3", "-std=c++17", "-Xptxas", "-v"]
CSV_DEFAULT = ROOT / "docs/results/costmodel/ptxas_sample.csv"
FIELDS = ("shape", "C", "N", "H", "W", "R", "S", "stride", "padding", "th", "tw", "tc", "threads", "nt",
          "KC", "WD", "MINB", "reg_cap", "ptxas_regs", "ptxas_smem", "spills", "old_regs", "old_smem")


def old_estimate(shape: ConvShape, c: KernelConfig) -> tuple[int, int]:
    """The estimate before the refit (costmodel at f9bfb70), kept to report before/after."""
    th_in = (c.th - 1) * shape.stride[0] + shape.R
    tw_in = (c.tw - 1) * shape.stride[1] + shape.S
    chunk = 1
    for p in (2, 4, 8, 16, 32, 64, 128, 256, 512):
        if c.tc % p == 0 and 2 * p * shape.R * shape.S * c.threads * c.nt * 4 <= 32 * c.threads:
            chunk = p
    regs = c.th * c.tw * c.nt + c.nt + 32
    smem = th_in * tw_in * c.tc * 8 + c.tc * 4 + 2 * chunk * shape.R * shape.S * c.threads * c.nt * 4
    return regs, smem


def shapes() -> list[ConvShape]:
    out: dict[ConvShape, None] = {}
    for net in NETS:
        distinct = list(dict.fromkeys(c.shape for c in load_spec(ROOT / "network_specs" / f"{net}.yaml").convs))
        out.update(dict.fromkeys(distinct[::4] if net == "densenet201" else distinct))
    return list(out)


def buildable(shape: ConvShape, c: KernelConfig) -> bool:
    try:
        emit.chunk_channels(shape, c)
        return True
    except ValueError:
        return False


def sample(n: int, seed: int = 0) -> list[tuple[ConvShape, KernelConfig]]:
    rng = random.Random(seed)
    shp = shapes()
    # 1x1 stride-1 shapes are most of the list but the least varied kernels: a third of the weight
    weight = [1 if (s.R, s.stride[0]) == (1, 1) else 3 for s in shp]
    per = n / sum(weight)
    out = []
    for s, wgt in zip(shp, weight):
        space = [c for c in config_space(s) if buildable(s, c)]
        out += [(s, c) for c in rng.sample(space, min(math.ceil(per * wgt), len(space)))]
    rng.shuffle(out)
    return out[:n]


def compile_one(job: tuple[ConvShape, KernelConfig]) -> dict:
    shape, c = job
    k = emit.render_sparse(shape, 1, c)
    g = emit.geometry(shape, 1, c)
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / f"{k.name}.cu"
        src.write_text(k.source)
        r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", *FLAGS, "-o", str(Path(d) / "k.cubin"), str(src)],
                           capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{k.name}: {r.stderr[-2000:]}")
    f = ptxas.summarize(ptxas.parse_ptxas(r.stderr + r.stdout))
    old = old_estimate(shape, c)
    return {"shape": shape.tag(), "C": shape.C, "N": shape.N, "H": shape.H, "W": shape.W, "R": shape.R, "S": shape.S,
            "stride": shape.stride[0], "padding": shape.padding[0], "th": c.th, "tw": c.tw, "tc": c.tc,
            "threads": c.threads, "nt": c.nt, "KC": g["KC"], "WD": g["WD"], "MINB": g["MINB"],
            "reg_cap": emit.register_cap(c.threads, g["MINB"]), "ptxas_regs": f["registers"],
            "ptxas_smem": f["smem_static"], "spills": f["spill_stores"] + f["spill_loads"] + f["stack"],
            "old_regs": old[0], "old_smem": old[1]}


def cmd_compile(a) -> None:
    jobs = sample(a.n)
    rows = []
    with ProcessPoolExecutor(a.j) as ex:
        for i, row in enumerate(ex.map(compile_one, jobs, chunksize=1), 1):
            rows.append(row)
            if i % 20 == 0:
                print(f"{i}/{len(jobs)}", file=sys.stderr, flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} kernels -> {a.out}")


def load(path: Path) -> list[tuple[ConvShape, KernelConfig, dict]]:
    out = []
    with open(path) as f:
        for r in csv.DictReader(f):
            s = ConvShape(int(r["C"]), int(r["N"]), int(r["H"]), int(r["W"]), int(r["R"]), int(r["S"]),
                          (int(r["stride"]),) * 2, (int(r["padding"]),) * 2)
            c = KernelConfig(int(r["th"]), int(r["tw"]), int(r["tc"]), int(r["threads"]), int(r["nt"]))
            out.append((s, c, {k: int(v) for k, v in r.items() if k != "shape"}))
    return out


RUN3 = "docs/results/kernels/run3-perf-v2/v2/all.json"
_NAME = re.compile(r"sconv_r(\d+)s(\d+)_str(\d+)_pad(\d+)_c(\d+)n(\d+)_h(\d+)w(\d+)_th(\d+)tw(\d+)tc(\d+)_t(\d+)n(\d+)"
                   r"(?:_w(\d+)x(\d+))?_b(\d+)$")


def parse_kernel(name: str) -> tuple[ConvShape, KernelConfig, int] | None:
    """(shape, config, batch) of a `mask` kernel name (None for other kernels, `_switch` included)."""
    m = _NAME.match(name)
    if not m:
        return None
    R, S, st, pd, C, N, H, W, th, tw, tc, t, nt, wh, ww, b = (int(v) if v else 1 for v in m.groups())
    return ConvShape(C, N, H, W, R, S, (st, st), (pd, pd)), KernelConfig(th, tw, tc, t, nt, wh, ww), b


def _err(est, real) -> str:
    e = np.abs(np.asarray(est, float) - np.asarray(real, float))
    return f"median {np.median(e):.0f}, max {e.max():.0f}, exact {int((e == 0).sum())}/{len(e)}"


def cmd_report(a) -> None:
    rows = load(a.csv)
    real_r = [r["ptxas_regs"] for _, _, r in rows]
    real_s = [r["ptxas_smem"] for _, _, r in rows]
    new = [estimate_resources(s, c) for s, c, _ in rows]
    print(f"{len(rows)} kernels, {len({s for s, _, _ in rows})} shapes, "
          f"{sum(r['spills'] > 0 for _, _, r in rows)} with spills/stack")
    print(f"registers  old: {_err([r['old_regs'] for _, _, r in rows], real_r)}")
    print(f"registers  new: {_err([n[0] for n in new], real_r)}")
    print(f"smem       old: {_err([r['old_smem'] for _, _, r in rows], real_s)}")
    print(f"smem       new: {_err([n[1] for n in new], real_s)}")
    # reference fit of regs = a*acc + b*taps + c over the kernels below the launch-bounds cap
    acc = np.array([c.th * c.tw * c.nt for _, c, _ in rows], float)
    taps = np.array([s.R * s.S * c.nt for s, c, _ in rows], float)
    cap = np.array([r["reg_cap"] for _, _, r in rows], float)
    y = np.array(real_r, float)
    free = y < cap
    X = np.stack([acc, taps, np.ones_like(acc)], 1)[free]
    coef, *_ = np.linalg.lstsq(X, y[free], rcond=None)
    print(f"least squares on {int(free.sum())} uncapped kernels: regs = {coef[0]:.2f}*acc + {coef[1]:.2f}*taps + {coef[2]:.1f}")
    print(f"kernels at the launch-bounds cap: {int((~free).sum())}")
    # held out: the ptxas reports of the H100 perf run (run3, the same emitter), `mask` kernels only
    run3 = json.loads((ROOT / RUN3).read_text())["ptxas"]
    held = [(parse_kernel(n), f) for n, f in run3.items() if parse_kernel(n)]
    est = [estimate_resources(s, c) for (s, c, _), _ in held]
    print(f"held out ({RUN3}, {len(held)} kernels of {len({k[0] for k, _ in held})} shapes):")
    print(f"registers  new: {_err([e[0] for e in est], [f['registers'] for _, f in held])}")
    print(f"registers  old: {_err([old_estimate(s, c)[0] for (s, c, _), _ in held], [f['registers'] for _, f in held])}")
    print(f"smem       new: {_err([e[1] for e in est], [f['smem_static'] for _, f in held])}")
    print(f"smem       old: {_err([old_estimate(s, c)[1] for (s, c, _), _ in held], [f['smem_static'] for _, f in held])}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile")
    c.add_argument("--n", type=int, default=280)
    c.add_argument("-j", type=int, default=os.cpu_count() or 1)
    c.add_argument("--out", type=Path, default=CSV_DEFAULT)
    r = sub.add_parser("report")
    r.add_argument("--csv", type=Path, default=CSV_DEFAULT)
    a = p.parse_args()
    {"compile": cmd_compile, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
