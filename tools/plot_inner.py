#!/usr/bin/env python3
"""Plot a `check_kernels.py bench --inner` (or `--ws`) JSON: per layer at one level, the best previous-config
kernel, the best nt 8 (warp-tiled) one and cuDNN FP32 / TF32, one panel per batch.

    python tools/plot_inner.py docs/results/kernels/run11-l1/bench/bench.json --level 0.7 --out PNG
    python tools/plot_inner.py docs/results/kernels/run16-ws/bench/bench.json --ws --level 0.7 --out PNG
    python tools/plot_inner.py docs/results/kernels/run22-ws-inner/bench.json --variants --out PNG

--variants (check_kernels.py bench --ws-inner): each channel-loop variant's best time over the base loop's, per
layer, one panel per level.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", type=Path)
    ap.add_argument("--level", type=float, default=0.7)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ws", action="store_true", help="warp-tiled kernels (names with _wAxB) against the rest")
    ap.add_argument("--variants", action="store_true", help="channel-loop variants (names ending _v<variant>)")
    a = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if a.variants:
        return plot_variants(json.loads(a.json.read_text())["bench"], a.out, plt)
    rows = [r for r in json.loads(a.json.read_text())["bench"] if r["sparsity"] == a.level]
    batches = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(1, len(batches), figsize=(7 * len(batches), 5), squeeze=False)
    for ax, b in zip(axes[0], batches):
        sel = [r for r in rows if r["batch"] == b]
        new = (lambda n: re.search(r"_w\d+x\d+", n) is not None) if a.ws else \
            (lambda n: "n8_" in n and not n.endswith(("_h", "_ca")))
        old = (lambda n: not new(n)) if a.ws else (lambda n: "n8_" not in n and not n.endswith(("_h", "_ca")))
        series = {
            "previous best configs": [min((t for n, t in r["all_us"].items() if old(n)), default=float("nan")) for r in sel],
            "warp-tiled" if a.ws else "nt 8": [min((t for n, t in r["all_us"].items() if new(n)), default=float("nan")) for r in sel],
            "cuDNN FP32": [r["cudnn_fp32_us"] for r in sel],
            "cuDNN TF32": [r["cudnn_tf32_us"] for r in sel],
        }
        x = range(len(sel))
        w = 0.2
        for i, (lab, ys) in enumerate(series.items()):
            ax.bar([xi + (i - 1.5) * w for xi in x], ys, w, label=lab)
        ax.set_xticks(list(x))
        ax.set_xticklabels([r["layer"].replace("resnet152 ", "").replace("densenet201 ", "DN ") for r in sel],
                           rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("µs (median, L2 flushed)")
        ax.set_title(f"batch {b}, sparsity {a.level}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


def plot_variants(rows: list[dict], out: Path, plt) -> None:
    from check_kernels import variant_bests  # beside this script
    levels = sorted({r["sparsity"] for r in rows})
    fig, axes = plt.subplots(1, len(levels), figsize=(6 * len(levels), 5), sharey=True, squeeze=False)
    for ax, lv in zip(axes[0], levels):
        sel = [r for r in rows if r["sparsity"] == lv]
        best = [variant_bests(r["all_us"]) for r in sel]
        names = sorted({v for b in best for v in b if v})
        w = 0.8 / len(names)
        for i, v in enumerate(names):
            ax.bar([x + (i - len(names) / 2 + 0.5) * w for x in range(len(sel))],
                   [b.get(v, float("nan")) / b[""] for b in best], w, label=v)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels([r["layer"].replace("resnet152 ", "").replace("densenet201 ", "DN ") for r in sel],
                           rotation=60, ha="right", fontsize=8)
        ax.set_ylim(0.8, 1.5)
        ax.set_title(f"batch {sel[0]['batch']}, sparsity {lv}")
        ax.set_ylabel("best time of the variant / base loop's (lower is better)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
