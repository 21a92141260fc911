"""How the stages went (`snn-codegen plan --explain`) and the text output of `snn-codegen plan`."""
from __future__ import annotations

from typing import Any, Sequence

from ..config import KernelConfig
from ..gpu import GPU
from ..inspect import render
from ..spec import ConvShape
from .occupancy import occupancy_min, stage1
from .planner import REUSE_TOLERANCE, LayerPlan, Plan, run_stages, shape_dict
from .space import configs, index_of, ws_allowed
from .tables import space_table


def explain_layer(shape: ConvShape, gpu: GPU, batch: int, level: float, model: str = "snn", top: int = 5,
                  chosen: KernelConfig | None = None) -> dict[str, Any]:
    """How the three stages went for one shape and level: counts surviving each stage and the
    best `top` candidates of stage 3 with their numbers and rank. `chosen` is the plan's pick
    (plan_shape may keep a lower level's config within REUSE_TOLERANCE, even one stage 2 drops here);
    it defaults to rank 1 and is listed even when it is not among the top."""
    tab, s1 = space_table(shape), stage1(shape, gpu, occupancy_min(model, batch), ws_allowed(model, batch))
    at = () if chosen is None else index_of(tab, chosen).tolist()
    r = run_stages(shape, gpu, batch, level, model, keep=at)
    dm_of = dict(zip(r["idx1"].tolist(), r["dm1"].tolist()))
    rank_of = {int(r["idx2"][j]): k for k, j in enumerate(r["order"])}
    ranks = list(range(min(top, len(r["order"]))))
    if chosen is not None:
        match = [i for i in at if i in rank_of]
        if not match:
            raise ValueError(f"{chosen.tag()} did not survive stage 1 for {shape.tag()} at {level}")
        if rank_of[match[0]] not in ranks:
            ranks.append(rank_of[match[0]])
        chosen_rank = rank_of[match[0]]
    else:
        chosen_rank = 0
    cands = []
    for k in ranks:
        j = r["order"][k]
        i = int(r["idx2"][j])
        cfg = configs(tab, [i], gpu.clusters)[0]
        row = {"rank": k + 1, "config": cfg.to_dict(), "tag": cfg.tag(), "registers": int(tab["regs"][i]),
               "smem": int(tab["smem"][i]), "blocks_per_sm": int(s1["bps"][i]), "occupancy": float(s1["occ"][i]),
               "data_movement_bytes": float(dm_of[i]), "chosen": k == chosen_rank}
        row.update({k2: float(v[j]) for k2, v in r["s3"].items()})
        cands.append(row)
    return {"shape": shape_dict(shape), "gpu": gpu.name, "batch": batch, "level": round(float(level), 2),
            "density": round(r["density"], 4), "model": model,
            "counts": {"enumerated": int(len(tab["th"])), "launchable": int(s1["feasible"].sum()),
                       "stage1_occupancy": int(len(r["idx1"])), "stage2_data_movement": int(r["n_stage2"]),
                       "stage3_timed": int(len(r["idx2"]))},
            "stage1_relaxed": bool(s1["relaxed"]), "occupancy_min": occupancy_min(model, batch),
            "chosen": next(c for c in cands if c["chosen"]), "top": cands}


def explain_plan(plan: Plan, top: int = 5) -> list[dict[str, Any]]:
    """explain_layer for every distinct shape of `plan` at each of its levels, marking the plan's
    picks: [{"layers": [names], "levels": {"0.40": explain dict, ...}}, ...]."""
    shapes: dict[ConvShape, tuple[dict, list[str]]] = {}
    for lp in plan.layers:
        shapes.setdefault(lp.layer.shape, (lp.choices, []))[1].append(lp.layer.name)
    return [{"layers": names,
             "levels": {f"{lv:.2f}": explain_layer(shape, plan.gpu, plan.batch, lv, plan.model, top, choices[lv].config)
                        for lv in plan.levels}}
            for shape, (choices, names) in shapes.items()]


# ---- text output for `snn-codegen plan` ------------------------------------------------------------

def format_plan(plan: Plan) -> str:
    """One block per distinct shape: its layers, then one row per run of levels sharing a config."""
    by_shape: dict[ConvShape, list[LayerPlan]] = {}
    for lp in plan.layers:
        by_shape.setdefault(lp.layer.shape, []).append(lp)
    head = ("#", "shape", "layers", "levels", "config", "predicted µs per level")
    body = []
    for k, (shape, lps) in enumerate(by_shape.items(), 1):
        names = lps[0].layer.name if len(lps) == 1 else f"{len(lps)}× {lps[0].layer.name} …"
        runs: list[list[float]] = []
        for lv in plan.levels:
            if runs and lps[0].choices[runs[-1][-1]].config == lps[0].choices[lv].config:
                runs[-1].append(lv)
            else:
                runs.append([lv])
        for j, run in enumerate(runs):
            ch = lps[0].choices
            span = f"{run[0]:.2f}" if len(run) == 1 else f"{run[0]:.2f}–{run[-1]:.2f}"
            body.append((str(k) if j == 0 else "", shape.tag() if j == 0 else "", names if j == 0 else "",
                         span, ch[run[0]].config.tag(), " ".join(f"{ch[lv].predicted_us:.1f}" for lv in run)))
    totals = {lv: sum(lp.choices[lv].predicted_us for lp in plan.layers) for lv in plan.levels}
    lines = [render(head, body, right=(0,)), "",
             f"{plan.network} on {plan.gpu.name} ({plan.gpu.arch}), batch {plan.batch}, model '{plan.model}': "
             f"{len(plan.layers)} conv layers, {len(by_shape)} distinct shapes",
             "sum of predicted sparse-conv time per level (µs): "
             + "  ".join(f"{lv:.2f}: {totals[lv]:.0f}" for lv in plan.levels)]
    picks = {(s, ch.config) for s, lps in by_shape.items() for ch in lps[0].choices.values()}
    cands = {(s, c) for s, lps in by_shape.items() for ch in lps[0].choices.values() for c, _ in ch.candidates()}
    if len(cands) > len(picks):
        lines.append(f"with the alternatives (snn-codegen build --candidates; at batch 1 a stride-1 3x3's one-row "
                     f"tiles): {len(cands)} kernels to build, {len(picks)} for the picks alone")
    return "\n".join(lines)


def format_explain(info: dict[str, Any], layers: Sequence[str] = ()) -> str:
    """explain_layer's dict as text: the counts stage by stage, then the top candidates as a table."""
    c = info["counts"]
    who = f" ({', '.join(layers[:3])}{' …' if len(layers) > 3 else ''})" if layers else ""
    out = [f"{info['shape']['tag']}{who} at sparsity {info['level']:.2f} (density {info['density']:.2f}), "
           f"batch {info['batch']}, {info['gpu']}, model '{info['model']}'",
           f"  enumerated {c['enumerated']} → launchable {c['launchable']} → stage 1 occupancy ≥ "
           f"{info['occupancy_min']:.0%}: {c['stage1_occupancy']}"
           + (" (none reached it: kept the best occupancy)" if info["stage1_relaxed"] else "")
           + f" → stage 2 least data movement: {c['stage2_data_movement']} → stage 3 timed: {c['stage3_timed']}"]
    snn = info["model"] != "paper"  # the waves models report compute / memory / atomics
    head = ("rank", "config", "regs", "smem", "blk/SM", "occ", "data MB", "blocks", "waves",
            *(("compute µs", "memory µs", "atomic µs", "edge") if snn else ("kFLOP/blk", "wave µs")), "predicted µs")
    body = []
    for row in info["top"]:
        extra = ((f"{row['compute_us']:.1f}", f"{row['memory_us']:.1f}", f"{row['atomic_us']:.1f}",
                  f"{row['edge_waste']:.0%}") if snn else (f"{row['flops_blk'] / 1e3:.1f}", f"{row['time_wave_us']:.2f}"))
        body.append((f"{row['rank']}{'*' if row['chosen'] else ''}", row["tag"], str(row["registers"]), str(row["smem"]), str(row["blocks_per_sm"]),
                     f"{row['occupancy']:.0%}", f"{row['data_movement_bytes'] / 1e6:.2f}", str(int(row["num_blocks"])),
                     str(int(row["waves"])), *extra, f"{row['predicted_us']:.2f}"))
    out.append("  " + render(head, body, right=tuple(range(2, len(head)))).replace("\n", "\n  "))
    if not info["top"][0]["chosen"]:
        out.append(f"  * the plan keeps {info['chosen']['tag']} from a lower level: within "
                   f"{REUSE_TOLERANCE:.0%} of rank 1 (one kernel fewer to compile)")
    return "\n".join(out)
