"""Two 1x1 convs in one launch (codegen/pair.py) against the same two convs on the dense kernels the build offers
for them, on ResNet-152's block boundaries (a block's conv3 -> the next block's conv1) at batch 1 and 8.

Both sides run the same operands: the first conv's input a producer's raw sums (its epilogue applied while staging,
as a bottleneck's 3x3 split hands it on), bias + residual + ReLU on the first conv, bias + ReLU on the second, both
zero counts. Timed as ten pairs back to back in a CUDA graph (measure.timing.graph_call_s, median of 15 replays):
the separate side for every combination of the two shapes' dense candidates (dense.candidates), the pair side for
each config of PAIR_CONFIGS that fits; every pair kernel checked against float64 first (check.check_pair).

    python3 pair_probe.py OUT.json

Prints, per shape and batch, the best separate combination and each pair config in us a pair. BATCHES (default
1,8): the batches to run; SHAPES (default the three below): `C1,N1,N2,HW` separated by `;`.
"""
import json
import os
import sys

import torch

from snn.codegen import dense, pair
from snn.codegen.spec import ConvShape
from snn.runtime.check import KernelRunner, handoff_input, relu_input
from snn.runtime.executor import Epilogue
from snn.runtime.measure.timing import graph_call_s

SHAPES = [tuple(int(v) for v in t.split(",")) for t in os.environ["SHAPES"].split(";")] if os.environ.get("SHAPES") \
    else [(256, 1024, 256, 14), (128, 512, 128, 28), (64, 256, 64, 56)]   # C1 -> N1 -> N2 at H = W
BATCHES = tuple(int(b) for b in os.environ.get("BATCHES", "1,8").split(","))
# the build's candidates, and beside them: the two-slice warp split with a group a warp (64 accumulators a thread
# over 8 warps: it spills), a three-stage pipeline of the one-slice one, the first conv's K over 4 groups of two or
# four warps in other layouts than the candidate's, and 64-channel chunks on the one-warp-a-group layout
PAIR_CONFIGS = [pair.PairConfig(*t) for t in pair.CANDIDATES] + [
    pair.PairConfig(32, 64, 128, 2, 2, True, 32), pair.PairConfig(32, 64, 128, 1, 3, True, 32),
    pair.PairConfig(32, 64, 128, 2, 2, True, 16, 4), pair.PairConfig(32, 64, 128, 2, 2, True, 32, 4),
    pair.PairConfig(32, 64, 256, 1, 2, True, 16, 4), pair.PairConfig(32, 64, 256, 2, 2, True, 32, 4),
    pair.PairConfig(32, 64, 256, 1, 2, True, 32, 4), pair.PairConfig(32, 64, 128, 1, 2, True, 32, 0, 64),
    pair.PairConfig(32, 64, 128, 1, 3, True, 32, 0, 64),
    # 7x7 (the W2 share streamed): 8 pixels a cluster's tile in 7 clusters of 16, or 16 in 4
    pair.PairConfig(8, 128, 128, 1, 3, True, 32, 4, 64), pair.PairConfig(8, 128, 128, 1, 4, True, 32, 4),
    pair.PairConfig(8, 128, 128, 1, 3, True, 32, 4), pair.PairConfig(8, 128, 128, 1, 4, True, 32, 2),
    pair.PairConfig(16, 128, 256, 1, 3, True, 32, 4), pair.PairConfig(16, 128, 128, 1, 3, True, 32, 4, 64)]


def one_by_one(c, n, hw):
    return ConvShape(c, n, hw, hw, 1, 1, (1, 1), (0, 0))


def main() -> None:
    torch.backends.cudnn.allow_tf32 = False
    runner = KernelRunner()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for c1, n1, n2, hw in SHAPES:
        first, second = one_by_one(c1, n1, hw), one_by_one(n1, n2, hw)
        for b in BATCHES:
            ka = [dense.emitted(first, b, c) for c in dense.candidates(first, b)]
            kb = [dense.emitted(second, b, c) for c in dense.candidates(second, b)]
            kp = []
            for cfg in PAIR_CONFIGS:
                try:
                    kp.append(pair.emitted(first, second, b, cfg))
                except ValueError:
                    continue
            bad = runner.compile(ka + kb + kp)
            x = relu_input(torch, (b, hw, hw, c1), 0.6, gen)
            raw, in_epi, _ = handoff_input(torch, x, gen, False)
            w1 = torch.randn((c1, 1, 1, n1), generator=gen, device="cuda") * c1 ** -0.5
            w2 = torch.randn((n1, 1, 1, n2), generator=gen, device="cuda") * n1 ** -0.5
            b1, b2 = torch.randn(n1, generator=gen, device="cuda"), torch.randn(n2, generator=gen, device="cuda")
            res = torch.randn((b, hw, hw, n1), generator=gen, device="cuda")
            out1, out2 = torch.empty((b, hw, hw, n1), device="cuda"), torch.empty((b, hw, hw, n2), device="cuda")
            z = torch.zeros(2, dtype=torch.int64, device="cuda")
            epi1, epi2 = Epilogue(b1, res.permute(0, 3, 1, 2), True, z, 0), Epilogue(b2, None, True, z, 1)
            where = {"c1": c1, "n1": n1, "n2": n2, "hw": hw, "batch": b}
            for a in ka:
                for k2 in kb:
                    if a.name in bad or k2.name in bad:
                        continue
                    us = graph_call_s(torch, lambda a=a, k2=k2: (runner.run(a, raw, w1, out1, epi1, in_epi),
                                                                 runner.run(k2, out1, w2, out2, epi2))) * 1e6
                    rows.append({**where, "side": "separate", "kernels": [a.name, k2.name], "us": round(us, 3)})
            for k in kp:
                if k.name in bad:
                    rows.append({**where, "side": "pair", "kernels": [k.name], "bad": bad[k.name]})
                    continue
                chk = runner.check_pair(k, first, second, b, 0.6, gen)
                us = graph_call_s(torch, lambda k=k: runner.run_pair(k, raw, w1, out1, w2, out2, epi1, epi2,
                                                                     in_epi)) * 1e6
                rows.append({**where, "side": "pair", "kernels": [k.name], "us": round(us, 3), "ok": chk["ok"],
                             "err_over_allowed": chk["err_over_allowed"]})
                print(json.dumps(rows[-1]), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(rows, f, indent=1)
    print(f"\n{'shape':<22}{'batch':>6}  {'best separate us':>17}  {'pair config':<16}{'us':>8}{'ratio':>7}  ok")
    for c1, n1, n2, hw in SHAPES:
        for b in BATCHES:
            mine = [r for r in rows if (r["c1"], r["n1"], r["hw"], r["batch"]) == (c1, n1, hw, b) and "us" in r]
            sep = min((r for r in mine if r["side"] == "separate"), key=lambda r: r["us"], default=None)
            for r in sorted((r for r in mine if r["side"] == "pair"), key=lambda r: r["us"]):
                tag = r["kernels"][0].split("_n%d_" % n2)[1].rsplit("_b", 1)[0]
                print(f"{'%d-%d-%d @%d' % (c1, n1, n2, hw):<22}{b:>6}  {sep['us'] if sep else float('nan'):>17.2f}  "
                      f"{tag:<16}{r['us']:>8.2f}{r['us'] / sep['us'] if sep else float('nan'):>7.2f}  {r['ok']}")


if __name__ == "__main__":
    main()
