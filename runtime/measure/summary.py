"""summary.md from the result documents of one folder (bench layers, bench e2e, calibrate): the headline,
then the tables of each kind, and the rows they are made of (layer_rows, lowest_levels, limit_rows,
strongest_dense; the plots draw the same rows). No torch: it reads JSON documents only."""
from __future__ import annotations

import numpy as np

from ..dispatch import DECISION_COST_US
from .common import geomean, level_key, lowest_winning_level, median

FIG8_NOTE = ("Model-chosen vs exhaustive-best (paper Fig. 8): not measured in this folder; `snn-run calibrate "
             "--exhaustive --out` into it adds the comparison")


def layer_rows(doc: dict) -> list[dict]:
    """Per batch and level: speedup statistics over the distinct shapes of one layers document."""
    rows = []
    for B in doc["batches"]:
        for lv in doc["levels"]:
            k = level_key(lv)
            recs = [(s, s["batches"][str(B)]) for s in doc["shapes"] if str(B) in s["batches"]]
            recs = [(s, b, b["levels"][k]) for s, b in recs if k in b["levels"]]
            if not recs:
                continue
            fp32 = [r["speedup_fp32"] for _, _, r in recs]
            tf32 = [r["speedup_tf32"] for _, _, r in recs]
            epi = [b["epilogue"]["epilogue"]["median_us"] for _, b, _ in recs]
            epi_c = [b["epilogue"]["epilogue_count"]["median_us"] for _, b, _ in recs]
            both = [(r["dense_fp32_us"] + e) / (r["sparse_us"] + e) for (_, _, r), e in zip(recs, epi)]
            ours = [r["dense_fp32_us"] / (r["sparse_us"] + e) for (_, _, r), e in zip(recs, epi_c)]
            net_dense = sum(s["count"] * r["dense_fp32_us"] for s, _, r in recs)
            net_sparse = sum(s["count"] * r["sparse_us"] for s, _, r in recs)
            errs = [r.get("rel_err_vs_cudnn_fp32") for _, _, r in recs]
            rows.append({"batch": B, "level": lv, "shapes": len(recs),
                         "geomean_fp32": geomean(fp32), "mean_fp32": float(np.mean(fp32)),
                         "geomean_tf32": geomean(tf32), "geomean_fp32_epilogue_both": geomean(both),
                         "geomean_fp32_epilogue_ours": geomean(ours),
                         "weighted_fp32": net_dense / net_sparse if net_sparse else None,
                         "wins_fp32": sum(1 for x in fp32 if x > 1), "wins_tf32": sum(1 for x in tf32 if x > 1),
                         "max_rel_err": max((e for e in errs if e is not None), default=None),
                         "nan_outputs": sum(1 for _, _, r in recs if r.get("nan_in_output"))})
    return rows


def lowest_levels(doc: dict, key: str = "dense_fp32_us") -> list[dict]:
    out = []
    for s in doc["shapes"]:
        row = {"label": s["label"], "count": s["count"], "batches": {}}
        for B, b in s["batches"].items():
            pairs = {float(k): (r["sparse_us"], r[key]) for k, r in b["levels"].items()}
            row["batches"][B] = lowest_winning_level(pairs)
        out.append(row)
    return out


def limit_rows(doc: dict) -> list[dict]:
    """Per shape and batch: useful TFLOP/s at each level, its share of the document's measured FP32 peak, and
    the time at the highest level (the fixed cost when that level is ~0.99). Empty for documents from before
    these were recorded."""
    peak = doc.get("fp32_peak_tflops")
    rows = []
    for s in doc["shapes"]:
        for B, b in s["batches"].items():
            lv = {k: r for k, r in b["levels"].items() if "useful_tflops" in r}
            if not lv:
                continue
            top = max(lv, key=float)
            rows.append({"label": s["label"], "batch": int(B),
                         "useful_tflops": {k: r["useful_tflops"] for k, r in lv.items()},
                         "share": {k: r["useful_tflops"] / peak for k, r in lv.items()} if peak else {},
                         "top_level": top, "top_level_us": lv[top]["sparse_us"]})
    return rows


def _f(x, fmt="{:.2f}", none="–"):
    return none if x is None else fmt.format(x)


def strongest_dense(run: dict, tf32: bool = False) -> tuple[str | None, float | None]:
    """The fastest dense variant of one e2e run (eager or graph-replayed, torchvision or our executor
    all-dense), FP32 or TF32: every published e2e ratio is against it, so none rests on a weak baseline."""
    cands = [(v["median_ms"], k) for k, v in run.get("times_ms", {}).items()
             if (k.startswith("torchvision_") or k.startswith("dense_exec_")) and ("tf32" in k) == tf32]
    if not cands:
        return None, None
    ms, name = min(cands)
    return name, ms


def headline(layers: list[dict], e2e: list[dict], cal: list[dict]) -> list[str]:
    """One row per network and batch: layer speedups per level, end-to-end speedups and energy against the
    strongest dense configurations, model/exhaustive; details below."""
    nets = sorted({d["network"] for d in layers + e2e})
    if not nets:
        return []
    levels = sorted({lv for d in layers for lv in d["levels"]})
    ex = {(d["network"], e["batch"]): [] for d in cal for e in d.get("exhaustive") or []}
    for d in cal:
        for e in d.get("exhaustive") or []:
            if e.get("model_over_best"):
                ex[(d["network"], e["batch"])].append(e["model_over_best"])
    out = ["## Headline", "",
           "Layer columns: geometric-mean speedup of the sparse conv over cuDNN FP32 (best of NHWC/NCHW) over the "
           "distinct conv shapes measured, at each input sparsity; TF32 in brackets. End-to-end columns: snn's "
           "whole-network time against the strongest dense FP32 configuration measured in the same run (the "
           "fastest of torchvision's model and our executor all-dense, eager or CUDA-graph replayed), against the "
           "strongest TF32 one, and the energy per image of that FP32 configuration over snn's (> 1: snn uses "
           "less).", "",
           "| " + " | ".join(["network", "batch"] + [f"layers @{lv:.2f}" for lv in levels] + [
               "e2e vs best dense FP32", "e2e vs best dense TF32", "energy ratio", "model/exhaustive"]) + " |",
           "|---|---|" + "---|" * (len(levels) + 4)]
    for n in nets:
        ld = next((d for d in layers if d["network"] == n), None)
        ed = next((d for d in e2e if d["network"] == n), None)
        rows = layer_rows(ld) if ld else []
        batches = sorted({int(b) for b in (ld["batches"] if ld else [])} | {int(b) for b in (ed["runs"] if ed else {})})
        for B in batches:
            cells = []
            for lv in levels:
                r = next((r for r in rows if r["batch"] == B and abs(r["level"] - lv) < 1e-9), None)
                cells.append(f"{_f(r['geomean_fp32'])} ({_f(r['geomean_tf32'])})" if r else "–")
            run = (ed or {}).get("runs", {}).get(str(B), {})
            sp = run.get("speedup_snn_over", {})
            en = run.get("energy_ratio_over_snn", {})
            r_ex = ex.get((n, B))
            best32, best_tf = strongest_dense(run)[0], strongest_dense(run, tf32=True)[0]
            out.append(f"| {n} | {B} | " + "".join(c + " | " for c in cells) + f"{_f(sp.get(best32))} ({best32 or '–'}) | "
                       f"{_f(sp.get(best_tf))} ({best_tf or '–'}) | {_f(en.get(best32))} | "
                       f"{_f(float(np.mean(r_ex)), '{:.3f}') if r_ex else '–'} |")
    prof = sorted({str(d.get("sparsity_profile")) for d in e2e if d.get("sparsity_profile")})
    if prof:
        out += ["", f"End to end with **sparsity profile {', '.join(prof)}** (biases shifted to set the sparsity; "
                "random weights)."]
    return out + [""]


def summary_markdown(docs: list[dict]) -> str:
    """The Markdown summary of every bench/calibrate document found in one results folder."""
    lines = ["# snn benchmark summary", ""]
    envs = [d["environment"] for d in docs if d.get("environment")]
    if envs:
        e = envs[0]
        lines += [f"GPU: {e.get('gpu')} (driver {e.get('driver', '?')}), torch {e.get('torch')}, cuDNN "
                  f"{e.get('cudnn')}, CUDA {e.get('cuda_runtime')}; commit {e.get('git_commit') or '?'}; "
                  f"measured {e.get('utc')}.", ""]
    layers = [d for d in docs if d.get("kind") == "layers"]
    e2e = [d for d in docs if d.get("kind") == "e2e"]
    cal = [d for d in docs if d.get("kind") == "calibrate"]
    lines += headline(layers, e2e, cal)
    if layers:
        lines += ["## Layers: sparse path vs cuDNN (paper Figs. 10-11)", "",
                  "Per distinct conv shape; inputs are real activations on photos thresholded to the level. "
                  "*Speedup* = cuDNN time / our time, both the convolution alone (best of NHWC/NCHW for "
                  "cuDNN); *+epi both*: the bias+ReLU epilogue added to both sides (both paths run it); "
                  "*+epi ours*: our conv + epilogue with zero counting against cuDNN's conv alone (the "
                  "harshest view); *weighted*: whole-network conv time at that level (each shape times "
                  "its count), cuDNN over ours.", ""]
        for d in layers:
            if not d.get("complete", True):
                lines += [f"**{d['network']}: incomplete (the run was interrupted; the shapes below were measured).**", ""]
            lines += [f"### {d['network']}", "", f"Weights: {d['weights']}. Images: "
                      f"{d['images'].get('source')} ({d['images'].get('distinct', d['images'].get('n'))} distinct).", "",
                      "| batch | level | shapes | geomean vs FP32 | mean vs FP32 | geomean vs TF32 | +epi both | "
                      "+epi ours | weighted vs FP32 | wins FP32 | wins TF32 | max rel err |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for r in layer_rows(d):
                lines.append(f"| {r['batch']} | {r['level']:.2f} | {r['shapes']} | {_f(r['geomean_fp32'])} | "
                             f"{_f(r['mean_fp32'])} | {_f(r['geomean_tf32'])} | {_f(r['geomean_fp32_epilogue_both'])} | "
                             f"{_f(r['geomean_fp32_epilogue_ours'])} | {_f(r['weighted_fp32'])} | "
                             f"{r['wins_fp32']}/{r['shapes']} | {r['wins_tf32']}/{r['shapes']} | "
                             f"{_f(r['max_rel_err'], '{:.1e}')} |")
            lows = lowest_levels(d)
            bs = [str(b) for b in d["batches"]]
            lines += ["", f"Lowest measured level from which each shape beats cuDNN FP32 (levels "
                      f"{', '.join(f'{x:.2f}' for x in d['levels'])}; 'never': not even at the highest):", "",
                      "| shape | layers | " + " | ".join(f"batch {b}" for b in bs) + " |",
                      "|---|---|" + "---|" * len(bs)]
            for r in lows:
                lines.append(f"| {r['label']} | {r['count']} | " + " | ".join(
                    _f(r["batches"].get(b), none="never") if b in r["batches"] else "–" for b in bs) + " |")
            lim = limit_rows(d)
            if lim:
                lvs = sorted({k for r in lim for k in r["useful_tflops"]}, key=float)
                peak = d.get("fp32_peak_tflops")
                lines += ["", "Useful throughput (2 FLOPs per multiply-accumulate with a non-zero input, over our "
                          "time), " + (f"as a share of the FP32 peak measured in the same run ({peak:.1f} TFLOP/s, an "
                                       f"8192³ matrix product with TF32 off)" if peak else "no FP32 peak measured")
                          + "; last column: our time at the highest level (the fixed cost when that level is 0.99):",
                          "",
                          "| shape | batch | " + " | ".join(f"TFLOP/s @{k}" for k in lvs) + " | µs @ highest |",
                          "|---|---|" + "---|" * (len(lvs) + 1)]
                for r in lim:
                    share = {k: f" ({v:.0%})" for k, v in r["share"].items()}
                    cells = [_f(r["useful_tflops"][k], "{:.2f}") + share.get(k, "") if k in r["useful_tflops"] else "–"
                             for k in lvs]
                    lines.append(f"| {r['label']} | {r['batch']} | " + " | ".join(cells)
                                 + f" | {r['top_level_us']:.1f} |")
            if not any(c.get("exhaustive") for c in cal):
                lines += ["", FIG8_NOTE + ".", ""]
            else:
                lines += ["", "Model-chosen vs exhaustive-best: see the calibration section.", ""]
    if cal:
        lines += ["## Calibration (measured thresholds written into the manifest)", ""]
        for d in cal:
            rows = d.get("rows", [])
            never = sum(1 for r in rows if r["never"])
            static = sum(1 for r in rows if r.get("static"))
            th = [r["threshold"] for r in rows if not r["never"]]
            lines += [f"### {d['network']}", "", f"{len(rows)} layer/batch entries calibrated "
                      f"(batches {', '.join(map(str, d['batches']))}); kept dense on {never} (sparse never wins, or not by "
                      f"what a decision costs); "
                      f"median threshold where it does: {_f(median(th))}; static (sparse at any sparsity, no "
                      f"decision on the device: it wins at every level and, extrapolated to a dense input, "
                      f"stays within {DECISION_COST_US:g} µs of cuDNN): {static}.", ""]
            tuned = any(r.get("tuned_gain") for r in rows)
            if tuned:
                gains = [r["tuned_gain"] for r in rows if r.get("tuned_gain")]
                lines += [f"Candidate kernels measured (snn-codegen build --candidates): the model's pick took "
                          f"**{_f(geomean(gains), '{:.3f}')}×** the chosen kernel's time (geometric mean over layers "
                          f"and batches).", ""]
            lines += ["| shape | layers | batch | threshold |" + (" levels retuned (pick / chosen) |" if tuned else ""),
                      "|---|---|---|---|" + ("---|" if tuned else "")]
            grouped: dict = {}
            for r in rows:  # identical shapes share one measurement: one line each
                grouped.setdefault((r.get("shape", r["layer"]), r["batch"]), []).append(r)
            for (shape, b), rs in grouped.items():
                t = "never" if rs[0]["never"] else f"{rs[0]['threshold']:.2f}" + (" static" if rs[0].get("static") else "")
                extra = (f" {rs[0].get('tuned_levels', 0)} ({_f(rs[0].get('tuned_gain'), '{:.3f}')}×) |"
                         if tuned else "")
                lines.append(f"| {shape} | {len(rs)} | {b} | {t} |{extra}")
            lines.append("")
            ex = d.get("exhaustive") or []
            if ex:
                ratios = [e["model_over_best"] for e in ex if e.get("model_over_best")]
                lines += ["#### Model-chosen vs exhaustive-best (paper Fig. 8, sampled)", "",
                          f"Per layer: the model's config and up to {max(len(e['candidates']) for e in ex)} "
                          f"stage-1 survivors (the model's next best and the rest spread over stage 1), each built "
                          f"and timed on real activations at the level. Mean model/best time ratio: "
                          f"**{_f(float(np.mean(ratios)) if ratios else None, '{:.3f}')}** (1.0: the model picked "
                          f"the fastest of the sample).", "",
                          "| layer | batch | level | stage-1 survivors | timed | model µs | best µs | model/best | model's rank |",
                          "|---|---|---|---|---|---|---|---|---|"]
                for e in ex:
                    lines.append(f"| {e['label']} | {e['batch']} | {e['level']:.2f} | {e['stage1_survivors']} | "
                                 f"{e['timed']} | {_f(e['model_us'])} | {_f(e['best_us'])} | "
                                 f"{_f(e['model_over_best'], '{:.3f}')} | {e['model_rank'] or '–'} |")
                lines.append("")
    if e2e:
        lines += ["## End to end (paper Figs. 12-13)", ""]
        for d in e2e:
            prof = d.get("sparsity_profile")
            if not d.get("complete", True):
                lines += [f"**{d['network']}: incomplete (the run was interrupted).**", ""]
            lines += [f"### {d['network']}", "", f"Weights: {d['weights']}. " + (
                f"**Sparsity profile {prof}: {d['sparsity_profile_note']}.**" if prof else
                "Sparsity as the weights give it on the images."), ""]
            names = sorted({k for r in d["runs"].values() for k in r["times_ms"]}, key=lambda k: (k != "snn", k))
            lines += ["| batch | " + " | ".join(f"{n} ms" for n in names) + " | snn speedup over " + ", ".join(
                n for n in names if n != "snn") + " | energy mJ/image (snn / torchvision_fp32) | mean input "
                "sparsity | sparse convs | snn graph replay / kernel sum |", "|---|" + "---|" * (len(names) + 5)]
            for B, r in d["runs"].items():
                t = r["times_ms"]
                en = r.get("energy", {})
                es, ef = (en.get("snn") or {}).get("mj_per_image"), (en.get("torchvision_fp32") or {}).get("mj_per_image")
                lines.append(f"| {B} | " + " | ".join(_f(t[n]["median_ms"], "{:.3f}") if n in t else "–" for n in names)
                             + " | " + ", ".join(_f(r["speedup_snn_over"].get(n)) for n in names if n != "snn")
                             + f" | {_f(es, '{:.1f}')} / {_f(ef, '{:.1f}')} | {_f(r.get('mean_conv_input_sparsity'))} | "
                             f"{r.get('sparse_layers')}/{len(r.get('layers', []))} | "
                             f"{_f((r.get('kernel_sum') or {}).get('replay_over_kernel_sum'))} |")
            lines.append("")
    return "\n".join(lines) + "\n"
