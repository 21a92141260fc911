#!/usr/bin/env python3
"""Tables (and a plot) of tools/tune_ab.sh's archives: the measured choice among candidate kernels against the
cost model's picks, per layer, batch and level, on the photos the calibration did not see.

    python3 tools/tune_table.py docs/results/h100/tune-s8/resnet152.tgz docs/results/h100/tune-s8/densenet201.tgz \
        [--png docs/results/h100/tune-s8/tune.png] > docs/results/h100/tune-s8/table.md
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import re
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snn.runtime.calibrate import TUNE_MARGIN, measurement_key  # noqa: E402


def members(path: str) -> dict[str, dict]:
    """'<side>/<file>' -> JSON document, for the calibrate / layers / e2e documents of one archive."""
    out = {}
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            if m.name.endswith(".json.gz"):
                side_file = "/".join(m.name.split("/")[1:])
                out[side_file] = json.load(io.TextIOWrapper(gzip.open(tar.extractfile(m))))
    return out


def gm(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def layer_rows(docs: dict) -> list[dict]:
    rows = []
    model = next(d for k, d in docs.items() if re.match(r"model/layers_", k))
    tuned = next(d for k, d in docs.items() if re.match(r"tuned/layers_", k))
    meas = next(d for k, d in docs.items() if re.match(r"tuned/calibrate_", k))["measurements"]
    for s_m, s_t in zip(model["shapes"], tuned["shapes"]):
        for b in map(str, model["batches"]):
            for lv in model["levels"]:
                k = f"{lv:.2f}"
                a, c = s_m["batches"][b]["levels"][k], s_t["batches"][b]["levels"][k]
                cal = [meas.get(measurement_key(s_m["tag"], int(b), lv, x["kernel"]), {}).get("sparse_us")
                       for x in (a, c)]
                rows.append({"network": model["network"], "label": s_m["label"], "batch": int(b), "level": k,
                             "cal_gain": cal[0] / cal[1] if all(cal) else None,
                             "model_us": a["sparse_us"], "tuned_us": c["sparse_us"],
                             "changed": a["kernel"] != c["kernel"],
                             "model_kernel": a["kernel"], "tuned_kernel": c["kernel"],
                             "dense_model_run": a["dense_fp32_us"], "dense_tuned_run": c["dense_fp32_us"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archives", nargs="+")
    ap.add_argument("--png")
    a = ap.parse_args()
    rows, e2e, cal = [], [], []
    for path in a.archives:
        docs = members(path)
        rows += layer_rows(docs)
        for k, d in sorted(docs.items()):
            if "/e2e" in k:
                for b, rec in d["runs"].items():
                    t = {n: x["median_ms"] for n, x in rec["times_ms"].items()}
                    fp = min(x for n, x in t.items() if "fp32" in n)
                    side, run = k.split("/")[:2]
                    e2e.append((d["network"], int(b), side, run, t["snn"], fp, rec["sparse_layers"]))
            elif "/calibrate_" in k and k.startswith("tuned/"):
                for b in d["batches"]:
                    g = [r["tuned_gain"] for r in d["rows"] if r["batch"] == b and r.get("tuned_gain")]
                    n = sum(1 for r in d["rows"] if r["batch"] == b and (r.get("tuned_levels") or 0) > 0)
                    cal.append((d["network"], b, gm(g), n, len(g)))
    print("## Calibration (photos A): the model's pick over the chosen candidate, per layer\n")
    print("| network | batch | geomean pick/chosen | layers with a level retuned |\n|---|---|---|---|")
    for net, b, g, n, tot in cal:
        print(f"| {net} | {b} | {g:.3f} | {n} of {tot} |")
    print("\n## bench layers on photos B: our µs, the model's pick → the measured choice (* another kernel)\n")
    print("| layer | batch | level | model µs | tuned µs | ratio | cuDNN FP32 µs (each run) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['network']} {r['label']} | {r['batch']} | {r['level']} | {r['model_us']:.1f} | {r['tuned_us']:.1f}"
              f"{' *' if r['changed'] else ''} | {r['tuned_us'] / r['model_us']:.3f} | "
              f"{r['dense_model_run']:.1f} / {r['dense_tuned_run']:.1f} |")
    print("\nThe same kernel timed in both runs shows the drift between them (the second run is the tuned one).\n")
    print("| network | batch | level | geomean tuned/model, all layers | where the kernel changed (n) | "
          "where it did not: drift (n) |")
    print("|---|---|---|---|---|---|")
    for key in sorted({(r["network"], r["batch"], r["level"]) for r in rows}):
        sel = [r for r in rows if (r["network"], r["batch"], r["level"]) == key]
        ch = [r["tuned_us"] / r["model_us"] for r in sel if r["changed"]]
        same = [r["tuned_us"] / r["model_us"] for r in sel if not r["changed"]]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {gm([r['tuned_us'] / r['model_us'] for r in sel]):.3f} | "
              f"{gm(ch):.3f} ({len(ch)}) | {gm(same):.3f} ({len(same)}) |")
    print("\n## Where the kernel changed: the gain calibrate measured (photos A) against the gain on photos B\n")
    print("Gain = the model's pick's time over the chosen one's. `calibrate` now keeps the pick unless the gain is "
          f"at least 1 / (1 - {TUNE_MARGIN}) (TUNE_MARGIN); this run was made without that margin.\n")
    print("| layer | batch | level | gain, photos A | gain, photos B | kept by the margin |\n|---|---|---|---|---|---|")
    for r in rows:
        if r["changed"] and r["cal_gain"]:
            kept = r["cal_gain"] < 1 / (1 - TUNE_MARGIN)
            print(f"| {r['network']} {r['label']} | {r['batch']} | {r['level']} | {r['cal_gain']:.3f} | "
                  f"{r['model_us'] / r['tuned_us']:.3f} | {'yes' if kept else ''} |")
    print("\n## bench e2e on photos B, sparsity profile 0.7 (runs in the order of the call)\n")
    print("| network | batch | side | run | snn ms | best dense FP32 ms (×) | sparse convs |")
    print("|---|---|---|---|---|---|---|")
    for net, b, side, run, t, fp, n in sorted(e2e, key=lambda x: (x[0], x[1], x[3], x[2])):
        print(f"| {net} | {b} | {side} | {run} | {t:.3f} | {fp:.3f} ({fp / t:.2f}) | {n} |")
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        sel = [r for r in rows if r["level"] == "0.70"]
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, b in zip(axes, (1, 32)):
            rs = [r for r in sel if r["batch"] == b]
            x = range(len(rs))
            ax.bar([i - 0.2 for i in x], [r["model_us"] for r in rs], 0.4, label="model's pick")
            ax.bar([i + 0.2 for i in x], [r["tuned_us"] for r in rs], 0.4, label="measured choice")
            ax.set_xticks(list(x), [("* " if r["changed"] else "") + r["label"] for r in rs], rotation=70, fontsize=7)
            ax.set_ylabel("µs (photos B, sparsity 0.7)")
            ax.set_title(f"batch {b}: the kernel a level runs, model vs measured (* changed)", fontsize=9)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(a.png, dpi=100)


if __name__ == "__main__":
    main()
