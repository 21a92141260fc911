"""Epilogue hand-off: a producer conv's epilogue applied by the conv that reads its output, in a CUDA graph.

A channel split (a sparse kernel that adds with atomics) needs an snn_epilogue launch after it to add the
bias, apply the ReLU and count the zeros. Where its output's only reader is a later conv, and that conv's
kernel can take the epilogue while staging its input (emit.IN_ARGS: relu(sum + shift[c]), zeros counted by
the block that owns each pixel), the split adds its raw sums into a buffer of the graph's own and the launch
is gone: ResNet's bottleneck conv1 -> conv2 -> conv3 and DenseNet's conv1 -> conv2 pairs.

Only in a captured graph (runtime/graph.py), and only between layers whose kernel does not depend on the
sparsity (a fixed branch: no selector reads the counter in between). The eager path runs every epilogue.
`SNN_HANDOFF=0` turns it off.

The sums buffer must be zero where a split adds into it. Regions are taken from its start, one after the
other; the next snn_epilogue launch of a fixed layer after every handed-off region was read clears them all
in the same launch (its zero range, emit.EPILOGUE_ZERO_RANGE), and a memset node does where the buffer is
full with nothing left to read, or at the graph's end. A producer that finds it full while a region is
still to be read runs its epilogue itself.
"""
from __future__ import annotations

import os

from .kernels import takes_input_epilogue, uses_accumulator

ALIGN = 64  # floats: regions start 256-byte aligned (vector atomics and cp.async need 16)


def enabled() -> bool:
    return os.environ.get("SNN_HANDOFF", "1") != "0"


def plan(ops, output: str, fixed: dict[str, dict]) -> dict[str, str]:
    """{producer conv: consumer conv} for the program's ops (runtime/lower.py), where `fixed` maps each
    conv that runs one kernel whatever its sparsity to that kernel's manifest entry.

    A producer qualifies when its kernel adds into the accumulator (a split), its epilogue is shift + ReLU
    (no residual), and its value (or an alias of it) is read by one op only, a later conv with a fixed kernel
    that takes IN_ARGS, as its input (not as a residual); and the value is not the network's output."""
    aliases: dict[str, str] = {}   # alias value -> the conv value it is
    for op in ops:
        if op.kind == "alias":
            aliases[op.name] = aliases.get(op.inputs[0], op.inputs[0])
    moves = {}
    for op in ops:
        k = fixed.get(op.name) if op.kind == "conv" else None
        ep = op.attrs.get("epilogue") if k is not None else None
        if not ep or not ep.get("relu") or ep.get("residual") or ep.get("shift") is None or not uses_accumulator(k):
            continue
        names = {op.name} | {a for a, v in aliases.items() if v == op.name}
        readers = [o for o in ops if o.kind != "alias" and names & set(o.inputs)]
        if output in names or len(readers) != 1:
            continue
        c = readers[0]
        kc = fixed.get(c.name) if c.kind == "conv" else None
        if kc is None or c.inputs[0] not in names or names & set(c.inputs[1:]) or not takes_input_epilogue(kc):
            continue
        moves[op.name] = c.name
    return moves


class Sums:
    """The graph's buffer of handed-off raw sums (float32, zeroed): `take` a region for a producer, `dirty`
    what a launch must clear, `cleared` once it is."""

    def __init__(self, torch, capacity: int, device):
        self.buf = torch.zeros(max(1, capacity), dtype=torch.float32, device=device)
        self.used = 0

    @staticmethod
    def capacity(numels) -> int:
        """Room for the two largest regions (a producer whose consumer is itself a producer)."""
        sizes = sorted((_align(n) for n in numels), reverse=True)
        return sum(sizes[:2])

    def take(self, numel: int, flush: bool = True):
        """A zeroed region of numel floats. Where the buffer is full, a memset node clears what was taken
        first (flush), or None (not flush: a region taken may still be read)."""
        if self.used + _align(numel) > self.buf.numel():
            if not flush or _align(numel) > self.buf.numel():
                return None
            self.flush()
        region = self.buf[self.used:self.used + numel]
        self.used += _align(numel)
        return region

    def dirty(self):
        """The regions taken since the last clear (None: nothing to clear)."""
        return self.buf[:self.used] if self.used else None

    def cleared(self) -> None:
        self.used = 0

    def flush(self) -> None:
        """A memset node over what was taken (at the end of the graph: every replay starts from zeros)."""
        if self.used:
            self.buf[:self.used].zero_()
            self.used = 0


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
