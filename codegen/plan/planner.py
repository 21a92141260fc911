"""Planning: stages 1-2-3 for one shape and level, the choice per level (plan_shape), whole networks
(plan_network) and the Plan they return; per-config queries (stages, data_movement, evaluate_config).
"""
from __future__ import annotations

import dataclasses

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from ..config import KernelConfig
from ..errors import UserError
from ..gpu import GPU
from ..spec import ConvLayer, ConvShape, Network
from .models import check, stage3
from .movement import bytes_moved, stage2
from .occupancy import occupancy_min, stage1, table_occupancy
from .space import configs, row_tiles, space_arrays, ws_allowed
from .tables import config_table, space_table

DEFAULT_LEVELS = "0.4:0.9:0.05"
REUSE_TOLERANCE = 0.03     # plan_shape keeps a lower level's config if within 3 % of the fastest
CANDIDATE_WINDOW = 1.3     # alternatives for `calibrate` to measure: predicted within 1.3x of the pick (the
                           # model's bias between kernel families reached +0.28 in log time on measured layers)


@dataclass(frozen=True)
class Choice:
    config: KernelConfig
    predicted_us: float
    # the next configs `snn-run calibrate` measures against this one on real activations (plan_shape's
    # `candidates`); empty unless asked for
    alternatives: tuple = ()

    def candidates(self) -> list[tuple[KernelConfig, float]]:
        """(config, predicted us): the pick first, then its alternatives."""
        return [(self.config, self.predicted_us)] + [(a.config, a.predicted_us) for a in self.alternatives]


@dataclass(frozen=True)
class LayerPlan:
    layer: ConvLayer
    choices: dict = field(hash=False)  # level (float, 2 decimals) -> Choice; shared by layers of one shape

    def to_dict(self, batch: int) -> dict[str, Any]:
        def one(ch):
            return {"config": ch.config.to_dict(), "tag": ch.config.tag(),
                    "kernel": ch.config.name(self.layer.shape, batch), "predicted_us": round(ch.predicted_us, 4)}
        return {"index": self.layer.index, "name": self.layer.name, "shape": shape_dict(self.layer.shape),
                "levels": {f"{lv:.2f}": one(ch) | ({"alternatives": [one(a) for a in ch.alternatives]}
                                                   if ch.alternatives else {})
                           for lv, ch in self.choices.items()}}


@dataclass(frozen=True)
class Plan:
    network: str
    gpu: GPU
    batch: int
    levels: tuple
    model: str
    layers: tuple  # of LayerPlan, in network order

    def to_dict(self) -> dict[str, Any]:
        return {"network": self.network, "gpu": self.gpu.name, "arch": self.gpu.arch, "batch": self.batch,
                "model": self.model, "levels": list(self.levels),
                "distinct_shapes": len({lp.layer.shape for lp in self.layers}),
                "total_predicted_us": {f"{lv:.2f}": round(sum(lp.choices[lv].predicted_us for lp in self.layers), 3)
                                       for lv in self.levels},
                "layers": [lp.to_dict(self.batch) for lp in self.layers]}


def shape_dict(s: ConvShape) -> dict[str, Any]:
    return {"C": s.C, "N": s.N, "H": s.H, "W": s.W, "R": s.R, "S": s.S, "stride": list(s.stride),
            "padding": list(s.padding), "P": s.P, "Q": s.Q, "tag": s.tag()}


def parse_levels(text: str | Sequence[float]) -> tuple[float, ...]:
    """'0.4:0.9:0.05' (start:stop:step, stop included), '0.5,0.7' or '0.6' -> sparsity levels as
    floats rounded to 2 decimals, each in [0, 1)."""
    if not isinstance(text, str):
        levels = [round(float(x), 2) for x in text]
    else:
        src = text.strip()
        try:
            if ":" in src:
                parts = [float(p) for p in src.split(":")]
                if len(parts) != 3:
                    raise ValueError
                start, stop, step = parts
                if step <= 0 or stop < start:
                    raise UserError(f"--levels '{text}': need start <= stop and step > 0 (start:stop:step)")
                n = int(math.floor((stop - start) / step + 1e-9)) + 1
                levels = [round(start + i * step, 2) for i in range(n)]
            else:
                levels = [round(float(p), 2) for p in src.split(",")]
        except ValueError:
            raise UserError(f"--levels '{text}': expected start:stop:step like 0.4:0.9:0.05, or a list like 0.5,0.7") from None
    if not levels:
        raise UserError(f"--levels '{text}': no levels")
    for lv in levels:
        if not 0.0 <= lv < 1.0:
            raise UserError(f"--levels '{text}': sparsity level {lv} is outside [0, 1)")
    return tuple(sorted(set(levels)))


def run_stages(shape: ConvShape, gpu: GPU, batch: int, level: float, model: str,
               keep: Iterable[int] = ()) -> dict[str, Any]:
    """All three stages for one shape and level; indices into the space table. `keep`: configs that stage 3 also
    times when they passed stage 1 (plan_shape's picks at lower levels: stage 2's cut moves with the density, and a
    pick it drops at the next level would leave the plan slower at higher sparsity)."""
    check(model, batch)
    density = 1.0 - level
    s1 = stage1(shape, gpu, occupancy_min(model, batch), ws_allowed(model, batch))
    idx2, idx1, dm1 = stage2(shape, gpu, batch, density, model)
    n2 = len(idx2)
    idx2 = np.union1d(idx2, np.intersect1d(np.asarray(list(keep), dtype=idx2.dtype), idx1))
    s3 = stage3(shape, gpu, space_table(shape), s1, batch, density, model, idx2)
    order = np.lexsort((idx2, -s1["occ"][idx2], s3["predicted_us"]))  # least time; ties: occupancy, space order
    return {"idx1": idx1, "dm1": dm1, "idx2": idx2, "n_stage2": n2, "s3": s3, "order": order, "density": density}


def _family(tab: dict[str, np.ndarray], i: int) -> tuple[bool, int]:
    """Where the fitted model's bias was measured to differ: kernel family and channels a thread."""
    return bool(tab["wh"][i] * tab["ww"][i] > 1), int(tab["nt"][i])


def _alternatives(tab: dict[str, np.ndarray], r: dict[str, Any], pick: int, n: int) -> list[tuple[int, float]]:
    """Up to n stage-3 configs besides `pick` (a space index), predicted within CANDIDATE_WINDOW of it: first the
    fastest of each family not yet represented (a measurement can only correct the model's bias between families
    if both are measured), then the next fastest. (space index, predicted us) pairs."""
    t = r["s3"]["predicted_us"]
    t_pick = float(t[np.flatnonzero(r["idx2"] == pick)[0]])
    ranked = [(int(r["idx2"][j]), float(t[j])) for j in r["order"]
              if int(r["idx2"][j]) != pick and t[j] <= t_pick * CANDIDATE_WINDOW]
    seen, out = {_family(tab, pick)}, []
    for i, ti in ranked:
        if _family(tab, i) not in seen:
            seen.add(_family(tab, i))
            out.append((i, ti))
    out += [(i, ti) for i, ti in ranked if (i, ti) not in out]
    return out[:n]


def _row_tiles(shape: ConvShape, gpu: GPU, batch: int, level: float, model: str, pick: KernelConfig,
               alts: tuple) -> tuple:
    """space.row_tiles' configs the "snn" model can launch, as alternatives priced by it (the pick and alts left out)."""
    if model != "snn":
        return ()
    have = {pick} | {a.config for a in alts}
    out = []
    for cfg in row_tiles(shape, batch):
        if cfg not in have:
            ev = evaluate_config(shape, gpu, batch, level, cfg, model)
            if ev["launchable"]:
                out.append(Choice(cfg, ev["predicted_us"]))
    return tuple(out)


def plan_shape(shape: ConvShape, gpu: GPU, batch: int, levels: Iterable[float], model: str = "snn",
               candidates: int = 1) -> dict[float, Choice]:
    """The chosen config and predicted time of one conv shape at each level (ascending).

    The choice is stage 3's fastest config, except that a config already chosen for a lower level
    is kept when it is within REUSE_TOLERANCE of the fastest and still faster than the previous level's
    choice: the model is not precise to a few per cent, and every distinct config is one more kernel to
    compile. Such a config is a stage-3 candidate whenever it passes stage 1 (`run_stages`'s keep).
    candidates > 1: each choice also carries up to candidates - 1 alternatives (`_alternatives`), for
    `snn-run calibrate` to measure against it; at batch 1 a stride-1 3x3's also carry space.row_tiles' configs
    (whatever `candidates`)."""
    if isinstance(candidates, bool) or not isinstance(candidates, (int, np.integer)) or candidates < 1:
        raise UserError(f"candidates must be a positive integer, got {candidates!r}")
    tab = space_table(shape)
    out: dict[float, Choice] = {}
    chosen: list[int] = []          # space indices already picked, in order
    prev = math.inf
    for level in sorted(round(float(lv), 2) for lv in levels):
        r = run_stages(shape, gpu, batch, level, model, keep=chosen)
        t = r["s3"]["predicted_us"]
        pick = int(r["order"][0])
        hits = [np.flatnonzero(r["idx2"] == i) for i in chosen]
        reuse = [(float(t[h[0]]), int(h[0])) for h in hits if len(h)]
        if reuse:
            t_re, j_re = min(reuse)
            if t_re <= t[pick] * (1 + REUSE_TOLERANCE) and t_re < prev:
                pick = j_re
        i = int(r["idx2"][pick])
        if i not in chosen:
            chosen.append(i)
        prev = float(t[pick])
        alts = tuple(Choice(configs(tab, [j], gpu.clusters)[0], tj) for j, tj in _alternatives(tab, r, i, candidates - 1)) \
            if candidates > 1 else ()
        config = configs(tab, [i], gpu.clusters)[0]
        out[level] = Choice(config, prev, alts + _row_tiles(shape, gpu, batch, level, model, config, alts))
    return out


def plan_network(net: Network, gpu: GPU, batch: int, levels: Iterable[float] | str = DEFAULT_LEVELS,
                 model: str = "snn", layers: Iterable[str] | None = None, candidates: int = 1) -> Plan:
    """Plan every conv layer of `net` that can run sparse (spec.ConvLayer.sparse: not the image-reading
    stem, not a grouped conv), or only those named in `layers`; identical shapes are planned once and
    share one choices dict. candidates: see plan_shape."""
    check(model, batch)
    lv = parse_levels(levels)
    convs = list(net.sparse_convs)
    if layers is not None:
        wanted = list(layers)
        by_name = {c.name: c for c in net.convs}
        missing = [n for n in wanted if n not in by_name]
        if missing:
            some = ", ".join(c.name for c in net.convs[:4])
            raise UserError(f"{net.path}: no conv layer named '{missing[0]}' (conv layers are e.g. {some}, ...; "
                            f"see snn-codegen inspect)")
        dense = [n for n in wanted if not by_name[n].sparse]
        if dense:
            c = by_name[dense[0]]
            why = f"it is grouped ({c.groups} groups)" if c.groups > 1 else f"its input '{c.input}' is no ReLU output"
            raise UserError(f"{net.path}: conv layer '{c.name}' always runs dense: {why}")
        convs = [by_name[n] for n in dict.fromkeys(wanted)]
    cache: dict[tuple[ConvShape, bool, bool], dict[float, Choice]] = {}
    planned = []
    for c in convs:
        plain = (c.shape, False, False)
        if plain not in cache:
            cache[plain] = plan_shape(c.shape, gpu, batch, lv, model, candidates)
        key = (c.shape, c.into_concat, c.bn_input)
        if key not in cache:
            cache[key] = {lv_: _pitched(ch, c.into_concat, c.bn_input) for lv_, ch in cache[plain].items()}
        planned.append(LayerPlan(c, cache[key]))
    return Plan(net.name, gpu, batch, lv, model, tuple(planned))


def _pitched(ch: Choice, out_ld: bool, in_bn: bool) -> Choice:
    """The same choice, its kernels (not a cluster's) storing at a pitch they are given (KernelConfig.out_ld: a
    concat's buffer) and reading a pre-activation's input at one (KernelConfig.in_bn); the cost model prices them
    alike (the same bytes are moved; the staging's scale, shift and ReLU are a few instructions per value)."""
    def one(cfg):
        return cfg if cfg.cluster else dataclasses.replace(cfg, out_ld=out_ld, in_bn=in_bn)
    return Choice(one(ch.config), ch.predicted_us, tuple(Choice(one(a.config), a.predicted_us) for a in ch.alternatives))


def stages(shape: ConvShape, gpu: GPU, batch: int, level: float, model: str = "snn") -> dict[str, list[KernelConfig]]:
    """The configs surviving each stage: 'enumerated', 'launchable', 'stage1', 'stage2' (least data
    movement first) and 'stage3' (all of stage 2, least predicted time first: [0] is the choice)."""
    tab, s1 = space_table(shape), stage1(shape, gpu, occupancy_min(model, batch), ws_allowed(model, batch))
    r = run_stages(shape, gpu, batch, level, model)
    dm_order = np.lexsort((r["idx1"], -s1["occ"][r["idx1"]], r["dm1"]))
    idx2 = set(r["idx2"].tolist())
    return {"enumerated": configs(tab, range(len(tab["th"])), gpu.clusters),
            "launchable": configs(tab, np.flatnonzero(s1["feasible"]), gpu.clusters),
            "stage1": configs(tab, r["idx1"], gpu.clusters),
            "stage2": configs(tab, [i for i in r["idx1"][dm_order] if i in idx2], gpu.clusters),
            "stage3": configs(tab, r["idx2"][r["order"]], gpu.clusters)}


def data_movement(shape: ConvShape, config: KernelConfig, batch: int, level: float, model: str = "snn") -> float:
    """Stage 2's measure for one config: bytes moved by the whole batch ('paper': Table 2 in fp32
    bytes; 'snn': bytes from L2 into the SMs: halo'd COO* input, weights per block, atomics)."""
    check(model, batch)
    return float(bytes_moved(shape, config_table(shape, config), batch, 1.0 - level, model, [0], config.cluster)[0])


def evaluate_config(shape: ConvShape, gpu: GPU, batch: int, level: float, config: KernelConfig,
                    model: str = "snn") -> dict[str, Any]:
    """Every number the model has for one config (whether or not it would survive stages 1-2):
    resources, occupancy, data movement and the stage-3 terms, predicted_us among them."""
    check(model, batch)
    tab = config_table(shape, config)
    gpu = dataclasses.replace(gpu, clusters=config.cluster)   # priced as the config says it is built
    occ = table_occupancy(tab, gpu)
    row = {"config": config.to_dict(), "tag": config.tag(), "registers": int(tab["regs"][0]),
           "smem": int(tab["smem"][0]), "blocks_per_sm": int(occ["bps"][0]), "occupancy": float(occ["occ"][0]),
           "launchable": bool(occ["feasible"][0]),
           "data_movement_bytes": float(bytes_moved(shape, tab, batch, 1.0 - level, model, [0], gpu.clusters)[0])}
    if row["launchable"]:
        row.update({k: float(v[0]) for k, v in stage3(shape, gpu, tab, occ, batch, 1.0 - level, model, [0]).items()})
    return row


def clear_caches() -> None:
    """Forget cached spaces and stage-1 results (for timing the cold path)."""
    for f in (space_arrays, space_table, config_table, stage1):
        f.cache_clear()
