"""Two 1x1 convs in one launch (codegen/pair.py) in the CUDA graph: a ResNet block's last conv and the next block's
first, where both run one kernel whatever their sparsity.

The build offers pair kernels for the network's conv pairs (spec.Network.conv_pairs) at batch 1, recorded in the
first layer's batch entry ("pair": {"with": the second conv, "kernels": [...]}). In a graph capture (runtime/graph.py)
`plan` finds the pairs of the lowered program that may run as one: the second conv is the first reader of the
first's value, reading it as its input; the first applies bias + residual + ReLU, the second bias + ReLU, no
residual; both have a fixed kernel (no selector in between) that fuses its epilogue into its one launch, and
neither hands its sums to a consumer (runtime/handoff.py). `Timings.choose` then times, once per distinct pair of
shapes and kernels, the two convs' own kernels against each pair kernel as the network runs them (ten pairs back
to back in a CUDA graph, measure.timing.graph_call_s, on the layers' own weights) and keeps the fastest: in
ResNet-152 at batch 1 the pair kernels won on all 47 of its pairs (12.9-14.2 against 18.2-19.3 us at 14x14;
docs/results/fusion/h200/pair/). `SNN_PAIRS=0` keeps every conv on its own kernel.
"""
from __future__ import annotations

import os

from .executor import Epilogue, InputEpilogue
from .handoff import value_aliases, value_readers
from .kernels import uses_accumulator


def enabled() -> bool:
    return os.environ.get("SNN_PAIRS", "1") != "0"


def plan(ops, output: str, fixed: dict[str, dict], offered: dict[str, dict], handoffs: dict[str, str]) \
        -> dict[str, tuple[str, list[str]]]:
    """{first conv: (second conv, its pair kernels)} of the program's ops that may run as one launch. fixed: conv ->
    the manifest entry of the one kernel it runs; offered: conv -> its batch entry's "pair"; handoffs: producer ->
    consumer of the graph's hand-offs."""
    out = {}
    aliases = value_aliases(ops)
    by_name = {op.name: op for op in ops}
    for op in ops:
        p = offered.get(op.name) if op.kind == "conv" else None
        if not p or not p.get("kernels") or op.name in handoffs:
            continue
        second = by_name.get(p["with"])
        ep = op.attrs.get("epilogue")
        if second is None or second.kind != "conv" or second.name in handoffs or not ep or not ep.get("relu"):
            continue
        sep = second.attrs.get("epilogue")
        if not sep or sep.get("residual"):
            continue
        names, readers = value_readers(ops, op.name, aliases)
        if output in names or not readers or readers[0] is not second or second.inputs[0] not in names \
                or names & set(second.inputs[1:]):
            continue
        ka, kb = fixed.get(op.name), fixed.get(second.name)
        if ka is None or kb is None or any(uses_accumulator(k) or not k.get("epilogue") for k in (ka, kb)):
            continue
        out[op.name] = (second.name, list(p["kernels"]))
    return out


class Timings:
    """The measured choice between a pair's own kernels and its pair kernels, once per distinct pair of shapes,
    kernels and batch (34 of ResNet-152's 35 pairs inside layer 3 share one); `measured` keeps every time."""

    def __init__(self, executor):
        self.ex, self.torch = executor, executor.torch
        self.chosen: dict[tuple, str | None] = {}
        self.measured: list[dict] = []

    def choose(self, first: str, second: str, kernels: list[str], ka: str, kb: str, batch: int,
               handed: bool) -> str | None:
        """The pair kernel to run `first` and `second` with (None: their own kernels `ka`, `kb`), timed on a random
        post-ReLU input (raw sums with a shift where the first conv takes its producer's epilogue: `handed`)."""
        from .measure.timing import graph_call_s
        ex, torch = self.ex, self.torch
        sa, sb = ex.convs[first].shape, ex.convs[second].shape
        key = (sa, sb, ka, kb, tuple(kernels), batch, handed)
        if key in self.chosen:
            return self.chosen[key]
        cl = torch.channels_last
        gen = torch.Generator(device="cuda").manual_seed(0)
        opa, opb = ex.conv_op(first), ex.conv_op(second)

        def tensor(c, h, w):
            return torch.randn(batch, c, h, w, device="cuda", generator=gen).contiguous(memory_format=cl)
        x, res = tensor(sa.C, sa.H, sa.W), tensor(sa.N, sa.P, sa.Q)
        ya, yb = torch.empty_like(res), tensor(sb.N, sb.P, sb.Q)
        counters = torch.zeros(3, dtype=torch.int64, device="cuda")
        epa = Epilogue(opa.attrs["epilogue"]["shift"], res if opa.attrs["epilogue"].get("residual") else None, True,
                       counters, 0)
        epb = Epilogue(opb.attrs["epilogue"]["shift"], None, True, counters, 1)
        in_epi = InputEpilogue(torch.zeros(sa.C, device="cuda"), counters, 2) if handed else None
        if not handed:
            x = torch.relu(x)
        times = {None: graph_call_s(torch, lambda: (ex.sparse_conv(opa, ka, x, ya, epa, in_epi),
                                                   ex.sparse_conv(opb, kb, ya, yb, epb)))}
        for k in kernels:
            times[k] = graph_call_s(torch, lambda k=k: ex.pair_conv(opa, opb, k, x, ya, yb, epa, epb, in_epi))
        best = self.chosen[key] = min(times, key=lambda k: times[k])
        self.measured.append({"first": first, "second": second, "batch": batch,
                              "us": {k or f"{ka} + {kb}": round(t * 1e6, 3) for k, t in times.items()},
                              "chosen": best or "separate"})
        return best
