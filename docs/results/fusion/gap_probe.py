"""The global average pool before the classifier, in torch ops, on a channels-last map as the executor holds it
(ResNet-152's 2048 x 7 x 7, DenseNet-201's 1920 x 7 x 7) at batch 1 and 8: each form timed as 20 calls back to back
in a CUDA graph (measure.timing.graph_call_s, median of 15 replays) and checked against float64.

    python3 gap_probe.py OUT.json
"""
import json
import sys

import torch

from snn.runtime.measure.timing import graph_call_s

F = torch.nn.functional


def forms(x):
    b, c, h, w = x.shape
    flat = x.permute(0, 2, 3, 1).reshape(b, h * w, c)          # a view: the map is channels-last
    ones = torch.full((1, h * w), 1.0 / (h * w), device=x.device)
    return {
        "adaptive_avg_pool2d (the executor's)": lambda: F.adaptive_avg_pool2d(x, 1),
        "mean over H, W": lambda: x.mean((2, 3)),
        "avg_pool2d over the map": lambda: F.avg_pool2d(x, (h, w)),
        "sum over pixels, then scaled": lambda: flat.sum(1) * (1.0 / (h * w)),
        "matmul with 1/HW": lambda: torch.matmul(ones, flat),
    }


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for net, c in (("resnet152", 2048), ("densenet201", 1920)):
        for b in (1, 8):
            x = torch.relu(torch.randn((b, c, 7, 7), generator=gen, device="cuda")).contiguous(
                memory_format=torch.channels_last)
            want = x.double().mean((2, 3))
            for name, fn in forms(x).items():
                err = ((fn().double().reshape(b, c) - want).abs().max() / want.abs().max()).item()
                us = graph_call_s(torch, fn, calls=20) * 1e6
                rows.append({"net": net, "batch": b, "form": name, "us": round(us, 3), "rel_err": err})
                print(f"{net} b{b} {name}: {us:.2f} us, rel err {err:.1e}", flush=True)
    json.dump(rows, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
