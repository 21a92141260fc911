#!/usr/bin/env python3
"""Plot of a `fit_costmodel.py scorepicks` table: measured time of each model's pick over the best measured
kernel, per layer, batch and level (docs/results/kernels/run8-model).

    python tools/plot_model_picks.py SCOREPICKS.md PICKS.png [PREVIOUS_LABEL]

PREVIOUS_LABEL names the previous model (default "2aa4a42", run8's; run13 used "77428b3", run17/18 "bba7efc").
"""
import re
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(md: str, png: str, previous: str = "2aa4a42") -> None:
    rows = []
    for line in open(md):
        m = re.match(r"\| (.+?) \| (\d+) \| ([\d.]+) \| [^|]+ \| [^|]*, ([\d.]+) \| [^|]*, ([\d.]+) \| ([\d.]+) \|", line)
        if m:
            rows.append((m.group(1), int(m.group(2)), float(m.group(3)), float(m.group(4)), float(m.group(5))))
    batches = sorted({r[1] for r in rows})
    fig, axes = plt.subplots(1, len(batches), figsize=(5 * len(batches), 5), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, b in zip(axes, batches):
        sel = [r for r in rows if r[1] == b]
        x = range(len(sel))
        ax.bar([i - 0.2 for i in x], [r[4] for r in sel], 0.4, label=f"previous model ({previous})", color="#bbbbbb")
        ax.bar([i + 0.2 for i in x], [r[3] for r in sel], 0.4, label="this model", color="#1f77b4")
        ax.axhline(1.1, color="red", lw=0.8, ls="--", label="10 % over the best")
        ax.set_xticks(list(x), [f"{r[0].split(' ', 1)[1]} s{r[2]}" for r in sel], rotation=90, fontsize=7)
        ax.set_title(f"batch {b}: mean {sum(r[3] for r in sel) / len(sel):.3f} (previous {sum(r[4] for r in sel) / len(sel):.3f})")
    axes[0].set_ylabel("measured time of the plan's pick / best measured")
    axes[0].legend(fontsize=8)
    fig.suptitle("Cost model picks on a fresh held-out bench (H100, predictions written before the run)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:4])
