"""Markdown table of a `check_kernels.py bench --ws-b1` folder (bench.json + b1_plans.json): per layer and level,
cuDNN FP32, the plan's pick as built ("now"), the pick with warp-tiled configs allowed at batch 1 ("ws_b1"), the
best kernel timed, and each pick over that best; then geometric means over the 3x3 layers (issue 7's target 1)
and the 1x1 ones.

    python3 tools/ws_b1_table.py docs/results/kernels/run25-b1/bench [--png FILE]

--png: per layer at 0.7, the two picks and the best measured against cuDNN FP32 (needs matplotlib).
"""
from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from snn.runtime.measure.common import geomean  # noqa: E402


def load(folder: Path) -> tuple[dict, dict]:
    p = folder / "bench.json"
    bench = json.loads(p.read_text() if p.exists() else gzip.decompress((folder / "bench.json.gz").read_bytes()))
    return bench, json.loads((folder / "b1_plans.json").read_text())


def table(bench: dict, plans: dict) -> str:
    lines = ["| layer | level | cuDNN FP32 µs | now: pick µs | ws_b1: pick µs | best µs (kernel) | now / best | "
             "ws_b1 / best |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    speed: dict[tuple[str, bool, float], list[float]] = {}
    ratio: dict[str, list[float]] = {"now": [], "ws_b1": []}
    for r in bench["bench"]:
        a, lv = r["all_us"], r["sparsity"]
        name = lambda tag: f"sconv_{r['shape']}_{tag}_b1"  # noqa: E731
        t = {k: a.get(name(plans[r["shape"]][k][f"{lv}"]), math.nan) for k in ("now", "ws_b1")}
        best = min(a, key=a.get)
        one = r["shape"].startswith("r1s1")
        for k in t:
            ratio[k].append(t[k] / a[best])
            if math.isfinite(t[k]):
                speed.setdefault((k, one, lv), []).append(r["cudnn_fp32_us"] / t[k])
        speed.setdefault(("best", one, lv), []).append(r["cudnn_fp32_us"] / a[best])
        lines.append(f"| {r['layer']} | {lv} | {r['cudnn_fp32_us']:.1f} | {t['now']:.1f} | {t['ws_b1']:.1f} | "
                     f"{a[best]:.1f} ({best.split('_', 6)[-1]}) | {t['now'] / a[best]:.2f} | "
                     f"{t['ws_b1'] / a[best]:.2f} |")
    fin = {k: [x for x in v if math.isfinite(x)] for k, v in ratio.items()}  # a pick not timed: left out
    lines += ["", "Pick over best, mean: " + ", ".join(f"{k} {sum(v) / len(v):.3f} ({len(v)} of {len(ratio[k])})"
                                                     for k, v in fin.items()), "",
              "| convs | level | geomean ×FP32: now | ws_b1 | best |", "| --- | --- | --- | --- | --- |"]
    for one in (False, True):
        for lv in sorted({k[2] for k in speed}):
            if ("now", one, lv) in speed:
                lines.append(f"| {'1x1' if one else '3x3'} | {lv} | " + " | ".join(
                    f"{geomean(speed[(k, one, lv)]):.2f}" for k in ("now", "ws_b1", "best")) + " |")
    return "\n".join(lines)


def plot(bench: dict, plans: dict, path: Path, level: float = 0.7) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in bench["bench"] if r["sparsity"] == level]
    labels = [r["layer"].replace("resnet152 ", "R ").replace("densenet201 ", "D ") for r in rows]
    series = {"cuDNN FP32": [r["cudnn_fp32_us"] for r in rows]}
    for k, lab in (("now", "plan before (classic)"), ("ws_b1", "plan with warp-tiled (WS_MIN_BATCH 1)")):
        series[lab] = [r["all_us"].get(f"sconv_{r['shape']}_{plans[r['shape']][k][f'{level}']}_b1", math.nan)
                       for r in rows]
    series["best measured"] = [min(r["all_us"].values()) for r in rows]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    w = 0.8 / len(series)
    for i, (lab, ys) in enumerate(series.items()):
        ax.bar([j + i * w for j in range(len(rows))], ys, w, label=lab)
    ax.set_xticks([j + 0.4 - w / 2 for j in range(len(rows))], labels, rotation=35, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("µs (median, L2 flushed)")
    ax.set_title(f"batch 1, sparsity {level}, uniform zeros: {bench.get('device', '')}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    args = list(argv or sys.argv[1:])
    folder = Path(args[0])
    bench, plans = load(folder)
    print(table(bench, plans))
    if "--png" in args:
        plot(bench, plans, Path(args[args.index("--png") + 1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
