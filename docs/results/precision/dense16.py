"""Could a 16-bit snn match torch.compile with dense convolutions alone? ResNet-152 in BF16 / FP16, CUDA graph replay:

- `fused`: BN folded into the convs, every conv + bias (+ residual) + ReLU one cuDNN call
  (torch.cudnn_convolution_relu / cudnn_convolution_add_relu), channels_last: what a dense 16-bit path of snn
  with cuDNN's fused epilogues would run;
- `unfused`: the same folded convs with bias, the residual add and the ReLU as separate torch ops;
- `torchvision_graph`: torchvision's model (BN unfolded) captured in a CUDA graph;
- `torch.compile`: inductor, freezing, mode="reduce-overhead" (runtime/measure/baselines.py).

Random weights (BN statistics set so activations stay O(1)), a random input; each output against the same model in
float64 (relative L2 error). Median of 50 CUDA-event timings (input copied in, replay) after warm-up.

    python3 dense16.py OUT.json [--batch 1,8]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision

from snn.runtime.measure.baselines import _compiled, _graphed
from snn.runtime.measure.timing import Env, event_median_s


def folded(model):
    """fold(conv, bn) -> the conv's weight and bias with the BN folded in, float64."""
    def fold(conv, bn):
        s = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
        w = conv.weight.double() * s.view(-1, 1, 1, 1)
        b = bn.bias.double() - bn.running_mean.double() * s
        return w, b
    return fold


def fused_forward(model, dtype, fused: bool):
    """A forward over the folded model in `dtype`, channels_last."""
    fold = folded(model)
    cl = torch.channels_last

    def prep(conv, bn):
        w, b = fold(conv, bn)
        return (w.to(dtype).contiguous(memory_format=cl), b.to(dtype), conv.stride, conv.padding)

    stem = prep(model.conv1, model.bn1)
    blocks = []
    for layer in (model.layer1, model.layer2, model.layer3, model.layer4):
        for blk in layer:
            ds = prep(blk.downsample[0], blk.downsample[1]) if blk.downsample is not None else None
            blocks.append((prep(blk.conv1, blk.bn1), prep(blk.conv2, blk.bn2), prep(blk.conv3, blk.bn3), ds))
    fc_w, fc_b = model.fc.weight.to(dtype), model.fc.bias.to(dtype)

    def conv_relu(x, p):
        w, b, s, pad = p
        if fused:
            return torch.cudnn_convolution_relu(x, w, b, s, pad, (1, 1), 1)
        return torch.relu(F.conv2d(x, w, b, s, pad))

    def conv_add_relu(x, p, z):
        w, b, s, pad = p
        if fused:
            return torch.cudnn_convolution_add_relu(x, w, z, 1.0, b, s, pad, (1, 1), 1)
        return torch.relu(F.conv2d(x, w, b, s, pad) + z)

    def conv(x, p):
        w, b, s, pad = p
        return F.conv2d(x, w, b, s, pad)

    def forward(x):
        x = conv_relu(x.to(dtype).contiguous(memory_format=cl), stem)
        x = F.max_pool2d(x, 3, 2, 1)
        for c1, c2, c3, ds in blocks:
            idt = conv(x, ds) if ds is not None else x
            y = conv_relu(x, c1)
            y = conv_relu(y, c2)
            x = conv_add_relu(y, c3, idt)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return F.linear(x, fc_w, fc_b)
    return forward


def median_ms(fn, reps=50):
    return event_median_s(torch, fn, reps, warmup=5) * 1e3


def model_with_stats(seed=0):
    torch.manual_seed(seed)
    m = torchvision.models.resnet152().eval()
    for mod in m.modules():  # BN statistics that keep activations O(1) through 50 blocks
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_var.uniform_(0.5, 2.0)
            mod.running_mean.normal_(0, 0.1)
            mod.weight.data.uniform_(0.2, 0.6)
            mod.bias.data.normal_(0, 0.1)
    return m.cuda()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--batch", default="1,8")
    a = ap.parse_args(argv)
    env = Env()
    torch.backends.cudnn.benchmark = True
    model = model_with_stats()
    rows = []
    for b in [int(v) for v in a.batch.split(",")]:
        x = torch.randn(b, 3, 224, 224, device="cuda")
        with torch.inference_mode():
            ref = model.double()(x.double())
            model.float()
            for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
                row = {"batch": b, "precision": name}
                m16 = model.to(dt).to(memory_format=torch.channels_last)
                xs = x.to(dt).contiguous(memory_format=torch.channels_last)
                for kind, fn in (("fused", fused_forward(model.float(), dt, True)),
                                 ("unfused", fused_forward(model.float(), dt, False)),
                                 ("torchvision_graph", lambda t, m=m16: m(t))):
                    if kind == "torchvision_graph":
                        model.to(dt).to(memory_format=torch.channels_last)
                    try:
                        graph = _graphed(torch, fn, xs)
                        run = lambda g=graph: g(xs)  # noqa: E731
                        y = run().double()
                        row[f"{kind}_ms"] = median_ms(run)
                        row[f"{kind}_rel_err"] = float(((y - ref).norm() / ref.norm()).item())
                    except RuntimeError as e:  # an op cuDNN or the graph capture refuses: recorded, not timed
                        row[f"{kind}_ms"] = None
                        row[f"{kind}_error"] = str(e).splitlines()[0][:300]
                    model.float()
                m16 = model.to(dt).to(memory_format=torch.channels_last)
                cm, compile_s = _compiled(torch, m16, xs)
                y = cm(xs).double()
                row["torch.compile_ms"] = median_ms(lambda: cm(xs))
                row["torch.compile_rel_err"] = float(((y - ref).norm() / ref.norm()).item())
                row["compile_s"] = round(compile_s, 1)
                model.float().to(memory_format=torch.contiguous_format)
                rows.append(row)
                print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                      flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"environment": env.info(), "rows": rows}, indent=1))
    print("\n| batch | precision | fused ms | unfused ms | torchvision graph ms | torch.compile ms |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} | {r['precision']} | " + " | ".join(
            "-" if r[k] is None else f"{r[k]:.3f}" for k in ("fused_ms", "unfused_ms", "torchvision_graph_ms",
                                                             "torch.compile_ms")) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
