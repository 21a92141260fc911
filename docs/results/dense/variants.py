"""Dense-kernel variants on ResNet-152's twelve stride-1 batch-1 shapes, timed as probe.py times (ten calls back to
back in a CUDA graph, median of 15 replays; bias + residual + ReLU fused, each variant checked against float64):
the build's candidates, every (bm, bn, slices) with the largest K split that fits one and two waves, 2 and 4
pipeline stages, and an NK=0 twin of the 32 x 128 candidate (no main loop: what launch, wait, the cluster's sum and
the epilogue cost alone; `us_noepi` without bias, residual and ReLU); cuDNN FP32 and TF32 on the same input.

    python3 variants.py compile            # CPU: render and compile into $SNN_CACHE_DIR (nvcc needs no GPU)
    python3 variants.py time OUT.json      # GPU: prints the eight fastest per shape and the candidates
    ncu --kernel-name regex:dconv --metrics "$(python3 ../fusion/isolated.py --metrics)" --csv --page raw \
        python3 variants.py ncu > OUT.csv  # GPU: the layer3 shapes' 32 x 128 kernels and their NK=0 twins once each
"""
import json
import math
import sys
from dataclasses import replace

from snn.codegen import dense, emit
from snn.codegen.spec import ConvShape

SHAPES = [  # (C, N, H, W, R, S, stride, pad)
    (1024, 256, 14, 14, 1, 1, 1, 0), (256, 256, 14, 14, 3, 3, 1, 1), (256, 1024, 14, 14, 1, 1, 1, 0),
    (2048, 512, 7, 7, 1, 1, 1, 0), (512, 512, 7, 7, 3, 3, 1, 1), (512, 2048, 7, 7, 1, 1, 1, 0),
    (512, 128, 28, 28, 1, 1, 1, 0), (128, 128, 28, 28, 3, 3, 1, 1), (128, 512, 28, 28, 1, 1, 1, 0),
    (256, 64, 56, 56, 1, 1, 1, 0), (64, 64, 56, 56, 3, 3, 1, 1), (64, 256, 56, 56, 1, 1, 1, 0),
]


def shape_of(t):
    C, N, H, W, R, S, st, pd = t
    return ConvShape(C, N, H, W, R, S, (st, st), (pd, pd))


def ks_for(shape, bm, bn, waves, b=1):
    tiles = math.ceil(b * shape.P * shape.Q / bm) * (shape.N // bn)
    return max((k for k in range(1, min(8, dense.chunks(shape)) + 1) if tiles * k <= 132 * waves), default=1)


def variants(shape):
    out = {}
    for c in dense.candidates(shape, 1):
        out[c] = "cand"
    for bm in (16, 32, 64):
        for bn in (64, 128):
            for sl in ((1, 2) if bm >= 32 else (1,)):
                for waves in (1, 2):
                    c = dense.DenseConfig(bm, bn, ks_for(shape, bm, bn, waves), 128, sl)
                    try:
                        dense.check(shape, c)
                    except ValueError:
                        continue
                    out.setdefault(c, f"w{waves}")
    base = dense.candidates(shape, 1, tiles=((32, 128, 128, 1),))
    for c in base:
        for st in (2, 4):
            out.setdefault(replace(c, stages=st), "stages")
    return out


def kernels(shape):
    ks = []
    for cfg, why in variants(shape).items():
        k = dense.emitted(shape, 1, cfg)
        ks.append((k, why, cfg))
    # NK=0: everything but the main loop (launch, wait, reduction, epilogue)
    for c in dense.candidates(shape, 1, tiles=((32, 128, 128, 1),)):
        k = dense.emitted(shape, 1, c)
        nk = dense.chunks(shape)
        name0 = k.name + "_nk0"
        src = k.source.replace(f"#define NK {nk}\n", "#define NK 0\n").replace(k.name, name0)
        steps = [dict(s, function=name0) for s in k.steps]
        ks.append((emit.EmittedKernel(name0, src, steps, {}, "CRSN", epilogue=True), "nk0", c))
    return ks


def main():
    mode = sys.argv[1]
    if mode == "compile":
        from snn.codegen.compile import Compiler, problems
        srcs = {k.name: k.source for s in SHAPES for k, _, _ in kernels(shape_of(s))}
        rec = Compiler(None, 2).compile(srcs, "sm_90").records
        bad = {n: problems(r) for n, r in rec.items() if problems(r)}
        print(len(srcs), "kernels;", len(bad), "with problems", json.dumps(bad)[:2000])
        return
    import torch
    from probe import cudnn_us, operands   # the same operands and cuDNN timing as probe.py (this folder)
    from snn.runtime.check import KernelRunner
    from snn.runtime.executor import Epilogue
    from snn.runtime.measure.timing import graph_call_s
    torch.backends.cudnn.allow_tf32 = False
    runner = KernelRunner()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    shapes = SHAPES[:3] if mode == "ncu" else SHAPES
    for t in shapes:
        shape = shape_of(t)
        ks = kernels(shape)
        if mode == "ncu":
            profiled = dense.candidates(shape, 1, tiles=((32, 128, 128, 1), (32, 64, 128, 2), (16, 128, 128, 1)))
            ks = [x for x in ks if x[1] == "nk0" or x[2] in profiled]
        bad = runner.compile([k for k, _, _ in ks])
        x, w, bias, out, epi = operands(shape, 1, 0.37 if shape.C == 1024 else 0.72, gen)
        epi_none = Epilogue(None, None, False, None, 0)
        for k, why, cfg in ks:
            if k.name in bad:
                rows.append({"shape": shape.tag(), "kernel": k.name, "why": why, "bad": bad[k.name]})
                continue
            if mode == "ncu":
                runner.run(k, x, w, out, epi)
                torch.cuda.synchronize()
                continue
            r = {"shape": shape.tag(), "kernel": k.name, "why": why, "tag": cfg.tag(),
                 "blocks": math.prod(dense.grid(shape, 1, cfg)),
                 "us": round(graph_call_s(torch, lambda k=k: runner.run(k, x, w, out, epi)) * 1e6, 3)}
            if why == "nk0":
                r["us_noepi"] = round(graph_call_s(torch, lambda k=k: runner.run(k, x, w, out, epi_none)) * 1e6, 3)
            else:
                c = runner.check_conv(k, shape, 1, 0.7, gen)
                r["ok"] = c["ok"]
            rows.append(r)
            print(json.dumps(r), flush=True)
        if mode != "ncu":
            for tf in (False, True):
                rows.append({"shape": shape.tag(), "kernel": "cudnn_tf32" if tf else "cudnn_fp32",
                             "us": cudnn_us(x, w, bias, shape, tf)})
    if mode != "ncu":
        json.dump(rows, open(sys.argv[2], "w"), indent=1)
        for s in dict.fromkeys(r["shape"] for r in rows):
            rs = sorted((r for r in rows if r["shape"] == s and "us" in r), key=lambda r: r["us"])
            print(f"\n{s}")
            for r in rs[:8] + [r for r in rs[8:] if r.get("why") in ("cand", "nk0") or "cudnn" in r["kernel"]]:
                print(f"  {r['us']:8.2f}  {r.get('tag', r['kernel']):18s} {r.get('why', '')} blocks={r.get('blocks')} "
                      f"{'noepi=%s' % r['us_noepi'] if 'us_noepi' in r else ''} {'' if r.get('ok', True) else 'WRONG'}")


if __name__ == "__main__":
    main()
