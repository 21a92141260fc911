"""Fit the "snn" cost model's stage-3 constants to the H100 measurements committed in docs/results,
and compare the models' picks with the measured best (docs/costmodel.md, "Fitted to H100
measurements"). CPU only, from the committed files.

    python tools/fit_costmodel.py dataset            # -> docs/results/costmodel/h100_dataset.csv
    python tools/fit_costmodel.py fit                # least squares in log space: the constants
    python tools/fit_costmodel.py report [--loso]    # old vs new (and paper): pick ratio, rank correlation
    python tools/fit_costmodel.py holdout JSON...    # the fitted model on check_kernels bench JSONs it never saw
    python tools/fit_costmodel.py cv                 # fit without run6's batch-B rows, score them (B = 8, 32)
    python tools/fit_costmodel.py fitws              # the warp-tiled family's constants (SNN_FIT_WS) on WS_DATA
    python tools/fit_costmodel.py picks --out P.json # the reference grid and both models' picks, before a run
    python tools/fit_costmodel.py scorepicks P.json BENCH.json [--md OUT.md]   # ... scored after it

Dataset: one row per (shape, config, batch, level) with a measured median time of the kernel's
steps (memset when tc < C + the conv kernel), the same emitter as today's (`mask` pixel loop):
  run3   docs/results/kernels/run3-perf-v2/v2/all.json: every candidate of 8 3x3 layers, batch 1 and 32,
         levels 0.5/0.7/0.9/0.99 (`_switch` kernels dropped: the build emits `mask`)
  run4   docs/results/kernels/run4-perf-v3-reverted/v3/all.json: the same layout, kept only where the v3
         emitter's weight ring depth equals today's (tc <= 4: byte-identical kernels)
  calib  docs/results/h100/bench/calibrate_resnet152.json: the exhaustive 24 configs x 4 shapes (batch 1,
         0.7) and the plan's pick per level 0.40..0.90
  layers docs/results/h100/bench/layers_{resnet152,densenet201,vgg19}.json: the plan's pick per shape,
         batch 1/8/32 and level 0.5/0.7/0.9
  run6   docs/results/kernels/run6-images/bench.json: the one-image kernels of that bench (8 3x3 + 4 1x1
         ResNet-152 layers, batch 8 and 32, tc = min(C, 128), levels 0.5/0.7/0.9/0.99)
Duplicates (same kernel, batch, level from several files) are averaged.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from snn.codegen.config import KernelConfig  # noqa: E402
from snn.codegen.gpu import load_gpu  # noqa: E402
from snn.codegen.kernel_rules import weight_ring_depth  # noqa: E402
from snn.codegen.plan import models, movement, occupancy, planner, space, tables  # noqa: E402
from snn.codegen.plan.models import snn as snn_model  # noqa: E402
from snn.codegen.spec import ConvShape  # noqa: E402
from fit_resources import parse_kernel  # noqa: E402

# The current cost model under the names it had as one module, codegen/costmodel.py: the functions below take
# either this or that module of an earlier commit, loaded from git (before_model).
cm = SimpleNamespace(__name__="snn.codegen.plan", _table=tables.table, _occupancy=occupancy.table_occupancy,
                     _time=models.stage3, _space_table=tables.space_table, _stage2=movement.stage2,
                     _configs=space.configs, ws_space=space.ws_space, plan_shape=planner.plan_shape,
                     SNN_FIT=snn_model.SNN_FIT, SNN_FIT_WS=snn_model.SNN_FIT_WS, WS_MIN_BATCH=space.WS_MIN_BATCH)

RES = ROOT / "docs/results"
CSV_DEFAULT = RES / "costmodel/h100_dataset.csv"
RUN6 = RES / "kernels/run6-images/bench.json"
GPU = load_gpu("h100")
MIN_GROUP = 5
GLITCH = 2.0
DROPPED: list = []


def _v3_depth(shape: ConvShape, c: KernelConfig) -> int:
    """emit.weight_ring_depth with run4's constants (WEIGHT_RING_DEPTH 16, WEIGHT_RING_LIMIT 24 KB)."""
    slot = shape.R * shape.S * c.threads * c.nt * 4
    return max(1, min(16, c.tc, 24 * 1024 // slot))


def dataset() -> list[dict]:
    raw: dict[tuple, list] = defaultdict(list)

    def add(name: str, level: float, us: float, source: str, batch: int | None = None) -> None:
        p = parse_kernel(name)
        if p is None or us is None:
            return
        shape, cfg, b = p
        raw[(shape, cfg, batch or b, round(float(level), 2))].append((float(us), source))

    for run, src in (("run3-perf-v2/v2", "run3"), ("run4-perf-v3-reverted/v3", "run4")):
        for row in json.loads((RES / "kernels" / run / "all.json").read_text())["bench"]:
            for name, us in row["all_us"].items():
                p = parse_kernel(name)
                if p and (src == "run3" or _v3_depth(p[0], p[1]) == weight_ring_depth(p[0], p[1])):
                    add(name, row["sparsity"], us, src)
    cal = json.loads((RES / "h100/bench/calibrate_resnet152.json").read_text())
    for ex in cal["exhaustive"]:
        for c in ex["candidates"]:
            add(c["kernel"], ex["level"], c.get("measured_us"), "calib")
    for key, m in cal["measurements"].items():
        _, _, level, name = key.split("|")
        add(name, float(level), m["sparse_us"], "calib")
    for r in holdout_rows([RUN6]):
        raw[(r["shape"], r["config"], r["batch"], r["level"])].append((r["us"], "run6"))
    for net in ("resnet152", "densenet201", "vgg19"):
        for sh in json.loads((RES / f"h100/bench/layers_{net}.json").read_text())["shapes"]:
            for b, bb in sh["batches"].items():
                for lv, x in bb["levels"].items():
                    add(x["kernel"], float(lv), x["times"]["sparse"]["median_us"], "layers", int(b))
    # A kernel cannot get GLITCH times slower when its input gets sparser: such a time is a glitch of the
    # measurement (run3 has 301.7 µs for a batch-1 kernel that takes 20.6 at 0.7 and 16.7 at 0.99).
    # Dropped, and listed by `dataset`.
    mean = {k: float(np.mean([u for u, _ in v])) for k, v in raw.items()}
    by_cfg: dict[tuple, list] = defaultdict(list)
    for (shape, cfg, b, lv), u in mean.items():
        by_cfg[(shape, cfg, b)].append((lv, u))
    rows = []
    for (shape, cfg, b, lv), v in raw.items():
        lower = [u for l2, u in by_cfg[(shape, cfg, b)] if l2 < lv]
        if lower and mean[(shape, cfg, b, lv)] > GLITCH * min(lower):
            DROPPED.append((shape.tag(), cfg.tag(), b, lv, round(mean[(shape, cfg, b, lv)], 2), round(min(lower), 2)))
            continue
        rows.append({"shape": shape, "config": cfg, "batch": b, "level": lv, "us": float(np.mean([u for u, _ in v])),
                     "sources": "+".join(sorted({s for _, s in v}))})
    rows.sort(key=lambda r: (r["shape"].tag(), r["batch"], r["level"], r["config"]))
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["shape", "th", "tw", "tc", "threads", "nt", "batch", "level", "measured_us", "sources"])
        for r in rows:
            c = r["config"]
            w.writerow([r["shape"].tag(), c.th, c.tw, c.tc, c.threads, c.nt, r["batch"], r["level"], f"{r['us']:.3f}",
                        r["sources"]])


def holdout_rows(paths: list[Path]) -> list[dict]:
    """Rows of check_kernels bench JSONs (the `mask` kernels of the build's emitter: no `_switch`, no
    `_g`/`_i` variants), for scoring a model on measurements it was not fitted to."""
    import re
    raw: dict[tuple, list] = defaultdict(list)
    for path in paths:
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        for row in json.loads(text)["bench"]:
            for name, us in row["all_us"].items():
                if re.search(r"_b\d+_", name) or name.endswith("_switch"):
                    continue
                p = parse_kernel(name)
                if p:
                    raw[(p[0], p[1], p[2], round(float(row["sparsity"]), 2))].append(float(us))
    return sorted(({"shape": sh, "config": c, "batch": b, "level": lv, "us": float(np.mean(v)), "sources": "holdout"}
                   for (sh, c, b, lv), v in raw.items()), key=lambda r: (r["shape"].tag(), r["batch"], r["level"], r["config"]))


# ---------------------------------------------------------------- features and predictions

def _arrays(shape: ConvShape, cfgs: list[KernelConfig], mod=cm) -> dict:
    keys = ("th", "tw", "tc", "threads", "nt") + (("wh", "ww") if hasattr(mod, "ws_space") else ())
    return mod._table(shape, *(np.array([getattr(c, k) for c in cfgs]) for k in keys))


BEFORE = "f9bfb70"  # the cost model before this refit (its resource estimate and stage 3)
PREVIOUS = "9118a6e"  # session 5's final model (warp-tiled configs for 3x3 convs only); run17-run21: bba7efc


def before_model(commit: str = BEFORE):
    """codegen/costmodel.py as of `commit`, loaded from git as module codegen._costmodel_<commit>."""
    import importlib.util
    import subprocess
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:codegen/costmodel.py"], capture_output=True,
                         text=True, check=True).stdout
    spec = importlib.util.spec_from_loader(f"codegen._costmodel_{commit}", loader=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "codegen"
    sys.modules[spec.name] = mod
    sys.modules.setdefault("codegen.occupancy", occupancy)  # its `from .occupancy import block_limits`: now plan's
    exec(compile(src, f"{commit}:codegen/costmodel.py", "exec"), mod.__dict__)
    return mod


def predict(rows: list[dict], model: str, consts: dict | None = None, mod=cm,
            ws_consts: dict | None = None) -> np.ndarray:
    """Predicted µs of every row (whether or not its config survives stages 1-2)."""
    out = np.empty(len(rows))
    extra = {"consts": consts, "ws_consts": ws_consts} if mod is cm else {}
    for (shape, batch, level), ii, tab, occ in _prepared(rows, mod):
        with np.errstate(divide="ignore", invalid="ignore"):
            out[ii] = mod._time(shape, GPU, tab, occ, batch, 1.0 - level, model, np.arange(len(ii)), **extra)["predicted_us"]
    # what cannot launch (no block fits an SM under that model's estimate) is never picked
    return np.where(np.isfinite(out) & (out > 0), out, np.inf)


_PREP: dict[tuple, list] = {}


def _prepared(rows: list[dict], mod) -> list:
    """Per (shape, batch, level): row indices, config table and occupancy; cached (the fit calls
    predict a few hundred times on the same rows)."""
    key = (id(rows), len(rows), mod.__name__)
    if key not in _PREP:
        by: dict[tuple, list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            by[(r["shape"], r["batch"], r["level"])].append(i)
        out = []
        for k, ii in by.items():
            tab = _arrays(k[0], [rows[i]["config"] for i in ii], mod)
            out.append((k, np.array(ii), tab, mod._occupancy(tab, GPU)))
        _PREP[key] = out
    return _PREP[key]


def groups_by_batch(rows: list[dict]) -> dict[int, list[np.ndarray]]:
    """groups(rows) split by batch, batches ascending (those with no group left out)."""
    out: dict[int, list[np.ndarray]] = {}
    for g in groups(rows):
        out.setdefault(rows[g[0]]["batch"], []).append(g)
    return dict(sorted(out.items()))


def by_batch(rows: list[dict], pred: np.ndarray, model: str) -> str:
    """Mean pick ratio per batch: stages 1-2 first / stage 3 alone."""
    surv = survivors(rows, model)
    return "; ".join(f"batch {b}: {score(rows, pred, surv, gb)['mean_ratio']:.3f} / {score(rows, pred, None, gb)['mean_ratio']:.3f}"
                     f" ({len(gb)} groups)" for b, gb in groups_by_batch(rows).items())


def survivors(rows: list[dict], model: str, mod=cm) -> np.ndarray:
    """True where the row's config survives stages 1-2 of `model` for its shape, batch and level."""
    out = np.zeros(len(rows), bool)
    cache: dict[tuple, set] = {}
    for i, r in enumerate(rows):
        key = (r["shape"], r["batch"], r["level"])
        if key not in cache:
            tab = mod._space_table(r["shape"])
            idx2, _, _ = mod._stage2(r["shape"], GPU, r["batch"], 1.0 - r["level"], model)
            cache[key] = set(mod._configs(tab, idx2))
        out[i] = r["config"] in cache[key]
    return out


# ---------------------------------------------------------------- scoring

def groups(rows: list[dict]) -> list[np.ndarray]:
    by: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by[(r["shape"], r["batch"], r["level"])].append(i)
    return [np.array(v) for v in by.values() if len(v) >= MIN_GROUP]


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = (np.argsort(np.argsort(x)).astype(float) for x in (a, b))
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def score(rows: list[dict], pred: np.ndarray, surv: np.ndarray | None = None, gs: list[np.ndarray] | None = None) -> dict:
    """Per group: the model's pick among the measured configs (stage-1/2 survivors when any are
    measured, else all of them), measured time of the pick / the best measured; and Spearman's rank
    correlation of predicted vs measured over the group."""
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
            "within_5pct": float((ratios <= 1.05).mean()), "rho": float(np.mean(rhos)), "per": per,
            "log_rmse": None}


def log_rmse(rows: list[dict], pred: np.ndarray) -> float:
    """Over the rows the model can launch."""
    us = np.array([r["us"] for r in rows])
    ok = np.isfinite(pred)
    return float(np.sqrt(np.mean(np.log(pred[ok] / us[ok]) ** 2)))


# ---------------------------------------------------------------- a fresh held-out bench

PICK_BATCHES, PICK_LEVELS = (1, 8, 32), (0.6, 0.8)


def pick_grid(shape: ConvShape, batch: int) -> list[KernelConfig]:
    """The 'exhaustive' reference grid of `picks`: tiles 4x4/4x8/7x7/8x8, 32-128 threads x nt 1-4
    (NB <= max(N, 32), <= 64 accumulators), tc 8/32 at batch 1 and 32/64 at batch > 1 (run6 had
    only min(C, 128)); for 1x1 convs also 1x7/2x4/1x14 tiles, nt 8 and tc 128 at batch > 1 (where run11
    and run12 found their fastest kernels); the warp-tiled configs of ws_grid; configs the emitter cannot
    build are left out."""
    return sorted(set(_classic_grid(shape, batch)) | set(ws_grid(shape, batch)))


WS_GRID_TILES = ((4, 4, 4), (4, 4, 2), (4, 8, 2), (4, 8, 1), (8, 8, 1), (4, 4, 8), (2, 7, 4), (2, 7, 2), (2, 7, 1),
                 (7, 2, 4))
WS_GRID_TILES_1X1 = ((1, 7, 8), (1, 14, 8), (2, 7, 8), (1, 7, 4), (2, 7, 4), (4, 4, 4), (2, 4, 8))


def ws_grid(shape: ConvShape, batch: int) -> list[KernelConfig]:
    """The warp-tiled part of the grid (batch >= plan.space.WS_MIN_BATCH): warp tiles WS_GRID_TILES that fit
    N, blocks 2x2 / 2x4 / 4x2 / 1x2 / 2x1 and the exact 7-row / 7-column ones, tc 32 / 64 / 128 (run16-ws's
    and run19-exact's winners are among them)."""
    import check_kernels as ck
    if batch < cm.WS_MIN_BATCH:
        return []
    return ck.ws_configs(shape, WS_GRID_TILES_1X1 if shape.R * shape.S == 1 else WS_GRID_TILES,
                         ((2, 2), (2, 4), (4, 2), (1, 2), (2, 1), (7, 1), (7, 2), (2, 7), (4, 1)), (32, 64, 128))


def _classic_grid(shape: ConvShape, batch: int) -> list[KernelConfig]:
    from snn.codegen import emit
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
    return sorted(set(out))


def picks(batches=PICK_BATCHES, one_by_one: bool = True, pick_levels=PICK_LEVELS, only_1x1: bool = False,
          previous: str = PREVIOUS) -> dict:
    """Written before the device run that measures it: per layer of check_kernels' twelve (eight without
    the 1x1 ones), batch and level, the reference grid and the plan's pick (full configuration space, the
    build's level sweep) of the current "snn" model and of `previous`'s."""
    import check_kernels as ck
    from snn.codegen.plan import DEFAULT_LEVELS, parse_levels
    prev = before_model(previous)
    layers = [(lab, ConvShape(c, n, h, h, 3, 3, (1, 1), (1, 1))) for lab, c, n, h in ck.BENCH_LAYERS]
    if only_1x1:  # the six ResNet-152 1x1 layers of check_kernels --tune1x1
        layers = [(lab, ConvShape(c, n, h, h, 1, 1, (1, 1), (0, 0))) for lab, c, n, h in ck.ONE_BY_ONE_LAYERS]
    elif one_by_one:
        layers += [(lab, ConvShape(c, n, h, h, 1, 1, (1, 1), (0, 0))) for lab, c, n, h in ck.GROUP_EXTRA_LAYERS]
    levels = parse_levels(DEFAULT_LEVELS)
    out = []
    for label, sh in layers:
        for b in batches:
            now = cm.plan_shape(sh, GPU, b, levels, "snn")
            old = prev.plan_shape(sh, GPU, b, levels, "snn")
            grid = pick_grid(sh, b)
            for lv in pick_levels:
                out.append({"layer": label, "shape": sh.tag(), "C": sh.C, "N": sh.N, "H": sh.H, "R": sh.R, "batch": b,
                            "level": lv, "grid": [c.tag() for c in grid], "plan_now": now[lv].config.tag(),
                            "plan_now_us": round(now[lv].predicted_us, 2), "plan_previous": old[lv].config.tag(),
                            "plan_previous_us": round(old[lv].predicted_us, 2)})
    return {"gpu": GPU.name, "model_now": "snn (this commit)", "model_previous": f"snn at {previous}",
            "levels": list(pick_levels), "batches": list(batches), "groups": out}


def score_picks(spec: dict, bench: dict) -> str:
    """Markdown: per group, measured time of each model's plan pick over the best measured kernel (the
    grid and both picks), and of the current model's pick among the grid alone; means per batch."""
    meas = {(r["shape"], r["batch"], round(float(r["sparsity"]), 2)): r["all_us"] for r in bench["bench"]}
    lines = ["| layer | B | sparsity | best µs (kernel) | now: pick µs, ratio | previous: pick µs, ratio | now, grid only: ratio |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    ratios: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    for g in spec["groups"]:
        all_us = meas.get((g["shape"], g["batch"], round(float(g["level"]), 2)))
        if not all_us:
            continue
        name = lambda tag: f"sconv_{g['shape']}_{tag}_b{g['batch']}"  # noqa: E731
        best_name = min(all_us, key=all_us.get)
        best = all_us[best_name]
        t_now, t_prev = all_us.get(name(g["plan_now"]), math.nan), all_us.get(name(g["plan_previous"]), math.nan)
        # the current model's choice among the grid alone (stages 1-2 first, as `report` scores)
        rows = [{"shape": sh, "config": c, "batch": g["batch"], "level": g["level"], "us": all_us[name(t)]}
                for t in g["grid"] if name(t) in all_us for sh, c, _ in [parse_kernel(name(t))]]
        pred = predict(rows, "snn")
        surv = survivors(rows, "snn")
        cand = np.flatnonzero(surv & np.isfinite(pred)) if (surv & np.isfinite(pred)).any() else np.flatnonzero(np.isfinite(pred))
        t_grid = rows[cand[np.argmin(pred[cand])]]["us"]
        ratios[g["batch"]].append((t_now / best, t_prev / best, t_grid / min(r["us"] for r in rows)))
        lines.append(f"| {g['layer']} | {g['batch']} | {g['level']} | {best:.1f} ({best_name.split('_', 6)[-1]}) | "
                     f"{t_now:.1f} ({g['plan_now']}), {t_now / best:.2f} | {t_prev:.1f} ({g['plan_previous']}), "
                     f"{t_prev / best:.2f} | {t_grid / min(r['us'] for r in rows):.2f} |")
    lines += ["", "| batch | groups | now: mean ratio | previous: mean ratio | now, grid only |", "| --- | --- | --- | --- | --- |"]
    every = []
    for b, v in sorted(ratios.items()):
        every += v
        m = np.nanmean(np.array(v), axis=0)
        lines.append(f"| {b} | {len(v)} | {m[0]:.3f} | {m[1]:.3f} | {m[2]:.3f} |")
    m = np.nanmean(np.array(every), axis=0)
    lines.append(f"| all | {len(every)} | {m[0]:.3f} | {m[1]:.3f} | {m[2]:.3f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- fitting

def fit(rows: list[dict], start: dict | None = None, ws: bool = False) -> dict:
    """Least squares of log(predicted / measured) over all rows, constants kept positive: SNN_FIT, or with `ws`
    SNN_FIT_WS (the warp-tiled family's, WS_FIXED left as they are; every batch size weighs the same)."""
    from scipy.optimize import least_squares
    base = cm.SNN_FIT_WS if ws else cm.SNN_FIT
    names = [n for n in base if not (ws and n in WS_FIXED)]
    x0 = np.log([float((start or base)[k]) for k in names])
    us = np.array([r["us"] for r in rows])
    per_batch = defaultdict(int)
    for r in rows:
        per_batch[r["batch"]] += 1
    weight = np.array([1.0 / np.sqrt(per_batch[r["batch"]]) if ws else 1.0 for r in rows])

    def resid(x):
        c = dict(zip(names, np.exp(x)))
        p = predict(rows, "snn", ws_consts=c) if ws else predict(rows, "snn", c)
        return np.where(np.isfinite(p), np.log(p / us), 0.0) * weight

    sol = least_squares(resid, x0, method="trf", x_scale=1.0, diff_step=1e-3, max_nfev=400)
    return {**(base if ws else {}), **dict(zip(names, (float(v) for v in np.exp(sol.x))))}


# The warp-tiled family's measurements with the current timer and template, or close to them: run25-b1 (batch 1, this
# template and timer), exhaustive-s6's uniform half (batch 32, session 6's template before the leaner header:
# 0.92-0.99x, run24-hdr) and run22-1x1 (its batch-32 rows: at batch 8 the old timer could catch the host).
WS_DATA = (RES / "kernels/run25-b1/bench/bench.json.gz", RES / "h100/exhaustive-s6/uniform/bench.json",
           RES / "kernels/run22-1x1/bench/bench.json")
WS_FIXED = ("w_ins",)  # not used by the warp-tiled family


def ws_rows(paths=WS_DATA) -> list[dict]:
    return [r for r in holdout_rows(list(paths)) if r["config"].warp_tiled and r["batch"] in (1, 32)]


def ws_report(rows: list[dict], fitted: dict) -> str:
    """Per batch and conv kind: log rmse and pick ratio (stages 1-2 first) of SNN_FIT_WS now and of `fitted`; then
    each kind held out (fitted on the other kind's rows, scored on its own)."""
    out = ["| rows | batch | model | log bias | log rmse | pick / best (groups) |",
           "| --- | --- | --- | --- | --- | --- |"]
    kinds = {"3x3": lambda r: r["shape"].R == 3, "1x1": lambda r: r["shape"].R == 1}

    def line(label, rr, consts):
        for b in sorted({r["batch"] for r in rr}):
            sub = [r for r in rr if r["batch"] == b]
            pred = predict(sub, "snn", ws_consts=consts)
            err = np.log(pred / np.array([r["us"] for r in sub]))
            s = score(sub, pred, survivors(sub, "snn"))
            out.append(f"| {label} | {b} | {'fitted' if consts else 'current'} | {err.mean():+.3f} | "
                       f"{np.sqrt((err ** 2).mean()):.3f} | {s['mean_ratio']:.3f} ({s['groups']}) |")
    for k, f in kinds.items():
        rr = [r for r in rows if f(r)]
        line(k, rr, None)
        line(k, rr, fitted)
        other = fit([r for r in rows if not f(r)], ws=True)
        line(f"{k}, held out", rr, other)
    # what decides the build: the pick among both families where both were measured
    both = [r for r in holdout_rows(list(WS_DATA)) if r["batch"] in (1, 32)]
    out += ["", "Both families measured (classic rows: the plans' picks and the samples' classic configs): pick / "
            "best, stages 1-2 first", "", "| batch | current | fitted | groups |", "| --- | --- | --- | --- |"]
    for b in (1, 32):
        sub = [r for r in both if r["batch"] == b]
        gs = [g for g in groups(sub) if len({sub[i]["config"].warp_tiled for i in g}) == 2]
        surv = survivors(sub, "snn")
        now, fit_ = (score(sub, predict(sub, "snn", ws_consts=c), surv, gs)["mean_ratio"] for c in (None, fitted))
        out.append(f"| {b} | {now:.3f} | {fit_:.3f} | {len(gs)} |")
    return "\n".join(out)


def _fmt(c: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in c.items())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("dataset").add_argument("--out", type=Path, default=CSV_DEFAULT)
    sub.add_parser("fit")
    r = sub.add_parser("report")
    r.add_argument("--loso", action="store_true", help="also leave one shape out: fit without it, score it")
    r.add_argument("--groups", action="store_true", help="print every group's picks")
    sub.add_parser("cv")
    pk = sub.add_parser("picks")
    pk.add_argument("--out", type=Path, required=True)
    pk.add_argument("--batches", default=",".join(map(str, PICK_BATCHES)))
    pk.add_argument("--no-1x1", action="store_true", help="the eight 3x3 layers only")
    pk.add_argument("--levels", default=",".join(map(str, PICK_LEVELS)))
    pk.add_argument("--only-1x1", action="store_true", help="the six ResNet-152 1x1 layers only")
    pk.add_argument("--previous", default=PREVIOUS, help="the commit whose model's picks go beside this one's")
    sp = sub.add_parser("scorepicks")
    sp.add_argument("picks", type=Path)
    sp.add_argument("bench", type=Path)
    sp.add_argument("--md", type=Path, default=None)
    sub.add_parser("fitws", help="fit SNN_FIT_WS on WS_DATA; report current vs fitted, each conv kind held out")
    h = sub.add_parser("holdout")
    h.add_argument("json", nargs="+", type=Path, help="tools/check_kernels.py bench JSON files")
    a = p.parse_args()
    if a.cmd == "holdout":
        rows = holdout_rows(a.json)
        print(f"{len(rows)} rows, {len(groups(rows))} groups of >= {MIN_GROUP} measured configs (not in the fit)")
        print("model | batch | groups | mean ratio | max ratio | picks within 5 % | mean Spearman")
        for model in ("snn", "pipes", "paper"):
            pred = predict(rows, model)
            for restrict in (False, True):
                for b, gb in groups_by_batch(rows).items():
                    s = score(rows, pred, survivors(rows, model) if restrict else None, gb)
                    print(f"{model}{' (stages 1-2 first)' if restrict else ''} | {b} | {s['groups']} | {s['mean_ratio']:.3f} | "
                          f"{s['max_ratio']:.3f} | {s['within_5pct']:.0%} | {s['rho']:.3f}")
        return
    if a.cmd == "fitws":
        rows = ws_rows()
        c = fit(rows, ws=True)
        print(f"{len(rows)} warp-tiled rows; fitted: {_fmt(c)}")
        print(ws_report(rows, c))
        return
    if a.cmd == "picks":
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(picks(tuple(int(b) for b in a.batches.split(",")), not a.no_1x1,
                                          tuple(float(v) for v in a.levels.split(",")), a.only_1x1, a.previous),
                                    indent=1))
        print(f"wrote {a.out}")
        return
    if a.cmd == "scorepicks":
        md = score_picks(json.loads(a.picks.read_text()), json.loads(a.bench.read_text()))
        print(md)
        if a.md:
            a.md.write_text(md + "\n")
        return
    rows = dataset()
    if a.cmd == "cv":
        print("held out | constants fitted on the rest | pick ratio, stages 1-2 first / stage 3 alone")
        for b in (8, 32):
            test = [r for r in rows if r["sources"] == "run6" and r["batch"] == b]
            c = fit([r for r in rows if not (r["sources"] == "run6" and r["batch"] == b)], cm.SNN_FIT)
            print(f"run6 batch {b} | {_fmt(c)} | {by_batch(test, predict(test, 'snn', c), 'snn')}, "
                  f"log rmse {log_rmse(test, predict(test, 'snn', c)):.3f}")
        return
    if a.cmd == "dataset":
        write_csv(rows, a.out)
        src = defaultdict(int)
        for r in rows:
            src[r["sources"]] += 1
        print(f"{len(rows)} rows, {len({r['shape'] for r in rows})} shapes, {len(groups(rows))} groups of >= {MIN_GROUP} "
              f"configs; by source: {dict(src)} -> {a.out}")
        print(f"dropped as glitches (> {GLITCH}x the same kernel's time at a lower level): {DROPPED}")
    elif a.cmd == "fit":
        c = fit(rows)
        print(_fmt(c))
        print(f"log rmse: fitted {log_rmse(rows, predict(rows, 'snn', c)):.3f}")
    else:
        print(f"{len(rows)} rows, {len(groups(rows))} groups of >= {MIN_GROUP} measured configs")
        print("model | groups | mean ratio | max ratio | picks within 5 % | mean Spearman | log rmse")
        old = before_model()
        for label, model, mod in ((f"paper, before ({BEFORE})", "paper", old), ("paper, now", "paper", cm),
                                  (f"snn, before ({BEFORE})", "snn", old), ("snn, now", "snn", cm)):
            pred = predict(rows, model, mod=mod)
            for restrict in (False, True):
                s = score(rows, pred, survivors(rows, model, mod) if restrict else None)
                print(f"{label}{' (stages 1-2 first)' if restrict else ''} | {s['groups']} | {s['mean_ratio']:.3f} | "
                      f"{s['max_ratio']:.3f} | {s['within_5pct']:.0%} | {s['rho']:.3f} | {log_rmse(rows, pred):.3f}")
                if not restrict:  # by batch
                    for b, gb in groups_by_batch(rows).items():
                        sb = score(rows, pred, survivors(rows, model, mod), gb)
                        print(f"    batch {b}, stages 1-2 first: {sb['groups']} groups, mean ratio "
                              f"{sb['mean_ratio']:.3f}, Spearman {sb['rho']:.3f}")
                if a.groups and restrict:
                    for g in s["per"]:
                        print("   ", *g)
        if a.loso:
            # for each shape with a group: fit on every row of the other shapes, score its groups
            gs_all = groups(rows)
            shapes = sorted({rows[g[0]]["shape"] for g in gs_all}, key=lambda s: s.tag())
            pred = predict(rows, "snn")
            for sh in shapes:
                c = fit([r for r in rows if r["shape"] != sh], cm.SNN_FIT)
                ii = [i for i, r in enumerate(rows) if r["shape"] == sh]
                pred[ii] = predict([rows[i] for i in ii], "snn", c)
                print(f"  without {sh.tag()}: {_fmt(c)}")
            for restrict in (False, True):
                s = score(rows, pred, survivors(rows, "snn") if restrict else None, gs_all)
                print(f"snn, leave one shape out{' (stages 1-2 first)' if restrict else ''} | {s['groups']} | "
                      f"{s['mean_ratio']:.3f} | {s['max_ratio']:.3f} | {s['within_5pct']:.0%} | {s['rho']:.3f} | -")


if __name__ == "__main__":
    main()
