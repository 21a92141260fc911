"""Compile a sample of sparse-conv kernels and compare ptxas' registers and shared memory with the cost
model's estimate (docs/costmodel.md, "Estimate vs ptxas"). CPU and nvcc only.

    python tools/fit_resources.py compile --out sample.csv [--n 280] [-j 2]
    python tools/fit_resources.py report sample.csv

`compile`: the distinct conv shapes of resnet152, densenet201 and vgg19 (one in four of DenseNet-201's:
all of them would swamp the sample), configs of both families drawn at random (seed 0) from
config_space(shape), rendered as the build renders them (batch 1) and compiled through codegen/compile.py
(the cubin cache: a second run is free). One CSV row per kernel; shared memory is static + the launch's
dynamic bytes (the warp-tiled kernel's is all dynamic).
`report`: median / max absolute error of plan.estimate_resources against ptxas, per family, and a
least-squares fit of the classic register formula's constants for reference.
"""
from __future__ import annotations

import argparse
import csv
import math
import random
import sys
from pathlib import Path

import numpy as np

from snn.codegen import emit
from snn.codegen.compile import Compiler, resources
from snn.codegen.config import KernelConfig
from snn.codegen.kernel_rules import min_blocks, register_cap, ws_params
from snn.codegen.plan import config_space, estimate_resources
from snn.codegen.spec import ConvShape, load_spec

NETS = ("resnet152", "densenet201", "vgg19")
SPECS = Path(__file__).resolve().parents[1] / "network_specs"
FIELDS = ("shape", "C", "N", "H", "W", "R", "S", "stride", "padding", "th", "tw", "tc", "threads", "nt", "wh", "ww",
          "reg_cap", "ptxas_regs", "ptxas_smem", "spills")


def shapes() -> list[ConvShape]:
    out: dict[ConvShape, None] = {}
    for net in NETS:
        distinct = load_spec(SPECS / f"{net}.yaml").conv_shapes()
        out.update(dict.fromkeys(distinct[::4] if net == "densenet201" else distinct))
    return list(out)


def sample(n: int, seed: int = 0) -> list[tuple[ConvShape, KernelConfig]]:
    rng = random.Random(seed)
    shp = shapes()
    # 1x1 stride-1 shapes are most of the list but the least varied kernels: a third of the weight
    weight = [1 if (s.R, s.stride[0]) == (1, 1) else 3 for s in shp]
    per = n / sum(weight)
    out = []
    for s, wgt in zip(shp, weight):
        space = config_space(s)
        out += [(s, c) for c in rng.sample(space, min(math.ceil(per * wgt), len(space)))]
    rng.shuffle(out)
    return out[:n]


def cmd_compile(a) -> None:
    jobs = sample(a.n)
    kernels = {}
    for shape, c in jobs:
        try:
            k = emit.render_sparse(shape, 1, c)
        except ValueError as e:  # config_space should hold only buildable configs: say so if not
            print(f"not buildable: {c.name(shape, 1)}: {e}", file=sys.stderr)
            continue
        kernels[k.name] = (shape, c, k)
    records = Compiler(jobs=a.j).compile({n: k.source for n, (_, _, k) in kernels.items()}, "sm_90").records
    rows = []
    for name, (shape, c, k) in kernels.items():
        f = resources(records[name])
        cap = ws_params(shape, c)["REG_CAP"] if c.warp_tiled else register_cap(c.threads, min_blocks(shape, c))
        rows.append({"shape": shape.tag(), "C": shape.C, "N": shape.N, "H": shape.H, "W": shape.W, "R": shape.R,
                     "S": shape.S, "stride": shape.stride[0], "padding": shape.padding[0], "th": c.th, "tw": c.tw,
                     "tc": c.tc, "threads": c.threads, "nt": c.nt, "wh": c.wh, "ww": c.ww,
                     "reg_cap": cap, "ptxas_regs": f["registers"],
                     "ptxas_smem": f["smem_static"] + k.steps[-1]["smem"],
                     "spills": f["spill_stores"] + f["spill_loads"] + f["stack"]})
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} kernels -> {a.out}")


def load(path: Path) -> list[tuple[ConvShape, KernelConfig, dict]]:
    out = []
    with open(path) as f:
        for r in csv.DictReader(f):
            s = ConvShape(int(r["C"]), int(r["N"]), int(r["H"]), int(r["W"]), int(r["R"]), int(r["S"]),
                          (int(r["stride"]),) * 2, (int(r["padding"]),) * 2)
            c = KernelConfig(int(r["th"]), int(r["tw"]), int(r["tc"]), int(r["threads"]), int(r["nt"]),
                             int(r["wh"]), int(r["ww"]))
            out.append((s, c, {k: int(v) for k, v in r.items() if k != "shape"}))
    return out


def _err(est, real) -> str:
    e = np.abs(np.asarray(est, float) - np.asarray(real, float))
    return f"median {np.median(e):.0f}, max {e.max():.0f}, exact {int((e == 0).sum())}/{len(e)}"


def cmd_report(a) -> None:
    rows = load(a.csv)
    print(f"{len(rows)} kernels, {len({s for s, _, _ in rows})} shapes, "
          f"{sum(r['spills'] > 0 for _, _, r in rows)} with spills or stack")
    for family, sel in (("classic", False), ("warp-tiled", True)):
        rr = [(s, c, r) for s, c, r in rows if c.warp_tiled == sel]
        if not rr:
            continue
        est = [estimate_resources(s, c) for s, c, _ in rr]
        print(f"{family} ({len(rr)}): registers {_err([e[0] for e in est], [r['ptxas_regs'] for _, _, r in rr])}; "
              f"smem {_err([e[1] for e in est], [r['ptxas_smem'] for _, _, r in rr])}")
    # reference fit of regs = a*acc + b*taps + c over the classic kernels below the launch-bounds cap
    rr = [(s, c, r) for s, c, r in rows if not c.warp_tiled]
    acc = np.array([c.th * c.tw * c.nt for _, c, _ in rr], float)
    taps = np.array([s.R * s.S * c.nt for s, c, _ in rr], float)
    y = np.array([r["ptxas_regs"] for _, _, r in rr], float)
    free = y < np.array([r["reg_cap"] for _, _, r in rr], float)
    if free.sum() >= 3:
        coef, *_ = np.linalg.lstsq(np.stack([acc, taps, np.ones_like(acc)], 1)[free], y[free], rcond=None)
        print(f"least squares on {int(free.sum())} uncapped classic kernels: regs = {coef[0]:.2f}*acc + "
              f"{coef[1]:.2f}*taps + {coef[2]:.1f}; at the launch-bounds cap: {int((~free).sum())}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--n", type=int, default=280)
    c.add_argument("-j", type=int, default=None, help="nvcc jobs (default: every CPU)")
    r = sub.add_parser("report")
    r.add_argument("csv", type=Path)
    a = p.parse_args()
    {"compile": cmd_compile, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
