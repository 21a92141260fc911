"""The runs of run.sh side by side.

    compare.py PLAIN.csv OTHER.csv|OTHER.json ...     the same predictions? (labels and classes equal; the largest
                                                      probability difference; byte-identical CSV)
    compare.py --throughput PLAIN.json DEVICES*.json  images/s per run, per GPU, against plain infer
"""
import csv
import json
import sys
from pathlib import Path


def rows(path: Path) -> dict:
    if path.suffix == ".csv":
        with path.open() as f:
            r = list(csv.reader(f))
        return {x[0]: [(x[i], int(x[i + 1]), float(x[i + 2])) for i in range(1, len(x), 3)] for x in r[1:]}
    d = json.loads(path.read_text())
    return {im["path"]: [(t["label"], t["index"], t["probability"]) for t in im["top"]] for im in d["images"]}


def same(a: Path, others: list[Path]) -> None:
    ra = rows(a)
    for b in others:
        rb = rows(b)
        labels = list(ra) == list(rb) and all([t[:2] for t in ra[k]] == [t[:2] for t in rb[k]] for k in ra)
        diff = max((abs(x[2] - y[2]) for k in ra if k in rb for x, y in zip(ra[k], rb[k])), default=float("nan"))
        ident = b.suffix == ".csv" and a.read_bytes() == b.read_bytes()
        print(f"{b.name} vs {a.name}: {len(rb)} images, same order and top-5 labels: {labels}; largest probability "
              f"difference {diff:.2e}" + (f"; byte-identical: {ident}" if b.suffix == '.csv' else ""))


def throughput(paths: list[Path]) -> None:
    base = None
    print("| run | GPUs | images | seconds | images/s | per GPU | vs plain |\n|---|---|---|---|---|---|---|")
    for p in paths:
        d = json.loads(p.read_text())
        s = d["summary"]
        gpus = len(d.get("ranks", [])) or 1
        base = base or s["images_per_s"]
        print(f"| {p.stem} | {gpus} | {s['images']} | {s['seconds']:.2f} | {s['images_per_s']:.1f} | "
              f"{s['images_per_s'] / gpus:.1f} | {s['images_per_s'] / base:.2f}x |")
        for r in d.get("ranks", []):
            print(f"|   rank {r['rank']} ({r['device']}) | | {r['images']} | {r['seconds']:.2f} | {r['images_per_s']} | | |")


if __name__ == "__main__":
    if sys.argv[1] == "--throughput":
        throughput([Path(p) for p in sys.argv[2:]])
    else:
        same(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
