"""Epilogue hand-off: a producer conv's epilogue applied by the conv that reads its output, in a CUDA graph.

A channel split (a sparse kernel that adds with atomics) needs an snn_epilogue launch after it to add the
bias (and residual), apply the ReLU and count the zeros. Where its output's first reader is a later conv whose
kernel can take that epilogue while staging its input (emit.IN_ARGS: relu(sum + shift[c]), zeros counted by
the block that owns each pixel; emit.IN_RES_ARGS where a residual is added or the value has later readers),
the split adds its raw sums into a buffer of the graph's own and the launch is gone: ResNet's bottleneck
conv1 -> conv2 -> conv3 -> the next block's conv1 and DenseNet's conv1 -> conv2 pairs. DenseNet's pre-activations
(norm1's batchnorm + ReLU over the block's concat buffer) move the same way into the conv1 that alone reads them
(`preactivations`: emit.IN_BN_ARGS, the buffer read in place at its pixel pitch). A value read again later
(a ResNet block's output: the next block's residual, a downsample's input) is stored by the consumer as it
stages it (in_out), so the later readers find it as they would after the producer's own epilogue.

Only in a captured graph (runtime/graph.py), and only between layers whose kernel does not depend on the
sparsity (a fixed branch: no selector reads the counter in between). The eager path runs every epilogue.
`SNN_HANDOFF=0` turns it off.

The sums buffer must be zero where a split adds into it. It is a ring of regions; once a consumer has read its
region, the next fixed conv's launch clears it (its kernel after its wait, emit.ZERO_ARGS, or its snn_epilogue
launch): no kernel of its own. Where read regions pile up all the same (no such launch comes), one fill clears
them on a side branch of the graph, and a producer that takes such a range again first waits for that fill. A
producer that finds no free region (every one still to be read) runs its epilogue itself.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .kernels import takes_input_bn, takes_input_epilogue, takes_input_residual, uses_accumulator

ALIGN = 64  # floats: regions start 256-byte aligned (vector atomics and cp.async need 16)


def enabled() -> bool:
    return os.environ.get("SNN_HANDOFF", "1") != "0"


def plan(ops, output: str, fixed: dict[str, dict]) -> dict[str, str]:
    """{producer conv: consumer conv} for the program's ops (runtime/lower.py), where `fixed` maps each
    conv that runs one kernel whatever its sparsity to that kernel's manifest entry.

    A producer qualifies when its kernel adds into the accumulator (a split) and its epilogue is shift + ReLU
    (+ a residual), its value (or an alias of it) is not the network's output, and the first op that reads it
    is a later conv with a fixed kernel that takes IN_ARGS, reading it as its input (not as a residual); with a
    residual, or where other ops read the value after that conv, the consumer's kernel must also take
    IN_RES_ARGS (it adds the residual and stores the value for them: `stored`)."""
    moves = {}
    aliases = value_aliases(ops)
    for op in ops:
        k = fixed.get(op.name) if op.kind == "conv" else None
        ep = op.attrs.get("epilogue") if k is not None else None
        if not ep or not ep.get("relu") or ep.get("shift") is None or not uses_accumulator(k):
            continue
        names, readers = value_readers(ops, op.name, aliases)
        if output in names or not readers:
            continue
        c = readers[0]
        kc = fixed.get(c.name) if c.kind == "conv" else None
        if kc is None or c.inputs[0] not in names or names & set(c.inputs[1:]) or not takes_input_epilogue(kc):
            continue
        if (ep.get("residual") or len(readers) > 1) and not takes_input_residual(kc):
            continue
        moves[op.name] = c.name
    return moves


def preactivations(ops, output: str, fixed: dict[str, dict]) -> dict[str, str]:
    """{pre-activation epilogue op: the conv that applies it while staging} (`fixed` as in `plan`): an epilogue of a
    batchnorm's scale and shift and a ReLU (DenseNet's norm1 over its block's concat buffer), not in place, whose
    value only a conv with a fixed kernel that takes emit.IN_BN_ARGS reads, as its input. That kernel reads the
    batchnorm's input where it lies and counts the zeros; the epilogue's launch and its output tensor are gone."""
    moves = {}
    for op in ops:
        a = op.attrs
        if op.kind != "epilogue" or a.get("scale") is None or a.get("shift") is None or not a.get("relu") \
                or a.get("residual") is not None or a.get("inplace") or op.name == output:
            continue
        _, readers = value_readers(ops, op.name, {})
        if len(readers) != 1 or readers[0].kind != "conv" or readers[0].inputs != (op.name,):
            continue
        k = fixed.get(readers[0].name)
        if k is not None and takes_input_bn(k):
            moves[op.name] = readers[0].name
    return moves


def stored(ops, moves: dict[str, str]) -> set[str]:
    """The producers of `moves` whose value is read after its consumer: the consumer stores it (in_out)."""
    aliases = value_aliases(ops)
    return {p for p in moves if len(value_readers(ops, p, aliases)[1]) > 1}


def value_aliases(ops) -> dict[str, str]:
    """alias value -> the conv value it is."""
    aliases: dict[str, str] = {}
    for op in ops:
        if op.kind == "alias":
            aliases[op.name] = aliases.get(op.inputs[0], op.inputs[0])
    return aliases


def value_readers(ops, value: str, aliases: dict[str, str]):
    """(the value's names: itself and its aliases, the ops that read one of them in program order)."""
    names = {value} | {a for a, v in aliases.items() if v == value}
    return names, [o for o in ops if o.kind != "alias" and names & set(o.inputs)]


@dataclass(eq=False)   # identity: two regions are never the same one
class Region:
    """A producer's range of the sums buffer, `view` (numel floats): "pending" until its consumer has read it,
    then "dirty" until a clear is recorded for it ("clearing": `cleared_by`, what the graph recorded for that
    clear, a CUDA event, to wait for before the range is reused)."""
    start: int
    end: int
    view: object
    state: str = "pending"
    cleared_by: object = None


class Sums:
    """The graph's buffer of handed-off raw sums (float32, zeroed), a ring of regions: `take` one for a producer,
    `consumed` once its consumer is launched; the caller clears what `dirty` returns, in a launch of its own
    stream (`cleared`) or on a side branch (`clearing`)."""

    def __init__(self, torch, capacity: int, device, batch_clear: int = 0):
        self.buf = torch.zeros(max(1, capacity), dtype=torch.float32, device=device)
        self.live: list[Region] = []
        self.next = 0
        self.batch_clear = batch_clear   # floats of dirty regions worth one clear

    @staticmethod
    def capacity(numels) -> tuple[int, int]:
        """(buffer floats, floats of dirty regions worth a fill): the largest region's room four times (one
        being read, one written, read ones), and a fill once read regions outgrow two largest ones (one read
        region alone is left to the next launch, which clears it at no cost)."""
        largest = max(_align(n) for n in numels)
        return 4 * largest, 2 * largest

    def take(self, numel: int) -> tuple[Region | None, list, bool]:
        """(a region of numel floats, zeroed once the clears returned have completed, False), or (None, [],
        True) where it would overlap dirty regions (clear them, then take again), or (None, [], False) where it
        would overlap a region still to be read or not fit at all."""
        n = _align(numel)
        start = self.next if self.next + n <= self.buf.numel() else 0
        if n > self.buf.numel():
            return None, [], False
        over = [r for r in self.live if r.start < start + n and start < r.end]
        if any(r.state == "pending" for r in over):
            return None, [], False
        if any(r.state == "dirty" for r in over):
            return None, [], True
        for r in over:
            self.live.remove(r)
        region = Region(start, start + n, self.buf[start:start + numel])
        self.live.append(region)
        self.next = start + n
        return region, list({id(e): e for e in (r.cleared_by for r in over) if e is not None}.values()), False

    def consumed(self, region: Region) -> bool:
        """Mark the region read; True when the dirty regions are worth a clear now."""
        region.state = "dirty"
        return sum(r.end - r.start for r in self.live if r.state == "dirty") >= self.batch_clear

    def dirty(self) -> list[tuple[int, int]]:
        """The dirty regions as few contiguous [start, end) ranges of the buffer."""
        spans = []
        for r in sorted((r for r in self.live if r.state == "dirty"), key=lambda r: r.start):
            if spans and spans[-1][1] == r.start:
                spans[-1][1] = r.end
            else:
                spans.append([r.start, r.end])
        return [tuple(x) for x in spans]

    def cleared(self, span: tuple[int, int]) -> None:
        """The dirty regions within span were cleared by a launch of the graph's own stream: free now (a later
        producer comes after that launch)."""
        for r in [r for r in self.live if r.state == "dirty" and span[0] <= r.start and r.end <= span[1]]:
            self.live.remove(r)

    def clearing(self, cleared_by) -> None:
        """The dirty regions' clear is recorded on a side branch (cleared_by: its event, to wait for)."""
        for r in self.live:
            if r.state == "dirty":
                r.state, r.cleared_by = "clearing", cleared_by

    def settle(self) -> None:
        """A new graph begins: what it records runs after every clear recorded so far, so none is waited for."""
        for r in self.live:
            r.cleared_by = None


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
