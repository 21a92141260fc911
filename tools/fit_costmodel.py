"""Fit the "snn" cost model's stage-3 constants to measured kernel times and score the models' picks
against them (docs/costmodel.md, "Fitted to H100 measurements"). CPU only; the measurements are the
files you name.

    python tools/fit_costmodel.py picks --out picks.json           # layers, a grid of configs, the plan's picks
    python tools/bench_kernels.py picks.json --out bench           # on the GPU: bench/bench.json
    python tools/fit_costmodel.py scorepicks picks.json bench/bench.json [--md OUT.md]
    python tools/fit_costmodel.py dataset BENCH... --out data.csv  # the rows a fit sees
    python tools/fit_costmodel.py fit BENCH...                     # SNN_FIT on the classic rows: least squares in log space
    python tools/fit_costmodel.py fitws BENCH...                   # SNN_FIT_WS on the warp-tiled rows
    python tools/fit_costmodel.py report BENCH... [--loso]         # the models' picks against the best measured
    python tools/fit_costmodel.py cv BENCH...                      # fit without each batch size, score it
    python tools/fit_costmodel.py holdout BENCH...                 # the current constants, per model and batch

BENCH: JSON written by tools/bench_kernels.py (plain or .gz). One row per (shape, config, batch, level)
with the kernel's measured time (its steps, and after a split that adds with atomics the epilogue launch
that reads its sums); the same kernel
measured in several files is averaged, and a time more than GLITCH times the same kernel's at a lower
level (a kernel cannot get that much slower when its input gets sparser) is dropped as a glitch.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from snn.codegen import emit
from snn.codegen.config import KernelConfig
from snn.codegen.gpu import load_gpu
from snn.codegen.plan import DEFAULT_LEVELS, MODELS, parse_levels, plan_shape, space
from snn.codegen.plan.models import stage3
from snn.codegen.plan.models.snn import SNN_FIT, SNN_FIT_WS
from snn.codegen.plan.movement import stage2
from snn.codegen.plan.occupancy import table_occupancy
from snn.codegen.plan.tables import space_table, table
from snn.codegen.spec import ConvShape

GPU = load_gpu("h100")
MIN_GROUP = 5       # measured configs a (shape, batch, level) needs to be scored
GLITCH = 2.0

_NAME = re.compile(r"sconv_r(\d+)s(\d+)_str(\d+)_pad(\d+)_c(\d+)n(\d+)_h(\d+)w(\d+)_th(\d+)tw(\d+)tc(\d+)_t(\d+)n(\d+)"
                   r"(?:_w(\d+)x(\d+))?_b(\d+)$")


def parse_kernel(name: str) -> tuple[ConvShape, KernelConfig, int] | None:
    """(shape, config, batch) of a sparse kernel's name (KernelConfig.name); None for any other name."""
    m = _NAME.match(name)
    if not m:
        return None
    R, S, st, pd, C, N, H, W, th, tw, tc, t, nt, wh, ww, b = (int(v) if v else 1 for v in m.groups())
    return ConvShape(C, N, H, W, R, S, (st, st), (pd, pd)), KernelConfig(th, tw, tc, t, nt, wh, ww), b


def _read(path: Path) -> dict:
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return json.loads(text)


def load_rows(paths: list[Path]) -> list[dict]:
    """The rows of bench JSON files (module docstring)."""
    raw: dict[tuple, list[float]] = defaultdict(list)
    for path in paths:
        for row in _read(path)["bench"]:
            for name, us in row["all_us"].items():
                p = parse_kernel(name)
                if p:
                    raw[(p[0], p[1], p[2], round(float(row["sparsity"]), 2))].append(float(us))
    mean = {k: float(np.mean(v)) for k, v in raw.items()}
    by_cfg: dict[tuple, list] = defaultdict(list)
    for (shape, cfg, b, lv), u in mean.items():
        by_cfg[(shape, cfg, b)].append((lv, u))
    rows, dropped = [], 0
    for (shape, cfg, b, lv), u in mean.items():
        lower = [u2 for l2, u2 in by_cfg[(shape, cfg, b)] if l2 < lv]
        if lower and u > GLITCH * min(lower):
            dropped += 1
            continue
        rows.append({"shape": shape, "config": cfg, "batch": b, "level": lv, "us": u})
    if dropped:
        print(f"dropped {dropped} glitches (> {GLITCH}x the same kernel's time at a lower level)", file=sys.stderr)
    return sorted(rows, key=lambda r: (r["shape"].tag(), r["batch"], r["level"], r["config"]))


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["shape", "th", "tw", "tc", "threads", "nt", "wh", "ww", "batch", "level", "measured_us"])
        for r in rows:
            c = r["config"]
            w.writerow([r["shape"].tag(), c.th, c.tw, c.tc, c.threads, c.nt, c.wh, c.ww, r["batch"], r["level"],
                        f"{r['us']:.3f}"])


# ---------------------------------------------------------------- predictions

def _arrays(shape: ConvShape, cfgs: list[KernelConfig]) -> dict:
    keys = ("th", "tw", "tc", "threads", "nt", "wh", "ww")
    return table(shape, *(np.array([getattr(c, k) for c in cfgs]) for k in keys))


_PREP: dict[tuple, list] = {}


def _prepared(rows: list[dict]) -> list:
    """Per (shape, batch, level): row indices, config table and occupancy; cached (a fit calls predict a
    few hundred times on the same rows)."""
    key = (id(rows), len(rows))
    if key not in _PREP:
        by: dict[tuple, list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            by[(r["shape"], r["batch"], r["level"])].append(i)
        out = []
        for k, ii in by.items():
            tab = _arrays(k[0], [rows[i]["config"] for i in ii])
            out.append((k, np.array(ii), tab, table_occupancy(tab, GPU)))
        _PREP[key] = out
    return _PREP[key]


def predict(rows: list[dict], model: str, consts: dict | None = None, ws_consts: dict | None = None) -> np.ndarray:
    """Predicted µs of every row (whether or not its config survives stages 1-2); inf where the model
    finds that no block fits an SM (such a config is never picked)."""
    out = np.empty(len(rows))
    for (shape, batch, level), ii, tab, occ in _prepared(rows):
        with np.errstate(divide="ignore", invalid="ignore"):
            s3 = stage3(shape, GPU, tab, occ, batch, 1.0 - level, model, np.arange(len(ii)),
                        consts=consts, ws_consts=ws_consts)
            out[ii] = s3["predicted_us"]
    return np.where(np.isfinite(out) & (out > 0), out, np.inf)


def survivors(rows: list[dict], model: str) -> np.ndarray:
    """True where the row's config survives stages 1-2 of `model` for its shape, batch and level."""
    out = np.zeros(len(rows), bool)
    cache: dict[tuple, set] = {}
    for i, r in enumerate(rows):
        key = (r["shape"], r["batch"], r["level"])
        if key not in cache:
            tab = space_table(r["shape"])
            idx2, _, _ = stage2(r["shape"], GPU, r["batch"], 1.0 - r["level"], model)
            cache[key] = set(space.configs(tab, idx2))
        out[i] = r["config"] in cache[key]
    return out


# ---------------------------------------------------------------- scoring

def groups(rows: list[dict]) -> list[np.ndarray]:
    by: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by[(r["shape"], r["batch"], r["level"])].append(i)
    return [np.array(v) for v in by.values() if len(v) >= MIN_GROUP]


def groups_by_batch(rows: list[dict]) -> dict[int, list[np.ndarray]]:
    out: dict[int, list[np.ndarray]] = {}
    for g in groups(rows):
        out.setdefault(rows[g[0]]["batch"], []).append(g)
    return dict(sorted(out.items()))


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = (np.argsort(np.argsort(x)).astype(float) for x in (a, b))
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def score(rows: list[dict], pred: np.ndarray, surv: np.ndarray | None = None, gs: list[np.ndarray] | None = None) -> dict:
    """Per group: the model's pick among the measured configs (stage-1/2 survivors when any are measured,
    else all of them), measured time of the pick / the best measured; and Spearman's rank correlation of
    predicted vs measured over the group."""
    us = np.array([r["us"] for r in rows])
    ratios, rhos, per = [], [], []
    for g in gs if gs is not None else groups(rows):
        ok = g[np.isfinite(pred[g])]
        cand = ok[surv[ok]] if surv is not None and surv[ok].any() else ok
        pick = cand[np.argmin(pred[cand])]
        ratios.append(us[pick] / us[g].min())
        rhos.append(_spearman(pred[ok], us[ok]))
        r = rows[g[0]]
        per.append((r["shape"].tag(), r["batch"], r["level"], len(g), rows[pick]["config"].tag(), us[pick],
                    rows[g[np.argmin(us[g])]]["config"].tag(), us[g].min()))
    ratios = np.array(ratios)
    return {"groups": len(ratios), "mean_ratio": float(ratios.mean()), "max_ratio": float(ratios.max()),
            "within_5pct": float((ratios <= 1.05).mean()), "rho": float(np.mean(rhos)), "per": per}


def log_rmse(rows: list[dict], pred: np.ndarray) -> float:
    """Over the rows the model can launch."""
    us = np.array([r["us"] for r in rows])
    ok = np.isfinite(pred)
    return float(np.sqrt(np.mean(np.log(pred[ok] / us[ok]) ** 2)))


def by_batch(rows: list[dict], pred: np.ndarray, model: str) -> str:
    """Mean pick ratio per batch: stages 1-2 first / stage 3 alone."""
    surv = survivors(rows, model)
    return "; ".join(f"batch {b}: {score(rows, pred, surv, gb)['mean_ratio']:.3f} / "
                     f"{score(rows, pred, None, gb)['mean_ratio']:.3f} ({len(gb)} groups)"
                     for b, gb in groups_by_batch(rows).items())


# ---------------------------------------------------------------- picks: what to measure, before measuring it

# (label, C, N, H): ResNet-152's and DenseNet-201's 3x3 layers (stride 1, pad 1) and ResNet-152's 1x1 ones
LAYERS_3X3 = [("resnet152 64->64 @56", 64, 64, 56), ("resnet152 128->128 @28", 128, 128, 28),
              ("resnet152 256->256 @14", 256, 256, 14), ("resnet152 512->512 @7", 512, 512, 7),
              ("densenet201 128->32 @56", 128, 32, 56), ("densenet201 128->32 @28", 128, 32, 28),
              ("densenet201 128->32 @14", 128, 32, 14), ("densenet201 128->32 @7", 128, 32, 7)]
LAYERS_1X1 = [("resnet152 1x1 1024->256 @14", 1024, 256, 14), ("resnet152 1x1 256->1024 @14", 256, 1024, 14),
              ("resnet152 1x1 512->128 @28", 512, 128, 28), ("resnet152 1x1 128->512 @28", 128, 512, 28),
              ("resnet152 1x1 2048->512 @7", 2048, 512, 7), ("resnet152 1x1 512->2048 @7", 512, 2048, 7)]
PICK_BATCHES, PICK_LEVELS = (1, 8, 32), (0.6, 0.8)


def layers(kinds: str = "both") -> list[tuple[str, ConvShape]]:
    three = [(lab, ConvShape(c, n, h, h, 3, 3, (1, 1), (1, 1))) for lab, c, n, h in LAYERS_3X3]
    one = [(lab, ConvShape(c, n, h, h, 1, 1, (1, 1), (0, 0))) for lab, c, n, h in LAYERS_1X1]
    return {"3x3": three, "1x1": one, "both": three + one}[kinds]


def _classic_grid(shape: ConvShape, batch: int) -> list[KernelConfig]:
    """Tiles 4x4/4x8/7x7/8x8, 32-128 threads x nt 1-4 (NB <= max(N, 32), <= 64 accumulators), tc 8/32 at
    batch 1 and 32/64 at batch > 1; for 1x1 convs also 1x7/2x4/1x14 tiles, nt 8 and tc 128 at batch > 1;
    what the emitter cannot build left out."""
    one = shape.R * shape.S == 1
    tiles = ((4, 4), (4, 8), (7, 7), (8, 8)) + (((1, 7), (2, 4), (1, 14)) if one else ())
    chans = ((32, 1), (64, 1), (128, 1), (32, 2), (64, 2), (32, 4)) + (((32, 8), (64, 8)) if one else ())
    out = []
    for th, tw in tiles:
        th, tw = min(th, shape.P), min(tw, shape.Q)
        for threads, nt in chans:
            for tc in ((8, 32) if batch == 1 else (32, 64, 128) if one else (32, 64)):
                c = KernelConfig(th, tw, min(tc, shape.C), threads, nt)
                if threads * nt > max(shape.N, 32) or th * tw * nt > (112 if one else 64) or shape.N % nt:
                    continue
                try:
                    emit.check_config(shape, c)
                    emit.geometry(shape, batch, c)
                except ValueError:
                    continue
                out.append(c)
    return out


WS_GRID_TILES = ((4, 4, 4), (4, 4, 2), (4, 8, 2), (4, 8, 1), (8, 8, 1), (4, 4, 8), (2, 7, 4), (2, 7, 2), (2, 7, 1),
                 (7, 2, 4))
WS_GRID_TILES_1X1 = ((1, 7, 8), (1, 14, 8), (2, 7, 8), (1, 7, 4), (2, 7, 4), (4, 4, 4), (2, 4, 8))
WS_GRID_WARPS = ((2, 2), (2, 4), (4, 2), (1, 2), (2, 1), (7, 1), (7, 2), (2, 7), (4, 1))


def _ws_grid(shape: ConvShape, batch: int) -> list[KernelConfig]:
    """Warp-tiled configs (batch >= plan.space.WS_MIN_BATCH) of plan.space.ws_space(one_by_one=True): warp tiles
    (th, tw, nt) of WS_GRID_TILES clipped to P and Q, blocks of WS_GRID_WARPS, tc 32 / 64 / 128 clipped to C."""
    if batch < space.WS_MIN_BATCH:
        return []
    allowed = set(space.ws_space(shape, one_by_one=True))
    tiles = WS_GRID_TILES_1X1 if shape.R * shape.S == 1 else WS_GRID_TILES
    return [c for th, tw, nt in tiles for wh, ww in WS_GRID_WARPS for tc in (32, 64, 128)
            for c in [KernelConfig(min(th, shape.P), min(tw, shape.Q), min(tc, shape.C), 32, nt, wh, ww)]
            if c in allowed]


def pick_grid(shape: ConvShape, batch: int) -> list[KernelConfig]:
    """The reference grid `picks` writes: both families, wider than what the planner keeps."""
    return sorted(set(_classic_grid(shape, batch)) | set(_ws_grid(shape, batch)))


def picks(batches=PICK_BATCHES, kinds: str = "both", pick_levels=PICK_LEVELS) -> dict:
    """Written before the device run that measures it: per layer, batch and level, the reference grid and the
    plan's pick (full configuration space, the build's level sweep) of the "snn" model."""
    levels = parse_levels(DEFAULT_LEVELS)
    out = []
    for label, sh in layers(kinds):
        conv = {"C": sh.C, "N": sh.N, "H": sh.H, "W": sh.W, "R": sh.R, "S": sh.S, "stride": list(sh.stride),
                "padding": list(sh.padding)}
        for b in batches:
            plan = plan_shape(sh, GPU, b, levels, "snn")
            grid = [c.to_dict() for c in pick_grid(sh, b)]
            for lv in pick_levels:
                out.append({"layer": label, "shape": sh.tag(), "conv": conv, "batch": b, "level": lv, "grid": grid,
                            "plan": plan[lv].config.to_dict(), "plan_us": round(plan[lv].predicted_us, 2)})
    return {"gpu": GPU.name, "model": "snn", "levels": list(pick_levels), "batches": list(batches), "groups": out}


def score_picks(spec: dict, bench: dict) -> str:
    """Markdown: per group, the measured time of the plan's pick over the best measured kernel (the grid and
    the pick), and of the model's pick among the grid alone; means per batch."""
    meas = {(r["shape"], r["batch"], round(float(r["sparsity"]), 2)): r["all_us"] for r in bench["bench"]}
    lines = ["| layer | B | sparsity | best µs (kernel) | plan: pick µs, ratio | grid only: ratio |",
             "| --- | --- | --- | --- | --- | --- |"]
    ratios: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for g in spec["groups"]:
        all_us = meas.get((g["shape"], g["batch"], round(float(g["level"]), 2)))
        if not all_us:
            continue
        c = g["conv"]
        shape = ConvShape(c["C"], c["N"], c["H"], c["W"], c["R"], c["S"], tuple(c["stride"]), tuple(c["padding"]))
        best_name = min(all_us, key=all_us.get)
        best = all_us[best_name]
        plan = KernelConfig.from_dict(g["plan"])
        t_plan = all_us.get(plan.name(shape, g["batch"]), math.nan)
        # the model's choice among the grid alone (stages 1-2 first, as `report` scores)
        rows = [{"shape": shape, "config": cfg, "batch": g["batch"], "level": g["level"], "us": all_us[n]}
                for cfg in map(KernelConfig.from_dict, g["grid"]) for n in [cfg.name(shape, g["batch"])] if n in all_us]
        if not rows:
            continue
        pred, surv = predict(rows, "snn"), survivors(rows, "snn")
        cand = np.flatnonzero(surv & np.isfinite(pred)) if (surv & np.isfinite(pred)).any() else np.flatnonzero(np.isfinite(pred))
        t_grid = rows[cand[np.argmin(pred[cand])]]["us"] / min(r["us"] for r in rows)
        ratios[g["batch"]].append((t_plan / best, t_grid))
        lines.append(f"| {g['layer']} | {g['batch']} | {g['level']} | {best:.1f} ({best_name.split('_', 6)[-1]}) | "
                     f"{t_plan:.1f} ({plan.tag()}), {t_plan / best:.2f} | {t_grid:.2f} |")
    lines += ["", "| batch | groups | plan: mean ratio | grid only |", "| --- | --- | --- | --- |"]
    every = []
    for b, v in sorted(ratios.items()):
        every += v
        m = np.nanmean(np.array(v), axis=0)
        lines.append(f"| {b} | {len(v)} | {m[0]:.3f} | {m[1]:.3f} |")
    if every:
        m = np.nanmean(np.array(every), axis=0)
        lines.append(f"| all | {len(every)} | {m[0]:.3f} | {m[1]:.3f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- fitting

WS_FIXED = ("w_ins",)  # not used by the warp-tiled family
AROUND = ("epilogue_us", "cluster_us")  # not fitted: the split's epilogue launch (priced as one launch) and a cluster's sum


def fit(rows: list[dict], start: dict | None = None, ws: bool = False) -> dict:
    """Least squares of log(predicted / measured) over all rows, constants kept positive: SNN_FIT, or with `ws`
    SNN_FIT_WS (WS_FIXED left as they are; every batch size weighs the same)."""
    from scipy.optimize import least_squares
    base = SNN_FIT_WS if ws else SNN_FIT
    names = [n for n in base if not (ws and n in WS_FIXED) and n not in AROUND]
    x0 = np.log([float((start or base)[k]) for k in names])
    us = np.array([r["us"] for r in rows])
    per_batch: dict[int, int] = defaultdict(int)
    for r in rows:
        per_batch[r["batch"]] += 1
    weight = np.array([1.0 / np.sqrt(per_batch[r["batch"]]) if ws else 1.0 for r in rows])

    def resid(x):
        c = dict(zip(names, np.exp(x)))
        p = predict(rows, "snn", ws_consts=c) if ws else predict(rows, "snn", c)
        return np.where(np.isfinite(p), np.log(p / us), 0.0) * weight

    sol = least_squares(resid, x0, method="trf", x_scale=1.0, diff_step=1e-3, max_nfev=400)
    return {**(base if ws else {}), **dict(zip(names, (float(v) for v in np.exp(sol.x))))}


def ws_report(rows: list[dict], fitted: dict) -> str:
    """Warp-tiled rows per batch and conv kind: log bias, log rmse and pick ratio (stages 1-2 first) of
    SNN_FIT_WS now and of `fitted`; then each kind held out (fitted on the other kind's rows); then the pick
    where both families were measured."""
    out = ["| rows | batch | model | log bias | log rmse | pick / best (groups) |",
           "| --- | --- | --- | --- | --- | --- |"]
    ws_rows = [r for r in rows if r["config"].warp_tiled]
    kinds = {"3x3": lambda r: r["shape"].R == 3, "1x1": lambda r: r["shape"].R == 1}

    def line(label, rr, consts, which):
        for b in sorted({r["batch"] for r in rr}):
            sub = [r for r in rr if r["batch"] == b]
            pred = predict(sub, "snn", ws_consts=consts)
            err = np.log(pred / np.array([r["us"] for r in sub]))
            s = score(sub, pred, survivors(sub, "snn")) if groups(sub) else {"mean_ratio": math.nan, "groups": 0}
            out.append(f"| {label} | {b} | {which} | {err.mean():+.3f} | {np.sqrt((err ** 2).mean()):.3f} | "
                       f"{s['mean_ratio']:.3f} ({s['groups']}) |")
    for k, f in kinds.items():
        rr = [r for r in ws_rows if f(r)]
        other = [r for r in ws_rows if not f(r)]
        if not rr:
            continue
        line(k, rr, None, "current")
        line(k, rr, fitted, "fitted")
        if other:
            line(f"{k}, held out", rr, fit(other, ws=True), "fitted on the rest")
    out += ["", "Both families measured: pick / best, stages 1-2 first", "",
            "| batch | current | fitted | groups |", "| --- | --- | --- | --- |"]
    surv = survivors(rows, "snn")
    for b, gb in groups_by_batch(rows).items():
        gs = [g for g in gb if len({rows[i]["config"].warp_tiled for i in g}) == 2]
        if gs:
            now, new = (score(rows, predict(rows, "snn", ws_consts=c), surv, gs)["mean_ratio"] for c in (None, fitted))
            out.append(f"| {b} | {now:.3f} | {new:.3f} | {len(gs)} |")
    return "\n".join(out)


def _fmt(c: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in c.items())


# ---------------------------------------------------------------- commands

def report(rows: list[dict], loso: bool, show_groups: bool) -> None:
    print(f"{len(rows)} rows, {len(groups(rows))} groups of >= {MIN_GROUP} measured configs")
    print("model | groups | mean ratio | max ratio | picks within 5 % | mean Spearman | log rmse")
    for model in MODELS:
        pred = predict(rows, model)
        for restrict in (False, True):
            s = score(rows, pred, survivors(rows, model) if restrict else None)
            print(f"{model}{' (stages 1-2 first)' if restrict else ''} | {s['groups']} | {s['mean_ratio']:.3f} | "
                  f"{s['max_ratio']:.3f} | {s['within_5pct']:.0%} | {s['rho']:.3f} | {log_rmse(rows, pred):.3f}")
            if not restrict:
                for b, gb in groups_by_batch(rows).items():
                    sb = score(rows, pred, survivors(rows, model), gb)
                    print(f"    batch {b}, stages 1-2 first: {sb['groups']} groups, mean ratio {sb['mean_ratio']:.3f}, "
                          f"Spearman {sb['rho']:.3f}")
            if show_groups and restrict:
                for g in s["per"]:
                    print("   ", *g)
    if loso:  # each shape with a group: SNN_FIT fitted on the other shapes' classic rows, scored on its own
        gs_all = groups(rows)
        pred = predict(rows, "snn")
        for sh in sorted({rows[g[0]]["shape"] for g in gs_all}, key=lambda s: s.tag()):
            c = fit([r for r in rows if r["shape"] != sh and not r["config"].warp_tiled], SNN_FIT)
            ii = [i for i, r in enumerate(rows) if r["shape"] == sh]
            pred[ii] = predict([rows[i] for i in ii], "snn", c)
            print(f"  without {sh.tag()}: {_fmt(c)}")
        for restrict in (False, True):
            s = score(rows, pred, survivors(rows, "snn") if restrict else None, gs_all)
            print(f"snn, leave one shape out{' (stages 1-2 first)' if restrict else ''} | {s['groups']} | "
                  f"{s['mean_ratio']:.3f} | {s['max_ratio']:.3f} | {s['within_5pct']:.0%} | {s['rho']:.3f} | -")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("picks", help="the layers, a grid of configs and the plan's picks, for bench_kernels.py")
    pk.add_argument("--out", type=Path, required=True)
    pk.add_argument("--batches", default=",".join(map(str, PICK_BATCHES)))
    pk.add_argument("--levels", default=",".join(map(str, PICK_LEVELS)))
    pk.add_argument("--layers", choices=("both", "3x3", "1x1"), default="both")
    sp = sub.add_parser("scorepicks", help="the plan's picks of a picks file against its measurements")
    sp.add_argument("picks", type=Path)
    sp.add_argument("bench", type=Path)
    sp.add_argument("--md", type=Path, default=None)
    for name, what in (("dataset", "write the rows as CSV"), ("fit", "fit SNN_FIT"), ("fitws", "fit SNN_FIT_WS"),
                       ("report", "score the models"), ("cv", "fit without each batch size, score it"),
                       ("holdout", "score the current constants per model and batch")):
        c = sub.add_parser(name, help=what)
        c.add_argument("bench", nargs="+", type=Path, help="tools/bench_kernels.py JSON files")
        if name == "dataset":
            c.add_argument("--out", type=Path, required=True)
        if name == "report":
            c.add_argument("--loso", action="store_true", help="also leave one shape out: fit without it, score it")
            c.add_argument("--groups", action="store_true", help="print every group's picks")
    a = p.parse_args()
    if a.cmd == "picks":
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(picks(tuple(int(b) for b in a.batches.split(",")), a.layers,
                                          tuple(float(v) for v in a.levels.split(","))), indent=1))
        print(f"wrote {a.out}")
        return
    if a.cmd == "scorepicks":
        md = score_picks(json.loads(a.picks.read_text()), _read(a.bench))
        print(md)
        if a.md:
            a.md.write_text(md + "\n")
        return
    rows = load_rows(a.bench)
    classic = [r for r in rows if not r["config"].warp_tiled]  # what SNN_FIT prices
    if a.cmd == "dataset":
        write_csv(rows, a.out)
        print(f"{len(rows)} rows, {len({r['shape'] for r in rows})} shapes, {len(groups(rows))} groups of "
              f">= {MIN_GROUP} configs -> {a.out}")
    elif a.cmd == "fit":
        c = fit(classic)
        print(f"{len(classic)} classic rows; fitted: {_fmt(c)}")
        print(f"log rmse: now {log_rmse(classic, predict(classic, 'snn')):.3f}, "
              f"fitted {log_rmse(classic, predict(classic, 'snn', c)):.3f}")
    elif a.cmd == "fitws":
        ws = [r for r in rows if r["config"].warp_tiled]
        c = fit(ws, ws=True)
        print(f"{len(ws)} warp-tiled rows; fitted: {_fmt(c)}")
        print(ws_report(rows, c))
    elif a.cmd == "report":
        report(rows, a.loso, a.groups)
    elif a.cmd == "cv":
        print("held out | constants fitted on the rest | pick ratio, stages 1-2 first / stage 3 alone")
        for b in sorted({r["batch"] for r in classic}):
            test = [r for r in classic if r["batch"] == b]
            c = fit([r for r in classic if r["batch"] != b], SNN_FIT)
            print(f"batch {b} | {_fmt(c)} | {by_batch(test, predict(test, 'snn', c), 'snn')}, "
                  f"log rmse {log_rmse(test, predict(test, 'snn', c)):.3f}")
    else:  # holdout
        print(f"{len(rows)} rows, {len(groups(rows))} groups of >= {MIN_GROUP} measured configs")
        print("model | batch | groups | mean ratio | max ratio | picks within 5 % | mean Spearman")
        for model in MODELS:
            pred = predict(rows, model)
            for restrict in (False, True):
                for b, gb in groups_by_batch(rows).items():
                    s = score(rows, pred, survivors(rows, model) if restrict else None, gb)
                    print(f"{model}{' (stages 1-2 first)' if restrict else ''} | {b} | {s['groups']} | "
                          f"{s['mean_ratio']:.3f} | {s['max_ratio']:.3f} | {s['within_5pct']:.0%} | {s['rho']:.3f}")


if __name__ == "__main__":
    main()
