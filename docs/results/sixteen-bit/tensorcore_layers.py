"""snn's tensor-core conv kernel (codegen/tensorcore.py) against cuDNN's fused call, per conv shape of a network.

For each distinct (shape, epilogue) of the network's convs that the kernel takes, at each batch and precision:
the kernel with each of `tensorcore.candidates` (the configs the runtime measures) and with every other config, and cuDNN's fused conv + bias
(+ residual) + ReLU as the 16-bit engine calls it (channels_last). Time: 20 launches of one layer captured in a
CUDA graph, replay time / 20 (CUDA events, median of 30; timing.graph_call_s, the timer the runtime chooses with): back-to-back as in the network's graph. Checked against
float64 on the same 16-bit inputs (post-ReLU-like, 0.5 of them zero), outputs poisoned first: the kernel's
largest error over the output's largest magnitude against cuDNN's.

    python3 tensorcore_layers.py OUT.json CUBIN_DIR [--net resnet152] [--batch 1,8] [--precision bf16,fp16]

CUBIN_DIR: a compiler cache (codegen/cache.py); the kernels it lacks are compiled first (`--compile-only` stops there).
"""
import argparse
import ctypes
import json
import sys
from pathlib import Path

from snn.codegen import tensorcore as tc
from snn.codegen.spec import load_spec

REPEAT = 20


def layers(net):
    """Distinct (shape, has residual, relu) of the convs the kernel takes."""
    out = {}
    for c in net.convs:
        if not tc.eligible(c.shape, c.groups):
            continue
        res = c.name.endswith("conv3")  # a ResNet bottleneck's last conv adds the residual
        out.setdefault((c.shape, res), []).append(c.name)
    return out


def kernels(net, batches, precisions, every=True):
    for (shape, res), names in layers(net).items():
        for b in batches:
            for p in precisions:
                cands = tc.candidates(shape, b)
                # every config in the first precision (the kernels' times do not depend on it), the candidates in others
                others = [c for c in tc.configs(shape) if c not in cands] if every and p == precisions[0] else []
                for cfg in cands + others:
                    yield shape, res, names, b, p, cfg, cfg in cands


def compile_all(net, batches, precisions, cubins: Path, jobs=16, every=True) -> dict[str, str]:
    """Every kernel's cubin path, compiled through the project's Compiler into the cache at `cubins`."""
    from snn.codegen.cache import CubinCache
    from snn.codegen.compile import Compiler
    sources = dict(tc.render(shape, b, cfg, p) for shape, _, _, b, p, cfg, _ in kernels(net, batches, precisions, every))
    records = Compiler(CubinCache(cubins), jobs).compile(sources, "sm_90").records
    print(f"{len(records)} kernels in {cubins}")
    return {fn: rec["cubin"] for fn, rec in records.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("cubins", type=Path)
    ap.add_argument("--net", default="resnet152")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--precision", default="bf16,fp16")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--all-configs", action="store_true", help="time every config (in the first precision), not only the candidates")
    a = ap.parse_args(argv)
    net = load_spec(f"network_specs/{a.net}.yaml")
    batches = [int(x) for x in a.batch.split(",")]
    precisions = a.precision.split(",")
    cubin_of = compile_all(net, batches, precisions, a.cubins, every=a.all_configs)  # what the cache lacks
    if a.compile_only:
        return 0

    import torch
    from snn.runtime.cuda import Device, torch_dtype
    from snn.runtime.measure.timing import Env, graph_call_s
    env = Env()
    dev = Device()
    torch.backends.cudnn.benchmark = True
    rows = []
    gen = torch.Generator("cuda").manual_seed(0)
    for (shape, res), names in layers(net).items():
        for b in batches:
            for p in precisions:
                dt = torch_dtype(torch, p)
                x = torch.relu(torch.randn(b, shape.C, shape.H, shape.W, device="cuda", generator=gen)).to(dt)
                x = x.contiguous(memory_format=torch.channels_last)
                w = (torch.randn(shape.N, shape.C, shape.R, shape.S, device="cuda", generator=gen)
                     / (shape.C * shape.R * shape.S) ** 0.5).to(dt).contiguous(memory_format=torch.channels_last)
                bias = torch.randn(shape.N, device="cuda", generator=gen).to(dt)
                r = (torch.randn(b, shape.N, shape.P, shape.Q, device="cuda", generator=gen).to(dt)
                     .contiguous(memory_format=torch.channels_last) if res else None)
                ref = torch.nn.functional.conv2d(x.double(), w.double(), bias.double(), shape.stride, shape.padding)
                if res:
                    ref = ref + r.double()
                ref = torch.relu(ref)
                scale = ref.abs().max().item()

                def cudnn():
                    if res:
                        return torch.cudnn_convolution_add_relu(x, w, r, 1.0, bias, shape.stride, shape.padding,
                                                                (1, 1), 1)
                    return torch.cudnn_convolution_relu(x, w, bias, shape.stride, shape.padding, (1, 1), 1)
                out_c = cudnn()
                err_c = (out_c.double() - ref).abs().max().item() / scale
                t_c = graph_call_s(torch, cudnn, REPEAT, 30)
                row = {"shape": shape.tag(), "residual": res, "convs": len(names), "batch": b, "precision": p,
                       "cudnn_us": round(t_c * 1e6, 3), "cudnn_err": err_c, "configs": []}
                bias32 = bias.float()
                cands = tc.candidates(shape, b)
                every = a.all_configs and p == precisions[0]
                cfgs = cands + ([c for c in tc.configs(shape) if c not in cands] if every else [])
                for cfg in cfgs:
                    fn, _ = tc.render(shape, b, cfg, p)
                    cubin = cubin_of[fn]
                    out = torch.empty(b, shape.N, shape.P, shape.Q, device="cuda", dtype=dt,
                                      memory_format=torch.channels_last)
                    args = [(x.data_ptr(), _vp), (w.data_ptr(), _vp), (out.data_ptr(), _vp),
                            (bias32.data_ptr(), _vp), (r.data_ptr() if res else 0, _vp), (1, _i32)]

                    def launch():
                        dev.launch(cubin, fn, tc.grid(shape, b, cfg), [tc.THREADS], tc.smem_bytes(cfg), args,
                                   pdl=True)
                    out.fill_(float("nan"))
                    launch()
                    torch.cuda.synchronize()
                    err = (out.double() - ref).abs().max().item() / scale
                    t = graph_call_s(torch, launch, REPEAT, 30)
                    row["configs"].append({"config": cfg.tag(), "candidate": cfg in cands, "us": round(t * 1e6, 3),
                                           "err": err, "blocks": tc.grid(shape, b, cfg)})
                best = min(row["configs"], key=lambda c: c["us"])
                pick = min((c for c in row["configs"] if c["candidate"]), key=lambda c: c["us"])
                row["pick_us"], row["best_us"], row["best"] = pick["us"], best["us"], best["config"]
                row["pick_err"] = max(c["err"] for c in row["configs"])
                rows.append(row)
                print(f"{shape.tag():34s} res={int(res)} x{len(names):2d} b{b} {p}: cudnn {row['cudnn_us']:7.2f} us "
                      f"(err {err_c:.1e}), best candidate {pick['config']} {row['pick_us']:7.2f} "
                      f"(worst err {row['pick_err']:.1e}), best {best['config']} {best['us']:7.2f}", flush=True)
    a.out.write_text(json.dumps({"environment": env.info(), "rows": rows}, indent=1))
    # per batch and precision: the network's conv time, cuDNN against the kernel where it wins
    print("\n| batch | precision | cuDNN sum us | best candidate sum | min(candidate, cuDNN) sum | min(any config, cuDNN) sum |")
    print("|---|---|---|---|---|---|")
    for b in batches:
        for p in precisions:
            rs = [x for x in rows if x["batch"] == b and x["precision"] == p]
            s = lambda f: sum(f(x) * x["convs"] for x in rs)  # noqa: E731
            print(f"| {b} | {p} | {s(lambda x: x['cudnn_us']):.1f} | {s(lambda x: x['pick_us']):.1f} | "
                  f"{s(lambda x: min(x['pick_us'], x['cudnn_us'])):.1f} | {s(lambda x: min(x['best_us'], x['cudnn_us'])):.1f} |")
    return 0


_vp, _i32 = ctypes.c_void_p, ctypes.c_int


if __name__ == "__main__":
    sys.exit(main())
