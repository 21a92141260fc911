"""The README's results table from the e2e results of run.sh: OUT/table.md, OUT/e2e.png, and with --readme the
table put between the README's `results-table` markers.
    python3 docs/results/bench/table.py OUT [--readme README.md]"""
import argparse
import gzip
import json
import re
from pathlib import Path

from snn.runtime.measure import plots, summary

MARK = re.compile(r"(<!-- results-table:begin -->\n).*?(<!-- results-table:end -->)", re.S)


def merged(out: Path) -> list[dict]:
    """One e2e document per network, the batches of every e2e run of it under OUT merged."""
    docs: dict[str, dict] = {}
    # the gzipped runs first: a run just written (plain JSON, run.sh gzips it afterwards) replaces the one before it
    for p in [*sorted(out.glob("*/e2e-*/e2e_*.json.gz")), *sorted(out.glob("*/e2e-*/e2e_*.json"))]:
        d = json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_text())
        if d.get("kind") != "e2e" or "profiles" not in d:
            continue
        m = docs.setdefault(d["network"], {**d, "runs": {}})
        m["runs"].update(d["runs"])
    order = ["resnet152", "densenet201", "vgg19"]  # run.sh's default order, then any other
    return [docs[k] for k in sorted(docs, key=lambda k: (order.index(k) if k in order else len(order), k))]


def table(docs: list[dict]) -> str:
    head = ("| network | batch | sparsity profile | snn FP32 ms | strongest FP32 baseline | ms | snn speedup | "
            "strongest baseline, any precision | ms | snn speedup | convs run sparse |")
    lines = [head, "|---" * 11 + "|"]
    batches = sorted({int(b) for d in docs for b in d["runs"]})
    for d in docs:
        rows = summary.e2e_rows(d)
        for b in batches:
            if not any(r["batch"] == b for r in rows):
                rows.append({"network": d["network"], "batch": b})
        for r in sorted(rows, key=lambda r: r["batch"]):
            if "snn_ms" not in r:
                lines.append(f"| {r['network']} | {r['batch']} | not measured |" + " – |" * 8)
                continue
            lines.append(f"| {r['network']} | {r['batch']} | {r['profile']} | {r['snn_ms']:.2f} | "
                         f"{r['same_precision']} | {r['same_precision_ms']:.2f} | **{r['same_precision_speedup']:.2f}×** | "
                         f"{r['overall']} | {r['overall_ms']:.2f} | **{r['overall_speedup']:.2f}×** | {r['sparse']} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--readme", type=Path)
    a = ap.parse_args()
    docs = merged(a.out)
    if not docs:
        raise SystemExit(f"{a.out}: no e2e results (*/e2e-*/e2e_*.json[.gz])")
    md = table(docs)
    (a.out / "table.md").write_text(md)
    if plots.available():
        plots.plot_e2e(docs, a.out)
    if a.readme:
        text = a.readme.read_text()
        if not MARK.search(text):
            raise SystemExit(f"{a.readme}: no <!-- results-table:begin --> ... <!-- results-table:end --> markers")
        a.readme.write_text(MARK.sub(lambda m: m.group(1) + md + m.group(2), text))
    print(md)


if __name__ == "__main__":
    main()
