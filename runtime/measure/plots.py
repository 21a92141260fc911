"""PNG plots of the bench/calibrate JSON documents (matplotlib, Agg; no GPU, no torch).

`available()` says whether matplotlib imports; every plot function takes a document and a folder and
returns the paths it wrote.
"""
from __future__ import annotations

from pathlib import Path

from .common import level_key
from .summary import layer_rows


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_layers(doc: dict, out: str | Path) -> list[Path]:
    """Per batch: speedup of each distinct shape over cuDNN FP32 (top) and TF32 (bottom), one line per
    level (paper Figs. 10-11); and the geometric mean per level and batch."""
    plt = _plt()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shapes, batches, levels = doc["shapes"], doc["batches"], doc["levels"]
    paths = []
    fig, axes = plt.subplots(2, len(batches), figsize=(max(6, 0.35 * len(shapes) + 2) * len(batches) / 1.4, 7.5),
                             squeeze=False, sharey="row")
    x = list(range(len(shapes)))
    for j, B in enumerate(batches):
        for i, (key, title) in enumerate((("speedup_fp32", "cuDNN FP32"), ("speedup_tf32", "cuDNN TF32"))):
            ax = axes[i][j]
            for lv in levels:
                y = [s["batches"].get(str(B), {}).get("levels", {}).get(level_key(lv), {}).get(key) for s in shapes]
                ax.plot(x, [v if v is not None else float("nan") for v in y], marker="o", ms=3, label=f"{lv:.2f}")
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set_yscale("log")
            ax.set_title(f"{doc['network']} batch {B}: speedup over {title}", fontsize=9)
            ax.set_xticks(x)
            ax.set_xticklabels([s["label"] for s in shapes], rotation=90, fontsize=6)
            ax.grid(True, which="both", axis="y", alpha=0.3)
            if j == 0:
                ax.set_ylabel("dense time / sparse time")
    axes[0][0].legend(title="sparsity", fontsize=7)
    fig.tight_layout()
    p = out / f"layers_{doc['network']}.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    rows = layer_rows(doc)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for B in batches:
        r = [row for row in rows if row["batch"] == B]
        ax.plot([row["level"] for row in r], [row["geomean_fp32"] for row in r], marker="o", label=f"b{B} vs FP32")
        ax.plot([row["level"] for row in r], [row["geomean_tf32"] for row in r], marker="x", ls="--",
                label=f"b{B} vs TF32")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("input sparsity")
    ax.set_ylabel("geometric-mean layer speedup")
    ax.set_title(f"{doc['network']}: mean over {len(shapes)} distinct conv shapes", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / f"layers_{doc['network']}_mean.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths


def plot_e2e(docs: list[dict], out: str | Path) -> list[Path]:
    """Per network, batch by batch: snn's time on each sparsity profile beside the fastest baseline of each
    precision (of eager, CUDA graph and torch.compile), log scale (paper Figs. 12-13, honest baselines)."""
    docs = [d for d in docs if d.get("runs")]
    if not docs:
        return []
    plt = _plt()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(docs), figsize=(5.2 * len(docs), 4.2), squeeze=False)
    for ax, d in zip(axes[0], docs):
        bs = sorted(d["runs"], key=int)
        series: dict[str, dict] = {}
        for b in bs:
            r = d["runs"][b]
            for label, s in r.get("snn", {}).items():
                series.setdefault(f"snn FP32 [{label}]", {})[b] = s["median_ms"]
            best: dict = {}
            for n, v in r.get("baselines", {}).items():
                p = v.get("precision", "?")
                if p not in best or v["median_ms"] < best[p][0]:
                    best[p] = (v["median_ms"], v.get("kind"))
            for p, (ms, _) in best.items():
                series.setdefault(f"best {p.upper()} baseline", {})[b] = ms
        names = sorted(series, key=lambda k: (not k.startswith("snn"), k))
        w = 0.8 / max(1, len(names))
        cmap = plt.get_cmap("tab10")
        for i, k in enumerate(names):
            ax.bar([j + i * w for j in range(len(bs))], [series[k].get(b, 0) for b in bs], w, label=k,
                   color=cmap(i % 10), hatch="//" if k.startswith("snn") else None)
        ax.set_xticks([j + 0.4 - w / 2 for j in range(len(bs))])
        ax.set_xticklabels([f"batch {b}" for b in bs], fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("ms per forward pass (wall, median)")
        ax.set_title(f"{d['network']}: snn vs the fastest dense baseline per precision", fontsize=9)
        ax.legend(fontsize=6)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    p = out / "e2e.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return [p]


def plot_calibration(doc: dict, out: str | Path) -> list[Path]:
    """Per distinct shape and batch: measured sparse and cuDNN times across levels (with candidate kernels:
    the fastest one as the line, every one as a dot; cuDNN is timed with one of them)."""
    plt = _plt()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    by: dict = {}
    for key, m in doc.get("measurements", {}).items():
        tag, b, lv = key.split("|")[:3]  # tag|batch|level|kernel|sha256
        by.setdefault((b, tag), []).append((float(lv), m["sparse_us"], m.get("dense_us")))
    if not by:
        return []
    keys = sorted(by)
    n = len(keys)
    cols = min(6, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.2 * rows), squeeze=False)
    for ax, k in zip([a for r in axes for a in r], keys):
        pts = by[k]
        lvs = sorted({p[0] for p in pts})
        ax.plot(lvs, [min(p[1] for p in pts if p[0] == lv) for lv in lvs], marker="o", ms=3, label="sparse")
        if len(pts) > len(lvs):
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=3, color="grey", label="candidates")
        dense = sorted((p[0], p[2]) for p in pts if p[2] is not None)
        ax.plot([p[0] for p in dense], [p[1] for p in dense], marker="x", ms=3, label="cuDNN FP32")
        ax.set_title(f"{k[1]} {k[0]}", fontsize=5)
        ax.tick_params(labelsize=6)
    for ax in [a for r in axes for a in r][n:]:
        ax.axis("off")
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"{doc['network']}: calibration (µs vs input sparsity)", fontsize=9)
    fig.tight_layout()
    p = out / f"calibrate_{doc['network']}.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return [p]


def plot_all(docs: list[dict], out: str | Path) -> list[Path]:
    paths: list[Path] = []
    for d in docs:
        if d.get("kind") == "layers":
            paths += plot_layers(d, out)
        elif d.get("kind") == "calibrate":
            paths += plot_calibration(d, out)
    paths += plot_e2e([d for d in docs if d.get("kind") == "e2e"], out)
    return paths
