"""ResNet-152's stage transitions at batch 1: the first block's strided 3x3 conv and its downsample (a 1x1 stride-2
conv) run side by side in the graph (runtime/branches.py). Each kernel the build offers the two (the dense
candidates, and the plan's sparse pick of the 3x3), every pair of them timed side by side (each on its own stream of
a fork and join, ten back to back in a CUDA graph: measure.timing.graph_call_s), one after the other, and each alone:
whether a pair that shares the GPU well beats the pair of the kernels that are fastest alone. Inputs: the trained-like
profile's zeros at each conv's input (0.63 / 0.72 for the 3x3s, 0.32 / 0.37 / 0.25 for the block inputs).

    python3 branch_probe.py OUT.json        # the table on stdout
"""
import json
import sys

import torch

from snn.codegen import dense
from snn.codegen.emit import render_sparse
from snn.codegen.gpu import load_gpu
from snn.codegen.plan import plan_shape
from snn.codegen.spec import ConvShape
from snn.runtime.check import KernelRunner, relu_input
from snn.runtime.measure.timing import graph_call_s

# (stage, the 3x3's C and input size, its input's zeros, the downsample's C -> N, the block input's zeros)
STAGES = [("layer2.0", 128, 56, 0.63, 256, 512, 0.32), ("layer3.0", 256, 28, 0.72, 512, 1024, 0.37),
          ("layer4.0", 512, 14, 0.72, 1024, 2048, 0.25)]


def main() -> None:
    torch.backends.cudnn.allow_tf32 = False
    runner = KernelRunner()
    gen = torch.Generator(device="cuda").manual_seed(0)
    gpu = load_gpu("h200")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    rows = []
    for stage, c3, hw, z3, cd, nd, zd in STAGES:
        a_shape = ConvShape(c3, c3, hw, hw, 3, 3, (2, 2), (1, 1))
        b_shape = ConvShape(cd, nd, hw, hw, 1, 1, (2, 2), (0, 0))
        ka = [dense.emitted(a_shape, 1, c) for c in dense.candidates(a_shape, 1)]
        ka.append(render_sparse(a_shape, 1, plan_shape(a_shape, gpu, 1, [0.7])[0.7].config))
        kb = [dense.emitted(b_shape, 1, c) for c in dense.candidates(b_shape, 1)]
        bad = runner.compile(ka + kb)
        ka, kb = [k for k in ka if k.name not in bad], [k for k in kb if k.name not in bad]
        xa, xb = relu_input(torch, (1, hw, hw, c3), z3, gen), relu_input(torch, (1, hw, hw, cd), zd, gen)
        wa = torch.randn((c3, 3, 3, c3), generator=gen, device="cuda") * (c3 * 9 * (1 - z3)) ** -0.5
        wb = torch.randn((cd, 1, 1, nd), generator=gen, device="cuda") * (cd * (1 - zd)) ** -0.5
        oa = torch.zeros((1, hw // 2, hw // 2, c3), device="cuda")
        ob = torch.zeros((1, hw // 2, hw // 2, nd), device="cuda")

        def run_a(k):
            runner.run(k, xa, wa, oa)

        def run_b(k):
            runner.run(k, xb, wb, ob)

        alone = {k.name: graph_call_s(torch, lambda k=k: run_a(k)) * 1e6 for k in ka}
        alone.update({k.name: graph_call_s(torch, lambda k=k: run_b(k)) * 1e6 for k in kb})
        for a in ka:
            for b in kb:
                def side(a=a, b=b):
                    cur = torch.cuda.current_stream()
                    s1.wait_stream(cur)
                    s2.wait_stream(cur)
                    with torch.cuda.stream(s1):
                        run_a(a)
                    with torch.cuda.stream(s2):
                        run_b(b)
                    cur.wait_stream(s1)
                    cur.wait_stream(s2)
                both = graph_call_s(torch, side) * 1e6
                serial = graph_call_s(torch, lambda a=a, b=b: (run_a(a), run_b(b))) * 1e6
                rows.append({"stage": stage, "conv2": a.name, "downsample": b.name, "side_by_side_us": round(both, 2),
                             "serial_us": round(serial, 2), "conv2_alone_us": round(alone[a.name], 2),
                             "downsample_alone_us": round(alone[b.name], 2)})
                print(json.dumps(rows[-1]), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(rows, f, indent=1)
    print("\nstage transitions at batch 1: the strided 3x3 and the downsample side by side, one after the other and "
          "alone, us (ten back to back in a CUDA graph); per stage the five fastest side by side, then the pair of "
          "the kernels fastest alone\n")
    print("| stage | conv2 | downsample | side by side | serial | conv2 alone | downsample alone |\n|---|---|---|---|---|---|---|")
    for stage, *_ in STAGES:
        mine = [r for r in rows if r["stage"] == stage]
        if not mine:
            continue
        best_a = min(r["conv2_alone_us"] for r in mine)
        best_b = min(r["downsample_alone_us"] for r in mine)
        pick = next(r for r in mine if r["conv2_alone_us"] == best_a and r["downsample_alone_us"] == best_b)
        for r in sorted(mine, key=lambda r: r["side_by_side_us"])[:5] + [pick]:
            print(f"| {stage} | {r['conv2'].split('_b1')[0].split('_', 6)[-1]} | "
                  f"{r['downsample'].split('_b1')[0].split('_', 6)[-1]} | {r['side_by_side_us']:.2f} | "
                  f"{r['serial_us']:.2f} | {r['conv2_alone_us']:.2f} | {r['downsample_alone_us']:.2f} |")


if __name__ == "__main__":
    main()
