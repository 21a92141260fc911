"""Markdown table of a `check_kernels.py bench --ws-b1` folder (bench.json + b1_plans.json): per layer and level,
cuDNN FP32, the plan's pick as built ("now"), the pick with warp-tiled configs allowed at batch 1 ("ws_b1"), the
best kernel timed, and each pick over that best; then geometric means over the 3x3 layers (issue 7's target 1)
and the 1x1 ones.

    python3 tools/ws_b1_table.py docs/results/kernels/run25-b1/bench
"""
from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runtime.bench import geomean  # noqa: E402


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


def main(argv=None) -> int:
    folder = Path((argv or sys.argv[1:])[0])
    print(table(*load(folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
