"""Which tensor-core configs the 16-bit build should offer (codegen/tensorcore.candidates), measured where they run:
ResNet-152's BF16 engine at batch 1, its CUDA graph. Two bundles of the same network, each `snn.load`ed twice in
turn (A, B, A, B; each load measures its candidates against cuDNN per layer and keeps the fastest):
  A  the earlier rule: per tile the largest one-wave K split (and two below it for 64 x 64 tiles), 32-channel
     chunks, every chunk of the block in flight where 200 KB of shared memory allow (`earlier` below);
  B  A's configs and around each: 2, 3, 4 or 6 stages, and 64-channel chunks (C % 64 == 0, not the 64 x 32 tile)
     with every chunk in flight, 3 or 2 stages (`around`).
Per load: replay time (CUDA events, median of 50) and every candidate's time per layer (engines.json); the second
A and B loads also record one profiled replay's GPU activities (timeline_A/B.json: start, end, name). Then, on
the side, the stem conv with its 3 channels zero-padded to 4, 8, 16, and ResNet's max pool in torch (NHWC,
NCHW, unfold) and as a plain kernel (probe.log). Seeded random weights, a random input.

    python3 candidates.py OUT_DIR
"""
import ctypes
import json
import math
import sys
import time
from pathlib import Path

import torch

import snn
from snn.codegen import tensorcore as tc
from snn.codegen.cache import CubinCache
from snn.codegen.compile import Compiler
from snn.runtime.cuda import Device
from snn.runtime.measure.timing import event_median_s, graph_call_s

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)


def earlier(shape, batch, sms=132):
    """The candidates before 64-channel chunks and short pipelines."""
    nk = tc.chunks(shape, 32)
    by_tile = {}
    for bm in (32, 64):
        for bn in (32, 64):
            if shape.N % bn:
                continue
            for ks in range(1, min(tc.CLUSTER_MAX, nk) + 1):
                stages = max(2, min(math.ceil(nk / ks), tc.SMEM_MAX // ((bm + bn) * 40 * 2)))
                by_tile.setdefault((bm, bn), []).append(tc.TcConfig(bm, bn, ks, stages))
    res = []
    for tile in ((64, 64), (32, 64), (64, 32), (32, 32)):
        cs = by_tile.get(tile)
        if not cs:
            continue
        fit = [c for c in cs if math.prod(tc.grid(shape, batch, c)) <= sms]
        best = max(fit, key=lambda c: c.ks) if fit else cs[0]
        res.append(best)
        if tile == (64, 64):
            res += [c for c in cs if c.ks in (best.ks - 1, best.ks - 2)]
    return res


def around(shape, batch, sms=132):
    base = earlier(shape, batch, sms)
    res = list(base)
    for c in base:
        for st in (2, 3, 4, 6):
            if st < c.stages:
                res.append(tc.TcConfig(c.bm, c.bn, c.ks, st))
        if shape.C % 64 == 0 and c.ks <= tc.chunks(shape, 64) and (c.bm, c.bn) != (64, 32):
            per = math.ceil(tc.chunks(shape, 64) / c.ks)
            full = max(2, min(per, tc.SMEM_MAX // ((c.bm + c.bn) * 72 * 2)))
            for st in sorted({full, min(full, 3), min(full, 2)}):
                res.append(tc.TcConfig(c.bm, c.bn, c.ks, st, 64))
    return list(dict.fromkeys(res))


log = open(out / "probe.log", "w")


def say(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    log.write(s + "\n")
    log.flush()


t0 = time.time()
rule = tc.candidates
bundles = {}
for tag, fn in (("A", earlier), ("B", around)):
    tc.candidates = fn   # what the build lists per layer
    bundles[tag] = snn.build("network_specs/resnet152.yaml", gpu="h100", batch=[1], out=f"/tmp/probe_{tag}",
                             precision="bf16", jobs=16).manifest_path.parent
    say("built", tag, round(time.time() - t0, 1))
tc.candidates = rule

x = torch.randn(1, 3, 224, 224, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
rows = []
logits = {}
torch.backends.cudnn.benchmark = True
with torch.inference_mode():
    for tag in ("A", "B", "A", "B"):
        e = snn.load(bundles[tag], batch=1, precision="bf16")
        lg = e(x).float()
        if tag in logits:
            say("  logits vs first", tag, (lg - logits["A"]).abs().max().item() / logits["A"].abs().max().item())
        logits.setdefault(tag, lg)
        if "A" in logits:
            say("  logits vs A", tag, (lg - logits["A"]).abs().max().item() / logits["A"].abs().max().item())
        rep = e.graph.replayer(x)
        ms = event_median_s(torch, rep, 50, warmup=5) * 1e3
        tcc = e.executor.tensorcore
        row = {"tag": tag, "replay_ms": round(ms, 4), "tc_convs": sum(k is not None for k in tcc.choice.values()),
               "measured": tcc.measured}
        rows.append(row)
        say(tag, row["replay_ms"], row["tc_convs"])
        if tag == "B" and len(rows) == 4 or tag == "A" and len(rows) == 3:
            from torch.profiler import ProfilerActivity, profile
            for _ in range(3):
                rep()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    rep()
                torch.cuda.synchronize()
            ev = sorted([(e_.time_range.start, e_.time_range.end, e_.name) for e_ in prof.events()
                         if str(getattr(e_, "device_type", "")).endswith("CUDA")])
            json.dump(ev, open(out / f"timeline_{tag}.json", "w"))
        del e, rep
        torch.cuda.empty_cache()
json.dump(rows, open(out / "engines.json", "w"), indent=1)

# stem: C=3 against zero-padded C=4 / 8 / 16
g = torch.Generator("cuda").manual_seed(1)
bf = torch.bfloat16
cl = torch.channels_last
xs = torch.randn(1, 3, 224, 224, device="cuda", generator=g).to(bf).contiguous(memory_format=cl)
ws = (torch.randn(64, 3, 7, 7, device="cuda", generator=g) * 0.1).to(bf).contiguous(memory_format=cl)
bs = torch.randn(64, device="cuda", generator=g).to(bf)
ref = torch.relu(torch.nn.functional.conv2d(xs.double(), ws.double(), bs.double(), 2, 3))
for cp in (3, 4, 8, 16):
    xp = torch.zeros(1, cp, 224, 224, device="cuda", dtype=bf).contiguous(memory_format=cl)
    xp[:, :3] = xs
    wp = torch.zeros(64, cp, 7, 7, device="cuda", dtype=bf).contiguous(memory_format=cl)
    wp[:, :3] = ws
    f = lambda: torch.cudnn_convolution_relu(xp, wp, bs, (2, 2), (3, 3), (1, 1), 1)  # noqa: E731
    err = (f().double() - ref).abs().max().item() / ref.abs().max().item()
    say("stem C", cp, round(graph_call_s(torch, f, 10, 30) * 1e6, 2), "us err", f"{err:.1e}")
    fpad = lambda: xp[:, :3].copy_(xs)  # noqa: E731
    say("   pad copy", round(graph_call_s(torch, fpad, 10, 30) * 1e6, 2))
conv_in = lambda: x.to(bf).contiguous(memory_format=cl)  # noqa: E731
say("input to bf16 CL", round(graph_call_s(torch, conv_in, 10, 30) * 1e6, 2))

# max pool 3x3 s2 p1 of the stem's post-ReLU output
y = torch.relu(torch.randn(1, 64, 112, 112, device="cuda", generator=g)).to(bf).contiguous(memory_format=cl)
F = torch.nn.functional
refp = F.max_pool2d(y.float(), 3, 2, 1)
yn = y.contiguous()
cands = {"cl": lambda: F.max_pool2d(y, 3, 2, 1), "nchw": lambda: F.max_pool2d(yn, 3, 2, 1),
         "to_nchw": lambda: y.contiguous(),
         "pad_amax": lambda: F.pad(y, (1, 1, 1, 1)).unfold(2, 3, 2).unfold(3, 3, 2).amax((-2, -1))}
for k, f in cands.items():
    say("maxpool", k, round(graph_call_s(torch, f, 10, 30) * 1e6, 2))
SRC = r'''
#include <cuda_bf16.h>
extern "C" __global__ void __launch_bounds__(128) mp16(const __nv_bfloat16* __restrict__ in, __nv_bfloat16* __restrict__ out)
{
    const int C = 64, H = 112, W = 112, P = 56, Q = 56, V = C / 8;
    const int i = blockIdx.x * 128 + threadIdx.x;
    if (i >= P * Q * V) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const int v = i % V, pq = i / V, p = pq / Q, q = pq % Q;
    __nv_bfloat162 m[4];
    bool first = true;
    for (int r = 0; r < 3; ++r) for (int s = 0; s < 3; ++s) {
        const int h = p * 2 - 1 + r, w = q * 2 - 1 + s;
        if ((unsigned)h >= H || (unsigned)w >= W) continue;
        uint4 u = *reinterpret_cast<const uint4*>(in + ((size_t)h * W + w) * C + v * 8);
        const __nv_bfloat162* e = reinterpret_cast<const __nv_bfloat162*>(&u);
        for (int j = 0; j < 4; ++j) m[j] = first ? e[j] : __hmax2(m[j], e[j]);
        first = false;
    }
    *reinterpret_cast<uint4*>(out + (size_t)pq * C + v * 8) = *reinterpret_cast<uint4*>(m);
}
'''
dev = Device()
cub = Compiler(CubinCache(Path("/tmp/probe_cubins"))).compile({"mp16": SRC}, "sm_90").records["mp16"]["cubin"]
o = torch.empty(1, 64, 56, 56, device="cuda", dtype=bf).contiguous(memory_format=cl)
args = [(y.data_ptr(), ctypes.c_void_p), (o.data_ptr(), ctypes.c_void_p)]
fk = lambda: dev.launch(cub, "mp16", [math.ceil(56 * 56 * 8 / 128)], [128], 0, args, pdl=True)  # noqa: E731
o.fill_(float("nan"))
fk()
torch.cuda.synchronize()
say("maxpool own kernel", round(graph_call_s(torch, fk, 10, 30) * 1e6, 2), "err", (o.float() - refp).abs().max().item())
say("total s", round(time.time() - t0, 1))
