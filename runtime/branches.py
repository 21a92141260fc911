"""Side branches: a conv that the next convs do not wait for runs beside them in the CUDA graph.

ResNet's downsample (a 1x1 conv of the block's input) is read only by the block's last conv, as its residual; in
program order it runs between conv1 and conv2 and the chain waits for it. At batch 1 it and conv2 run side by side
sooner than one after the other (docs/graphs.md, "Side branches"), so in a captured graph (runtime/graph.py) it is
recorded on a stream of its own: forked after its input's producer, joined by the first op that reads its value.
Only a conv with a fixed kernel (no selector between) that neither takes nor hands over an epilogue
(runtime/handoff.py) nor runs in a pair (runtime/pairs.py) branches off, and only where nothing between the fork
and the join but convs (and aliases) runs: none of them writes a tensor in place. Its input and output stay
referenced until the join, so the graph's memory pool cannot hand them to a later node of the main stream that
could run before the branch is done. The eager path runs in program order. `SNN_BRANCHES=0` keeps every conv on
the one stream.
"""
from __future__ import annotations

import os

from .handoff import value_aliases, value_readers


def enabled() -> bool:
    return os.environ.get("SNN_BRANCHES", "1") != "0"


def plan(ops, output: str) -> set[str]:
    """The convs of the program's ops (runtime/lower.py) that may run on a side branch: every op reading the conv's
    value reads it as a residual (not as its first input), the first of them comes after at least one other conv,
    and every op in between is a conv or an alias that writes no concat buffer."""
    out = set()
    aliases = value_aliases(ops)
    index = {id(op): i for i, op in enumerate(ops)}
    for i, op in enumerate(ops):
        if op.kind != "conv" or "concat" in op.attrs:
            continue
        names, readers = value_readers(ops, op.name, aliases)
        if output in names or not readers or any(r.inputs[0] in names for r in readers):
            continue   # only a value read as a residual: a value read as an input is the chain itself
        between = ops[i + 1:index[id(readers[0])]]
        if any(o.kind == "conv" for o in between) and all(
                o.kind in ("conv", "alias") and "concat" not in o.attrs for o in between):
            out.add(op.name)
    return out
