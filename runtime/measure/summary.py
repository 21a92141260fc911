"""summary.md from the result documents of one folder (bench layers, bench e2e, calibrate): the headline,
then the tables of each kind, and the rows they are made of (layer_rows, lowest_levels, limit_rows,
e2e_rows; the plots draw the same rows). No torch: it reads JSON documents only."""
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
            half = {p: [r[f"speedup_{p}"] for _, _, r in recs if f"speedup_{p}" in r] for p in ("fp16", "bf16")}
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
                         "geomean_fp16": geomean(half["fp16"]) if half["fp16"] else None,
                         "geomean_bf16": geomean(half["bf16"]) if half["bf16"] else None,
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


def e2e_rows(doc: dict) -> list[dict]:
    """One row per batch and profile of an e2e document: snn's time against the strongest baseline of its own
    precision (exact FP32) and the strongest overall, both measured in the same run (the plots draw these)."""
    rows = []
    for B, r in sorted(doc.get("runs", {}).items(), key=lambda kv: int(kv[0])):
        st = r.get("strongest", {})
        bl = r.get("baselines", {})
        for label, s in r.get("snn", {}).items():
            row = {"network": doc["network"], "batch": int(B), "profile": label, "snn_ms": s["median_ms"],
                   "kernel_ms": (s.get("kernel_sum") or {}).get("kernel_sum_ms"),
                   "sparse": f"{s.get('sparse_layers')}/{s.get('convs')}",
                   "mean_sparsity": s.get("mean_conv_input_sparsity"), "rel_err_vs_fp64": s.get("rel_err_vs_fp64")}
            for key in ("same_precision", "overall"):
                n = st.get(key)
                row[key] = n
                row[key + "_ms"] = bl[n]["median_ms"] if n else None
                row[key + "_speedup"] = (bl[n]["median_ms"] / s["median_ms"]) if n else None
            e_s = (s.get("energy") or {}).get("mj_per_image")
            e_b = (bl.get(st.get("same_precision") or "", {}).get("energy") or {}).get("mj_per_image")
            row["energy_ratio"] = e_b / e_s if e_s and e_b else None
            rows.append(row)
    return rows


def headline(layers: list[dict], e2e: list[dict], cal: list[dict]) -> list[str]:
    """One row per network and batch: layer speedups per level, end-to-end speedups and energy against the
    strongest baselines, model/exhaustive; details below."""
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
           "distinct conv shapes measured, at each input sparsity; TF32 in brackets. End-to-end columns (first "
           "sparsity profile of the run): snn's whole-network time against the strongest exact-FP32 baseline and the "
           "strongest baseline of any precision, both measured in the same run (eager, CUDA graph or torch.compile; "
           "FP32, TF32, FP16, BF16), and the energy per image of that FP32 baseline over snn's (> 1: snn uses less).",
           "",
           "| " + " | ".join(["network", "batch"] + [f"layers @{lv:.2f}" for lv in levels] + [
               "e2e profile", "vs strongest FP32", "vs strongest overall", "energy ratio", "model/exhaustive"]) + " |",
           "|---|---|" + "---|" * (len(levels) + 5)]
    for n in nets:
        ld = next((d for d in layers if d["network"] == n), None)
        ed = next((d for d in e2e if d["network"] == n), None)
        rows = layer_rows(ld) if ld else []
        first = {r["batch"]: r for r in reversed(e2e_rows(ed))} if ed else {}
        batches = sorted({int(b) for b in (ld["batches"] if ld else [])} | set(first))
        for B in batches:
            cells = []
            for lv in levels:
                r = next((r for r in rows if r["batch"] == B and abs(r["level"] - lv) < 1e-9), None)
                cells.append(f"{_f(r['geomean_fp32'])} ({_f(r['geomean_tf32'])})" if r else "–")
            e = first.get(B, {})
            r_ex = ex.get((n, B))
            out.append(f"| {n} | {B} | " + "".join(c + " | " for c in cells) + f"{e.get('profile', '–')} | "
                       f"{_f(e.get('same_precision_speedup'))} ({e.get('same_precision') or '–'}) | "
                       f"{_f(e.get('overall_speedup'))} ({e.get('overall') or '–'}) | {_f(e.get('energy_ratio'))} | "
                       f"{_f(float(np.mean(r_ex)), '{:.3f}') if r_ex else '–'} |")
    return out + [""]


def e2e_markdown(d: dict) -> list[str]:
    """The end-to-end section of one network: snn per profile against the strongest baselines, every baseline,
    what could not run, and each profile's target against the realized sparsity per conv."""
    lines = [f"### {d['network']}", ""]
    if not d.get("complete", True):
        lines += ["**Incomplete (the run was interrupted): the batches below were measured.**", ""]
    runs = d.get("runs", {})
    model = next((r.get("baseline_model") for r in runs.values() if r.get("baseline_model")), "?")
    lines += [f"Weights: {d['weights']}. Baseline model: {model}, on the weights of profile "
              f"`{d.get('baselines_on_profile')}`. " + (f"Sparsity: {d['profile_note']}." if d.get("profile_note") else
                                                        "Sparsity as the weights give it on the images."), "",
              "| batch | profile | snn ms | strongest FP32 baseline | ms | snn speedup | strongest overall | ms | "
              "snn speedup | mean input sparsity (GPU) | sparse convs | snn kernel sum ms | snn rel err vs FP64 |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in e2e_rows(d):
        lines.append(f"| {r['batch']} | {r['profile']} | {r['snn_ms']:.3f} | {r['same_precision'] or '–'} | "
                     f"{_f(r['same_precision_ms'], '{:.3f}')} | {_f(r['same_precision_speedup'])}× | "
                     f"{r['overall'] or '–'} | {_f(r['overall_ms'], '{:.3f}')} | {_f(r['overall_speedup'])}× | "
                     f"{_f(r['mean_sparsity'])} | {r['sparse']} | {_f(r['kernel_ms'], '{:.3f}')} | "
                     f"{_f(r['rel_err_vs_fp64'], '{:.1e}')} |")
    sixteen = [(b, p, s) for b in sorted(runs, key=int) for p, s in runs[b].get("snn16", {}).items()]
    if sixteen:
        lines += ["", "snn in 16 bits (every conv on the tensor cores, bias / residual / ReLU fused into the "
                  "launch: the bundle's tensor-core kernel where it measured faster than cuDNN at load, else "
                  "cuDNN's fused call; on the baselines' weights): against the strongest baseline of the same "
                  "precision and the strongest overall; error against FP64 over the eager model's in that precision; top-5 identical "
                  "to it:", "",
                  "| batch | precision | snn ms | strongest same precision | snn speedup | vs strongest overall | "
                  "rel err vs FP64 | err / eager's | top-5 identical | convs on snn's kernel |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for b, p, s in sixteen:
            lines.append(f"| {b} | {p} | {s['median_ms']:.3f} | {s.get('strongest_same_precision') or '–'} | "
                         f"{_f(s.get('speedup_vs_same_precision'))}× | {_f(s.get('speedup_vs_strongest'))}× | "
                         f"{_f(s.get('rel_err_vs_fp64'), '{:.1e}')} | {_f(s.get('rel_err_over_eager'))} | "
                         f"{_f(s.get('top5_identical_to_eager'), '{:.0%}')} | {s.get('tensorcore_convs', '–')} |")
    names = sorted({k for r in runs.values() for k in r.get("baselines", {})})
    if names:
        bs = sorted(runs, key=int)
        lines += ["", "Every baseline (ms, median wall time per forward; torch.compile's compile time in brackets; "
                  "relative error of the output against FP64):", "",
                  "| baseline | " + " | ".join(f"batch {b}" for b in bs) + " | rel err vs FP64 |",
                  "|---|" + "---|" * (len(bs) + 1)]
        for n in names:
            cells, err = [], None
            for b in bs:
                v = runs[b].get("baselines", {}).get(n)
                if v is None:
                    cells.append("–")
                    continue
                err = v.get("rel_err_vs_fp64", err)
                cells.append(f"{v['median_ms']:.3f}" + (f" ({v['compile_s']:.0f} s)" if v.get("compile_s") else ""))
            lines.append(f"| {n} | " + " | ".join(cells) + f" | {_f(err, '{:.1e}')} |")
        dense = [(b, runs[b].get("dense_exec_fp32")) for b in bs]
        if any(v for _, v in dense):
            lines.append("| (snn's executor, all convs cuDNN FP32: not a baseline) | " + " | ".join(
                f"{v['median_ms']:.3f}" if v else "–" for _, v in dense) + " | |")
    notes = sorted({f"{k}: {v}" for r in runs.values() for k, v in r.get("notes", {}).items()}
                   | {f"snn[{p}] {k}: {v}" for r in runs.values() for p, s in r.get("snn", {}).items()
                      for k, v in (s.get("notes") or {}).items()})
    if notes:
        lines += ["", "Not measured or degraded (said, not hidden):", ""] + [f"- {n}" for n in notes]
    for p in d.get("profiles", []):
        if not p.get("per_conv"):
            continue
        first_b = min(runs, key=int) if runs else None
        gpu = {}
        if first_b:
            s = runs[first_b].get("snn", {}).get(p["name"], {})
            gpu = {t["name"]: t["sparsity"] for t in s.get("graph_trace") or s.get("layers") or []}
        tg = [c["target"] for c in p["per_conv"]]
        rl = [c["realized"] for c in p["per_conv"] if c.get("realized") is not None]
        lines += ["", f"<details><summary>Profile <b>{p['name']}</b>: {p.get('description', '')} "
                  f"({len(tg)} convs; mean target {np.mean(tg):.3f}, realized on the images {np.mean(rl):.3f}, "
                  f"largest gap {_f(p.get('max_abs_realized_minus_target'), '{:.3f}')})</summary>", "",
                  f"| conv | roles | stage | target | origin | realized (images) | measured on the GPU (batch "
                  f"{first_b}) |", "|---|---|---|---|---|---|---|"]
        for c in p["per_conv"]:
            lines.append(f"| {c['conv']} | {', '.join(c.get('roles', []))} | {c.get('stage', '–')} | "
                         f"{c['target']:.2f} | {c.get('origin', '')} | {_f(c.get('realized'), '{:.3f}')} | "
                         f"{_f(gpu.get(c['conv']), '{:.3f}')} |")
        lines += ["", "</details>"]
    return lines + [""]


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
                  "cuDNN; FP16 and BF16: weights and input cast, tensor cores, snn stays exact FP32); *+epi both*: the bias+ReLU epilogue added to both sides (both paths run it); "
                  "*+epi ours*: our conv + epilogue with zero counting against cuDNN's conv alone (the "
                  "harshest view); *weighted*: whole-network conv time at that level (each shape times "
                  "its count), cuDNN over ours.", ""]
        for d in layers:
            if not d.get("complete", True):
                lines += [f"**{d['network']}: incomplete (the run was interrupted; the shapes below were measured).**", ""]
            lines += [f"### {d['network']}", "", f"Weights: {d['weights']}. Images: "
                      f"{d['images'].get('source')} ({d['images'].get('distinct', d['images'].get('n'))} distinct).", "",
                      "| batch | level | shapes | geomean vs FP32 | mean vs FP32 | geomean vs TF32 | geomean vs FP16 | "
                      "geomean vs BF16 | +epi both | +epi ours | weighted vs FP32 | wins FP32 | wins TF32 | max rel err |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for r in layer_rows(d):
                lines.append(f"| {r['batch']} | {r['level']:.2f} | {r['shapes']} | {_f(r['geomean_fp32'])} | "
                             f"{_f(r['mean_fp32'])} | {_f(r['geomean_tf32'])} | {_f(r.get('geomean_fp16'))} | "
                             f"{_f(r.get('geomean_bf16'))} | {_f(r['geomean_fp32_epilogue_both'])} | "
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
            lines += e2e_markdown(d)
    return "\n".join(lines) + "\n"
