"""The stem's 7x7 conv (3 -> 64 channels, stride 2, 224x224 image) on cuDNN in FP32 (TF32 off), the ways the engine
could call it: on the NHWC image it runs today (after a copy from the NCHW image the caller passes), on the NCHW image
itself (NCHW out), with cuDNN's benchmark mode on and off; each timed as ten back-to-back calls in a CUDA graph
(median of 15 replays), the NCHW -> NHWC copy too; the outputs checked against float64.

    python3 stem_conv_probe.py OUT.json
"""
import json
import sys

import torch

from snn.runtime.measure.timing import graph_call_s

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
F, cl = torch.nn.functional, torch.channels_last
g = torch.Generator("cuda").manual_seed(0)
w = torch.randn(64, 3, 7, 7, device="cuda", generator=g) * 0.1
rows = []
for batch in (1, 8):
    x = torch.randn(batch, 3, 224, 224, device="cuda", generator=g)
    ref = F.conv2d(x.double(), w.double(), None, 2, 3)
    x_cl, w_cl = x.contiguous(memory_format=cl), w.contiguous(memory_format=cl)
    for bench in (False, True):
        torch.backends.cudnn.benchmark = bench
        cases = {"copy NCHW -> NHWC": lambda: x.contiguous(memory_format=cl),
                 "conv NHWC (today)": lambda: F.conv2d(x_cl, w_cl, None, 2, 3),
                 "conv NCHW": lambda: F.conv2d(x, w, None, 2, 3),
                 "conv NCHW in, NHWC weight": lambda: F.conv2d(x, w_cl, None, 2, 3)}
        for name, fn in cases.items():
            y = fn()
            err = None if name.startswith("copy") else float(((y.double() - ref).norm() / ref.norm()).item())
            rows.append({"batch": batch, "benchmark": bench, "case": name, "us": graph_call_s(torch, fn) * 1e6,
                         "rel_err": err, "out_channels_last": y.is_contiguous(memory_format=cl)})
json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, open(sys.argv[1], "w"), indent=1)
print(f"{'batch':>5} {'bench':>6} {'case':<28} {'us':>8} {'rel err':>9} NHWC out")
for r in rows:
    err = "" if r["rel_err"] is None else f"{r['rel_err']:.1e}"
    print(f"{r['batch']:>5} {str(r['benchmark']):>6} {r['case']:<28} {r['us']:>8.1f} {err:>9} {r['out_channels_last']}")
