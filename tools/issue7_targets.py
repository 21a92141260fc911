#!/usr/bin/env python3
"""Issue 7's targets from `snn-run bench layers` JSON (layers_resnet152.json, layers_densenet201.json of one run):
the eight 3x3 layers (ResNet-152 64/128/256/512 and DenseNet-201 128->32 at 56/28/14/7), the ResNet-152 1x1
shapes, per batch and level: geometric-mean speedup over cuDNN FP32 / TF32, the slowest layer, useful FLOP/s as a
share of the FP32 peak measured in the same run, and the time at 0.99 (the fixed cost).

    python tools/issue7_targets.py docs/results/h100/bench-s6 > docs/results/h100/bench-s6/targets.md
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snn.runtime.measure.common import geomean as gm  # noqa: E402

THREE = {"resnet152": ["3x3 64->64 @56x56", "3x3 128->128 @28x28", "3x3 256->256 @14x14", "3x3 512->512 @7x7"],
         "densenet201": ["3x3 128->32 @56x56", "3x3 128->32 @28x28", "3x3 128->32 @14x14", "3x3 128->32 @7x7"]}


def main(folder: str) -> None:
    docs = {n: json.loads((Path(folder) / f"layers_{n}.json").read_text()) for n in THREE}
    shapes = {(n, s["label"]): s for n, d in docs.items() for s in d["shapes"]}
    peak = docs["resnet152"].get("fp32_peak_tflops")
    three = [shapes[(n, lab)] for n, labs in THREE.items() for lab in labs if (n, lab) in shapes]
    one = [s for s in docs["resnet152"]["shapes"] if s["label"].startswith("1x1")]
    batches = sorted({int(b) for s in three for b in s["batches"]})
    levels = sorted({k for s in three for b in s["batches"].values() for k in b["levels"]}, key=float)
    env = docs["resnet152"].get("environment", {})
    print(f"# Issue 7's targets from one `bench layers` run\n\n{env.get('gpu')}, cuDNN {env.get('cudnn')}, commit "
          f"{env.get('git_commit')}, {env.get('utc')}; FP32 peak measured in the run: {peak} TFLOP/s. "
          f"{len(three)} 3x3 layers of the issue, {len(one)} ResNet-152 1x1 shapes; real activations on photos "
          "thresholded to each level; our time = the sparse conv's launches (memset included), cuDNN = the faster "
          "of NHWC / NCHW.\n")
    print("| batch | level | 3x3: geomean ×FP32 | slowest ×FP32 | geomean ×TF32 | 1x1: geomean ×FP32 | "
          "slowest 1x1 ×FP32 |")
    print("|---|---|---|---|---|---|---|")
    for b in batches:
        for lv in levels:
            f3 = [s["batches"][str(b)]["levels"][lv]["speedup_fp32"] for s in three]
            t3 = [s["batches"][str(b)]["levels"][lv]["speedup_tf32"] for s in three]
            f1 = [s["batches"][str(b)]["levels"][lv]["speedup_fp32"] for s in one if str(b) in s["batches"]]
            print(f"| {b} | {lv} | {gm(f3):.2f} | {min(f3):.2f} | {gm(t3):.2f} | "
                  + (f"{gm(f1):.2f} | {min(f1):.2f} |" if f1 else "– | – |"))
    print("\nPer layer: speedup over cuDNN FP32 at each level; useful TFLOP/s (share of the peak) at 0.7; "
          "µs at 0.99.\n")
    print("| layer | batch | " + " | ".join(f"×FP32 @{lv}" for lv in levels) + " | useful @0.70 | µs @0.99 |")
    print("|---|---|" + "---|" * (len(levels) + 2))
    for s in three + one:
        for b in batches:
            if str(b) not in s["batches"]:
                continue
            lv = s["batches"][str(b)]["levels"]
            u = lv.get("0.70", {}).get("useful_tflops")
            share = f" ({u / peak:.0%})" if u is not None and peak else ""
            cells = " | ".join(f"{lv[k]['speedup_fp32']:.2f}" if k in lv else "–" for k in levels)
            print(f"| {s['label']} | {b} | {cells} | {u if u is not None else '–'}{share} | "
                  f"{lv['0.99']['sparse_us'] if '0.99' in lv else '–'} |")


if __name__ == "__main__":
    main(sys.argv[1])
