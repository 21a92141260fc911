"""The image's direct conv (codegen/direct.py) on ResNet's 7x7 stem (3 -> 64 channels, stride 2, 224x224, reading the
image NCHW as the build emits it) over its tile configs: each checked against float64 (bias + ReLU, the zeros it
counts), then timed as ten back-to-back calls in a CUDA graph (median of 15 replays), batch 1 and 8. Pixels a thread
trade shared-memory wavefronts (two 16-byte weight loads and one pixel load each per tap) against registers.

    python3 direct_probe.py OUT.json        # the table on stdout
"""
import json
import sys

import torch

from snn.codegen import direct
from snn.codegen.spec import ConvShape
from snn.runtime.check import KernelRunner
from snn.runtime.executor import Epilogue
from snn.runtime.measure.timing import graph_call_s

CONFIGS = [(4, 8, 128), (4, 8, 64), (8, 8, 128), (4, 16, 128), (8, 8, 256)]   # (th, tw, threads)
SHAPE = ConvShape(3, 64, 224, 224, 7, 7, (2, 2), (3, 3))


def main() -> None:
    runner = KernelRunner()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for batch in (1, 8):
        cfgs = [direct.DirectConfig(th, tw, n, nchw=True) for th, tw, n in CONFIGS]
        ks = [direct.emitted(SHAPE, batch, cfg) for cfg in cfgs]
        bad = runner.compile(ks)
        x_nchw = torch.randn((batch, 3, 224, 224), generator=gen, device="cuda")
        x = x_nchw.permute(0, 2, 3, 1)   # NHWC view of the NCHW image: the runner passes it on without a copy
        w = torch.randn((3, 7, 7, 64), generator=gen, device="cuda") * 0.1
        b = torch.randn(64, generator=gen, device="cuda")
        out = torch.empty((batch, 112, 112, 64), device="cuda")
        zeros = torch.zeros(1, dtype=torch.int64, device="cuda")
        epi = Epilogue(b, None, True, zeros, 0)
        for k, cfg in zip(ks, cfgs):
            row = {"batch": batch, "kernel": k.name, "config": cfg.tag(), "pixels": cfg.pixels(),
                   "registers": runner.records[k.name]["functions"][k.name]["registers"], "problems": bad.get(k.name)}
            if k.name not in bad:
                chk = runner.check_conv(k, SHAPE, batch, 0.0, gen, form=1)
                row["check"] = {key: chk[key] for key in ("ok", "err_over_allowed", "zeros", "zeros_expected", "nan")}
                row["us"] = round(graph_call_s(torch, lambda k=k: runner.run(k, x, w, out, epi)) * 1e6, 2)
            rows.append(row)
            print(json.dumps(rows[-1]), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print("\nthe image's 7x7 stem conv, direct kernel, us (ten back to back in a CUDA graph)\n")
    print("| batch | config | pixels a thread | registers | us | check |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} | {r['config']} | {r['pixels']} | {r['registers']} | {r.get('us')} | "
              f"{r.get('check', r.get('problems'))} |")


if __name__ == "__main__":
    main()
