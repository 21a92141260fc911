"""The whole forward pass as one CUDA graph, with the dense/sparse decision taken on the device.

Per eligible conv layer the captured graph holds two nodes (docs/graphs.md):

    snn_select (1 thread)   reads the layer's zero counter, applies dispatch's rule from a float64 table
                            row (dispatch.selector_table), writes the branch for the trace and sets the
                            layer's SWITCH handle (cudaGraphSetConditional)
    SWITCH (branch)         body 0: the cuDNN convolution (torch, recorded on a side stream; its output
                            and cuDNN workspace come from a memory pool private to this graph) and the
                            conv's epilogue (bias, residual, ReLU, zero count: one snn_epilogue launch)
                            body b: the layer's b-th sparse kernel, writing into the same output tensor,
                            its epilogue fused into its store

The conditional node is added to torch's capture with cuda-python (cuStreamGetCaptureInfo ->
cuGraphAddNode -> cuStreamUpdateCaptureDependencies) and each body is recorded with
cuStreamBeginCaptureToGraph; torch (2.11) has no API for conditional nodes of its own.

A static layer (one kernel at any sparsity) is plain nodes; where it is a split read only by a later static
conv, it hands its epilogue to that conv (runtime/handoff.py), and a pre-activation (DenseNet's norm1) that only a
static conv reads is applied by that conv as it stages the batchnorm's input.

The zero counters are reset by a memset node at the start of the graph. Nothing is read on the host
inside a forward pass; after a replay the branches and counters are copied back once, when the trace is read.
A graph is captured per input shape (batch size) and replayed for every batch of that shape.

A pass with conditional nodes is recorded as two graphs, a short head (the first HEAD of the convs) and the rest,
replayed one after the other: the GPU starts a graph only once its launch has submitted every node (~0.1 ms for
ResNet-152 with a SWITCH a layer), so the rest's launch runs while the GPU runs the head. A pass of plain nodes
(every layer's kernel fixed, a 16-bit pass) launches in ~0.01-0.03 ms and is one graph up to ONE_GRAPH_MAX_CONVS
convs. `SNN_GRAPH_SPLIT=0`: one graph.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import os
import sys
import weakref
from dataclasses import dataclass

from . import branches, dispatch, handoff, pairs
from .cuda import check, import_torch
from .errors import RunError
from .executor import InputEpilogue, LayerTrace
from .kernels import counter_ptr, in_place_pitch, pixel_pitch
from .manifest import build_command

_PTR, _I64, _I32, _U64 = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_ulonglong
HEAD = 1 / 8   # the share of the convs the first graph holds: its GPU time must outlast the rest's launch
# the CUDA priority the pass's main chain is recorded at (a SWITCH's bodies and the sums' clears too, which the
# chain's next producers wait for), above the default (0, the least) that the side branches keep: torch
# instantiates a graph with its nodes' priorities (cudaGraphInstantiateFlagUseNodePriority), so where a side branch
# and the chain wait for the same kernel, the chain's blocks take the SMs it frees first and the branch fills the
# rest (docs/graphs.md, "Priorities")
MAIN_PRIORITY = -1
# a pass of plain nodes of up to this many convs is one graph (split_before says why)
ONE_GRAPH_MAX_CONVS = 160


def main_priority() -> int:
    """The main chain's stream priority: MAIN_PRIORITY, or 0 (every stream alike) with SNN_PRIORITIES=0."""
    return MAIN_PRIORITY if os.environ.get("SNN_PRIORITIES", "1") != "0" else 0


def split_before(convs: int, decides: bool = True) -> int | None:
    """The conv the second graph starts at (None: one graph), for a pass of `convs` convs; `decides`: whether it
    holds conditional nodes (a layer decided on the device), whose launch (~0.1 ms) is what the split hides. A
    graph of plain nodes launches in ~0.01-0.03 ms: up to ONE_GRAPH_MAX_CONVS convs the split cost more than it hid
    (ResNet-152 at batch 1 on the H200: a call 1.266 ms as one graph, 1.281-1.293 split), beyond it less
    (DenseNet-201: 1.197 / 1.196 ms split, 1.219 / 1.213 as one graph; docs/results/fusion/h200/call/)."""
    if convs < 2 or (not decides and convs <= ONE_GRAPH_MAX_CONVS) or os.environ.get("SNN_GRAPH_SPLIT", "1") == "0":
        return None
    return max(1, round(convs * HEAD))


class GraphUnavailable(RunError):
    """This torch, driver or cache cannot run the graph path; the message says why and what to do."""


class BodyUnsupported(RunError):
    """A SWITCH body recorded a node of a kind a conditional body may not hold (event record or wait,
    host, memory alloc/free nodes); `layer` is then captured dense, outside any SWITCH."""

    def __init__(self, msg: str, layer: str | None = None):
        super().__init__(msg)
        self.layer = layer


# node types a conditional node's body graph may hold (CUDA programming guide, conditional graph nodes)
_BODY_NODE_TYPES = ("KERNEL", "MEMSET", "MEMCPY", "EMPTY", "GRAPH", "CONDITIONAL")


def body_nodes(drv, graph) -> list[tuple[object, str]]:
    """(node, type name: KERNEL, MEMSET, ...) of every node of a captured body graph."""
    _, n = check(drv.cuGraphGetNodes(graph, 0), "cuGraphGetNodes")
    nodes, _ = check(drv.cuGraphGetNodes(graph, n), "cuGraphGetNodes") if n else ([], 0)
    return [(nd, check(drv.cuGraphNodeGetType(nd), "cuGraphNodeGetType").name.replace("CU_GRAPH_NODE_TYPE_", ""))
            for nd in list(nodes)[:n]]


# -- conditional nodes inside a torch capture, with cuda-python --------------------------------------

def capture_info(drv, torch):
    """(stream, graph, dependencies, edge data, count) of torch's capture on the current stream."""
    stream = drv.CUstream(torch.cuda.current_stream().cuda_stream)
    status, _id, graph, deps, edges, n = check(drv.cuStreamGetCaptureInfo(stream), "cuStreamGetCaptureInfo")
    if status != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
        raise RunError("internal: conditional nodes can only be added while torch captures a graph")
    return stream, graph, list(deps or [])[:n], (list(edges)[:n] if edges else None), n


def new_switch_handle(drv, torch, ctx, default: int):
    """A conditional handle of the graph being captured, reset to `default` at every launch (a value
    no body has: if the selector did not run, nothing runs)."""
    _, graph, _, _, _ = capture_info(drv, torch)
    return check(drv.cuGraphConditionalHandleCreate(graph, ctx, default, int(drv.CU_GRAPH_COND_ASSIGN_DEFAULT)),
                 "cuGraphConditionalHandleCreate")


@contextlib.contextmanager
def allocate_to(torch, pool):
    """Route this thread's allocations (on the current stream) to `pool`, as torch.cuda.use_mem_pool does,
    without its capture bookkeeping: that asks torch for the graph capturing the current stream, which a
    body capture is not (torch >= 2.12), and the pool lives with our Capture anyway. Enter it with the
    body's stream current: older torch filters on the stream current at entry."""
    C, dev = torch._C, torch.cuda.current_device()
    if hasattr(C, "_cuda_beginAllocateCurrentThreadToPool"):
        C._cuda_beginAllocateCurrentThreadToPool(dev, pool.id)
    elif hasattr(C, "_cuda_beginAllocateCurrentStreamToPool"):
        C._cuda_beginAllocateCurrentStreamToPool(dev, pool.id)
    else:  # pragma: no cover - no private hook: the public one
        with torch.cuda.use_mem_pool(pool):
            yield
        return
    try:
        yield
    finally:
        if hasattr(C, "_cuda_endAllocateToPool"):
            C._cuda_endAllocateToPool(dev, pool.id)
        else:
            C._cuda_endAllocateCurrentStreamToPool(dev, pool.id)
        C._cuda_releasePool(dev, pool.id)


def append_switch(drv, torch, ctx, handle, bodies, side, pools=None):
    """Append a SWITCH node over `bodies` (callables) to torch's capture on the current stream; body k is
    recorded by calling bodies[k]() with torch's current stream set to `side`, captured into the k-th
    branch graph. pools[k], if given, is a torch.cuda.MemPool that body k's allocations come from
    (a body capture is a capture sequence torch's graph pool does not know).
    The main capture continues after the node."""
    stream, graph, deps, edges, n = capture_info(drv, torch)
    params = drv.CUgraphNodeParams()
    params.type = drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle = handle
    params.conditional.type = drv.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_SWITCH
    params.conditional.size = len(bodies)
    params.conditional.ctx = ctx
    node = check(drv.cuGraphAddNode(graph, deps or None, edges, n, params), "cuGraphAddNode (SWITCH)")
    graphs = list(params.conditional.phGraph_out)[:len(bodies)]
    check(drv.cuStreamUpdateCaptureDependencies(
        stream, [node], None, 1, int(drv.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES)),
        "cuStreamUpdateCaptureDependencies")
    hside = drv.CUstream(side.cuda_stream)
    mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    for k, (body_graph, body) in enumerate(zip(graphs, bodies)):
        pool = pools[k] if pools else None
        check(drv.cuStreamBeginCaptureToGraph(hside, body_graph, None, None, 0, mode), "cuStreamBeginCaptureToGraph")
        try:
            with torch.cuda.stream(side), (allocate_to(torch, pool) if pool is not None else contextlib.nullcontext()):
                body()
        finally:
            check(drv.cuStreamEndCapture(hside), "cuStreamEndCapture (SWITCH body)")
        nodes = body_nodes(drv, body_graph)
        bad = sorted({t for _, t in nodes if t not in _BODY_NODE_TYPES})
        why = f"recorded {', '.join(bad)} node(s), which a conditional body cannot hold" if bad else None
        if why:
            # empty the body, so that the capture still ends and instantiates (it is thrown away)
            for nd, _ in nodes:
                check(drv.cuGraphDestroyNode(nd), "cuGraphDestroyNode")
            raise BodyUnsupported(f"SWITCH body {k} {why}")
    return node


def own_stream(torch, drv, owner, priority: int = 0):
    """A stream for the SWITCH bodies' captures that no one else uses. Not torch.cuda.Stream(): torch hands
    its streams out round-robin from a fixed pool, so after enough of them a "new" one can be the very
    stream torch.cuda.graph is capturing on, and a body capture begun on it fails (ILLEGAL_STATE; seen
    with a few engines captured in one process). Destroyed when `owner` is. `priority`: CUDA's (lower first)."""
    raw = check(drv.cuStreamCreateWithPriority(int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING), priority),
                "cuStreamCreateWithPriority")
    weakref.finalize(owner, drv.cuStreamDestroy, raw)
    return torch.cuda.ExternalStream(int(raw))


@contextlib.contextmanager
def _no_gc():
    """No cyclic garbage collection while a stream captures: since PyTorch 2.9 torch.cuda.graph no longer
    collects before capturing, and a collection inside the capture that frees an earlier CUDAGraph (a
    discarded attempt of the retry loop below, another runner's) calls cudaGraphDestroy, which a capturing
    stream forbids: the process aborts (pytorch/pytorch#161037). Collect first, then keep it off."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class _Layer:
    conv: object           # codegen.spec.ConvLayer
    slot: int              # zero counter index
    numel: int             # elements of the conv input (whole batch)
    table: dispatch.SelectorTable
    fixed: int | None = None  # the branch, when the table takes the same one at every sparsity
    kernel: str | None = None  # the kernel that ran it, where not the branch's own (a pair kernel: runtime/pairs.py)


class Capture:
    """State of one input shape's graph: counters, selector tables, branch record; used by
    Executor.forward(x, capture=...) while torch records the graph."""

    def __init__(self, runner: "GraphRunner", batch: int):
        torch = self.torch = runner.torch
        ex = self.ex = runner.executor
        self.runner, self.batch = runner, batch
        self.counters = torch.zeros(max(1, len(ex.slots)), dtype=torch.int64, device=ex.device)
        self.tables: dict[str, dispatch.SelectorTable] = {}
        if ex.cache is not None and ex.force != "dense":
            for name in ex.eligible - runner.dense_layers:
                t = dispatch.selector_table(ex.cache.layer_entry(name, batch), ex.force)
                if t is not None:
                    self.tables[name] = t
        rows, self.offsets = [], {}
        for name, t in sorted(self.tables.items()):
            self.offsets[name] = len(rows)
            rows += t.row()
        self.table_dev = torch.tensor(rows or [0.0], dtype=torch.float64, device=ex.device)
        self.choice = torch.zeros(max(1, len(self.tables)), dtype=torch.int32, device=ex.device)
        self.layers: list[_Layer] = []
        self.handoffs: dict[str, str] = {}   # producer conv -> the consumer that applies its epilogue (handoff.py)
        self.stored: set[str] = set()         # producers whose consumer also stores their value (in_out)
        self.preacts: dict[str, str] = {}     # pre-activation epilogue -> the conv that applies it (handoff.py)
        self._cleared = False                 # a sums region was cleared on the side branch (joined at the end)
        self._pending: dict[str, InputEpilogue] = {}
        self._regions: dict[str, handoff.Region] = {}   # consumer -> the sums region it reads
        self._last_read = None                # event after the latest consumer of a region (this graph's)
        self.sums = None
        self.pairs: dict[str, tuple[str, str]] = {}   # first conv -> (second conv, the pair kernel: pairs.py)
        self._paired: dict[str, tuple] = {}             # second conv -> (its value, the pair kernel that made it)
        self.branches: set[str] = set()       # convs recorded on the side branch (runtime/branches.py)
        self._forks: dict[str, tuple] = {}    # value on the side branch -> (its end, what stays referenced)
        self.joins: list[tuple[str, str | None]] = []  # (forked value, the op joining it; None: a split, the end)
        self._aliases = handoff.value_aliases(ex.ops)
        self.parts: _Parts | None = None      # set by GraphRunner: the graphs being recorded (None: no split)
        self._convs = 0                        # conv ops recorded so far (every conv: dense, 16-bit, decided)
        self._split_at = split_before(len(ex.convs), any(t.constant_branch() is None for t in self.tables.values()))
        self._prepare()
        self._plan_handoffs()
        self._plan_pairs()
        if branches.enabled() and self.tables:
            self.branches = branches.plan(ex.ops, ex.program.output)

    def _plan_handoffs(self):
        """Which splits hand their epilogue to the conv that reads them (runtime/handoff.py), and the buffer for
        their sums, made now (before the capture)."""
        ex = self.ex
        if not handoff.enabled() or not self.tables:
            return
        fixed = {name: ex.cache.kernel(t.kernel(b)) for name, t in self.tables.items()
                 if (b := t.constant_branch()) is not None}
        self.preacts = handoff.preactivations(ex.ops, ex.program.output, fixed)
        self.handoffs = handoff.plan(ex.ops, ex.program.output, fixed)
        self.stored = handoff.stored(ex.ops, self.handoffs)
        if self.handoffs:
            sizes = [self.batch * s.N * s.P * s.Q for s in (ex.convs[p].shape for p in self.handoffs)]
            capacity, batch_clear = handoff.Sums.capacity(sizes)
            self.sums = handoff.Sums(self.torch, capacity, ex.device, batch_clear)

    def _plan_pairs(self):
        """Which conv pairs run as one launch (runtime/pairs.py), each kept only where it measured faster than the
        two convs' own kernels (timed now, before the capture; once per distinct pair for the runner)."""
        ex = self.ex
        timings = getattr(self.runner, "pair_timings", None)
        if timings is None or not pairs.enabled() or not self.tables or not hasattr(ex.backend, "pair_conv"):
            return
        fixed = {name: t.kernel(b) for name, t in self.tables.items() if (b := t.constant_branch()) is not None}
        offered = {name: e["pair"] for name in fixed
                   if (e := ex.cache.layer_entry(name, self.batch)) is not None and e.get("pair")}
        if not offered:
            return
        planned = pairs.plan(ex.ops, ex.program.output, {n: ex.cache.kernel(k) for n, k in fixed.items()}, offered,
                             self.handoffs)
        handed = set(self.handoffs.values())
        for first, (second, kernels) in planned.items():
            k = timings.choose(first, second, kernels, fixed[first], fixed[second], self.batch, first in handed)
            if k is not None:
                self.pairs[first] = (second, k)

    def _prepare(self):
        """Everything that loads a module or allocates outside the graph's memory happens now."""
        ex, dev, torch = self.ex, self.runner.device, self.torch
        if not self.tables:
            return
        sel = self.runner.selector
        dev.function(sel["cubin"], sel["function"])
        for name, t in self.tables.items():
            for k in t.kernels:
                ex.prepare_sparse(name, k)  # weight layout, workspace, the bias epilogue's constants
                kentry = ex.cache.kernel(k)
                for step in kentry["steps"]:
                    if step.get("op") == "launch":
                        dev.function(kentry["cubin"], step["function"])
        self.side = own_stream(torch, dev.drv, self, main_priority())   # the SWITCH bodies: the main chain
        self.clear_stream = own_stream(torch, dev.drv, self, main_priority())   # the sums regions' clears
        self.branch_stream = own_stream(torch, dev.drv, self)  # convs beside the main chain (branches.py)
        self.pool = torch.cuda.MemPool()  # the dense bodies' outputs and cuDNN workspaces; lives with the graph
        self.ctx = check(dev.drv.cuCtxGetCurrent(), "cuCtxGetCurrent")

    # -- during capture ----------------------------------------------------------------------------
    def defer(self, op, inp, counters) -> bool:
        """Whether the epilogue op (a pre-activation: batchnorm + ReLU, counted into `counters` where not None) is
        left to the conv that reads it (handoff.preactivations), which then stages `inp` itself: no launch, and its
        value is `inp`. Only where the kernel can read inp where it lies (whole 16-byte vectors at its pitch)."""
        consumer = self.preacts.get(op.name)
        ld = pixel_pitch(inp)
        if consumer is None or ld is None or not in_place_pitch(inp, ld):
            return False
        a = op.attrs
        slot = a.get("slot") if counters is not None else None
        self._pending[consumer] = InputEpilogue(a["shift"], counters if slot is not None else None, slot,
                                                sums=inp, scale=a["scale"])
        return True

    def conv_op(self, op):
        """Every conv op of the pass comes here first, in program order: the second graph begins at the conv
        split_before names, whatever path the conv takes (a decided one, cuDNN's, 16 bits')."""
        if self.parts is not None and self._convs == self._split_at:
            self._split()
        self._convs += 1

    def reads(self, op):
        """Every op of the pass comes here before it is recorded: the side branch of a value it reads joins here."""
        for v in op.inputs:
            v = self._aliases.get(v, v)
            if v in self._forks:
                self._join(v, op.name)

    def conv(self, op, inp, epi, B, counters, trace, target=None):
        """The conv's nodes; its output, in `target` (a concat buffer's channel slice, zeroed) where every kernel
        the layer may run writes it there (the dense branch copies into it then), else a new tensor."""
        torch, ex = self.torch, self.ex
        conv = ex.convs[op.name]
        shape = conv.shape
        table = self.tables.get(op.name)
        if table is None:  # no kernels for this layer: always dense, no selector
            trace.append(LayerTrace(conv.index, conv.name, None, "dense", None, None))
            return ex.dense_conv(op, inp, epi)
        cl = torch.channels_last
        fixed = table.constant_branch()
        if op.name in self._paired:   # made by its pair's launch (runtime/pairs.py): nothing to record
            value, pk = self._paired.pop(op.name)
            self.layers.append(_Layer(conv, ex.slots[op.inputs[0]], inp.numel(), table, fixed, pk))
            trace.append(LayerTrace(conv.index, conv.name, None, "device", None, None))
            return value
        # its producer's epilogue (or a pre-activation), applied while staging: only a fixed layer gets one
        in_epi = self._pending.pop(op.name, None) if fixed is not None else None
        # the producer's raw sums (its value may be stored here), or the batchnorm's input where it lies
        inp = in_epi.sums if in_epi is not None else inp.contiguous(memory_format=cl)
        i = len(self.layers)
        slot = ex.slots[op.inputs[0]]
        self.layers.append(_Layer(conv, slot, inp.numel(), table, fixed))
        if fixed is not None:  # the same kernel at any sparsity: a plain launch, no selector, no SWITCH
            consumer = self.handoffs.get(op.name)
            N, P, Q = shape.N, shape.P, shape.Q
            kernel = table.kernel(fixed)

            def output(s):             # a new NHWC value of conv shape s
                return torch.empty(B, s.N, s.P, s.Q, device=inp.device, dtype=inp.dtype, memory_format=cl)
            if (op.name in self.branches and consumer is None and in_epi is None and target is None
                    and op.name not in self.pairs):   # beside the next convs, joined by its first reader
                value = output(shape)
                self._fork(op.name, lambda: ex.sparse_conv(op, kernel, inp, value, epi), (inp, value))
                trace.append(LayerTrace(conv.index, conv.name, None, "device", None, None))
                return value
            region = None
            if consumer is not None:   # raw sums into a region of the graph's buffer, for the consumer to finish
                region, waits, dirty = self.sums.take(B * N * P * Q)
                if dirty:              # read regions in the way, not cleared yet: clear them first
                    self._clear()
                    region, waits, _ = self.sums.take(B * N * P * Q)
                self._await(waits)
            # regions read by earlier consumers, cleared by this conv's launches where they can
            spans = self.sums.dirty() if self.sums is not None else []
            span = spans[0] if spans else None
            zero = self.sums.buf[span[0]:span[1]] if span else None
            pair = self.pairs.get(op.name)
            if pair is not None and (region is not None or target is not None or (in_epi is not None and (
                    in_epi.residual is not None or in_epi.out is not None or in_epi.scale is not None))):
                pair = None            # not as the pair kernel takes it: each conv on its own kernel
            if pair is not None:       # this conv and the next, which reads its value, in one launch
                second, pk = pair
                sop = ex.conv_op(second)
                value, value2 = output(shape), output(ex.convs[second].shape)
                cleared = ex.pair_conv(op, sop, pk, inp, value, value2, epi, ex.epilogue_of(sop, {}, counters),
                                       in_epi, zero)
                self._paired[second] = (value2, pk)
                self.layers[-1].kernel = pk
            elif region is not None:
                y = region.view.as_strided((B, N, P, Q), (P * Q * N, 1, Q * N, N))
                cleared = ex.sparse_conv(op, kernel, inp, y, epi, in_epi, into=y, zero=zero)
                # where later ops read the value, the consumer stores it here as it stages it
                value = output(shape) if op.name in self.stored else y
                self._pending[consumer] = InputEpilogue(epi.bias, epi.counters, epi.slot, epi.residual,
                                                        value if op.name in self.stored else None, y)
                self._regions[consumer] = region
            else:
                into = target is not None and ex.stores_slice(kernel, epi, target)
                value = target if into else output(shape)
                cleared = ex.sparse_conv(op, kernel, inp, value, epi, in_epi, zero=zero, zeroed=into)
            if cleared:
                self.sums.cleared(span)
            read = self._regions.pop(op.name, None)   # a handed-off producer's region (none for a pre-activation)
            if read is not None:
                self._read_done()
                if self.sums.consumed(read):
                    self._clear()      # read regions pile up: one fill beside the next convs
            trace.append(LayerTrace(conv.index, conv.name, None, "device", None, None))
            return value
        handle = self._new_handle(table.branches)
        self._select(i, counters, slot, inp.numel(), table, handle)
        into = target is not None and all(ex.stores_slice(k, epi, target) for k in table.kernels)
        out = {"y": target} if into else {}

        def dense():
            y = ex.dense_conv(op, inp, epi)
            if into:
                target.copy_(y)
            else:
                out["y"] = y if y.is_contiguous(memory_format=cl) else y.contiguous(memory_format=cl)

        bodies = [dense] + [lambda k=k: ex.sparse_conv(op, k, inp, out["y"], epi, zeroed=into) for k in table.kernels]
        try:
            self._switch(handle, bodies)
        except BodyUnsupported as e:
            raise BodyUnsupported(f"{conv.name}: {e}", conv.name) from None
        trace.append(LayerTrace(conv.index, conv.name, None, "device", None, None))
        return out["y"]

    def finish(self):
        """The end of the captured pass: the clears of the sums regions joined (every replay starts from zeros)."""
        assert not self._pending, f"handed-off epilogues never applied: {sorted(self._pending)}"
        assert not self._paired, f"pair kernels' second convs never reached: {sorted(self._paired)}"
        for v in list(self._forks):
            self._join(v, None)
        if self.sums is not None and self.sums.dirty():
            self._clear(self._last_read)   # beside the pass's tail, not after it
        if self._cleared:
            self.torch.cuda.current_stream().wait_stream(self.clear_stream)

    def _split(self):
        """End the graph recorded so far and record the rest into the next one. A side branch must join its own
        graph, and the next graph waits for nothing of the last one: it runs after it, so every clear is done."""
        for v in list(self._forks):
            self._join(v, None)
        if self._cleared:
            self.torch.cuda.current_stream().wait_stream(self.clear_stream)
            self._cleared = False
        if self.sums is not None:
            self.sums.settle()
        self._last_read = None                 # an event of the last graph: the next cannot wait for it
        self.parts.next()

    def _clear(self, after=None):
        """Zero the sums regions their consumers have read, on a side branch of the graph (it overlaps the next
        convs); the event marks that clear for the regions' next producers (`_await`). after: the event of the last
        of those consumers, where it is known, so that the clear need not wait for what was recorded since."""
        torch = self.torch
        if after is not None:
            self.clear_stream.wait_event(after)
        else:
            self.clear_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.clear_stream):
            for start, end in self.sums.dirty():
                self.sums.buf[start:end].zero_()
            done = torch.cuda.Event()
            done.record()
        self._cleared = True
        self.sums.clearing(done)

    def _read_done(self):
        """After a consumer of a sums region is recorded: the event the end's clear waits for (finish)."""
        self._last_read = self.torch.cuda.Event()
        self._last_read.record()

    def _fork(self, name, record, keep):
        """Record `record` (the conv `name`) on the side branch, after everything recorded so far; `keep` (its
        input and output) stays referenced until the join, so the graph's pool gives their memory to no node
        that could run beside it."""
        torch = self.torch
        self.branch_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.branch_stream):
            record()
            done = torch.cuda.Event()
            done.record()
        self._forks[name] = (done, keep)

    def _join(self, name, by):
        done, _ = self._forks.pop(name)
        self.torch.cuda.current_stream().wait_event(done)
        self.joins.append((name, by))

    def _await(self, events):
        for e in events:
            self.torch.cuda.current_stream().wait_event(e)

    def _select(self, i, counters, slot, numel, table, handle):
        sel, dev = self.runner.selector, self.runner.device
        row = self.table_dev.data_ptr() + 8 * self.offsets[self.layers[i].conv.name]
        args = [(counter_ptr(counters, slot), _PTR), (row, _PTR), (numel, _I64),
                (self.choice.data_ptr() + 4 * i, _PTR), (int(handle), _U64), (1, _I32)]
        dev.launch(sel["cubin"], sel["function"], (1, 1, 1), (32, 1, 1), 0, args, bool(sel.get("pdl")))

    def _new_handle(self, branches: int):
        return new_switch_handle(self.runner.device.drv, self.torch, self.ctx, branches)

    def _switch(self, handle, bodies):
        append_switch(self.runner.device.drv, self.torch, self.ctx, handle, bodies, self.side,
                      [self.pool] + [None] * (len(bodies) - 1))

    # -- after a replay ----------------------------------------------------------------------------
    def trace(self, captured: list[LayerTrace]) -> list[LayerTrace]:
        """The executor's trace with each device-dispatched layer's measured sparsity and branch."""
        if not self.layers:
            return list(captured)
        choice = self.choice.cpu().tolist()
        counters = self.counters.cpu().tolist()
        by_name = {}
        for i, lay in enumerate(self.layers):
            b = choice[i] if lay.fixed is None else lay.fixed
            by_name[lay.conv.name] = LayerTrace(lay.conv.index, lay.conv.name, counters[lay.slot] / lay.numel,
                                                "sparse" if b else "dense", lay.kernel or lay.table.kernel(b), None)
        return [by_name.get(t.name, t) for t in captured]


class _Parts:
    """The CUDA graphs one capture records in turn (Capture._split ends one and begins the next), sharing the
    first one's memory pool: they are replayed in the order recorded, as a shared pool requires."""

    def __init__(self, torch, keep: bool = False):
        self.torch, self.keep, self.graphs = torch, keep, []

    def _begin(self):
        g = self.torch.cuda.CUDAGraph(keep_graph=True) if self.keep else self.torch.cuda.CUDAGraph()
        g.capture_begin(pool=self.graphs[0].pool() if self.graphs else None)
        self.graphs.append(g)

    @contextlib.contextmanager
    def recording(self):
        """As torch.cuda.graph: free cached memory, then record on a side stream (at the main chain's priority)
        until the block ends."""
        torch = self.torch
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        with torch.cuda.stream(torch.cuda.Stream(priority=main_priority())):
            self._begin()
            try:
                yield self
            finally:
                self.graphs[-1].capture_end()

    def next(self):
        self.graphs[-1].capture_end()
        self._begin()

    def replay(self):
        for g in self.graphs:
            g.replay()


@dataclass
class _Graph:
    graph: object          # _Parts, or anything with replay()
    x: object
    out: object
    capture: Capture
    trace: list


class GraphRunner:
    """Executor.forward as one CUDA graph per input shape. `forward(x)` captures on the first call for
    x's shape, then only copies x in and replays; the branches are read back for the trace when it is read.
    pair_kernels=False: no pair kernels (runtime/pairs.py), as calibrate's in-graph trials run."""

    def __init__(self, executor, device, pair_kernels: bool = True):
        torch = self.torch = import_torch()
        self.executor, self.device = executor, device
        self.captures = 0
        # pair kernels timed against their convs' own (runtime/pairs.py); None: every conv on its own kernel
        self.pair_timings = pairs.Timings(executor) if pair_kernels else None
        self._graphs: dict[tuple, _Graph] = {}
        self.dense_layers: set[str] = set()  # layers whose dense body a SWITCH cannot hold: plain cuDNN nodes
        self.notes: list[str] = []
        self.selector = None
        if executor.cache is not None and executor.force != "dense":
            missing = [n for n in ("MemPool", "use_mem_pool") if not hasattr(torch.cuda, n)]
            drv = device.drv
            missing += [n for n in ("cuGraphConditionalHandleCreate", "cuStreamBeginCaptureToGraph")
                        if not hasattr(drv, n)]
            if missing:
                raise GraphUnavailable(f"this PyTorch ({torch.__version__}) / cuda-python lacks {', '.join(missing)} "
                                       "(CUDA graph conditional nodes need CUDA >= 12.8 and torch.cuda.MemPool); "
                                       "run with --no-graph")
            self.selector = executor.cache.data.get("selector")
            if not self.selector:
                c = executor.cache
                raise GraphUnavailable(f"{c.path}: no device-side selector (snn_select) in this cache; rebuild "
                                       f"with: {build_command(c.spec_path, c.gpu, max(c.batches))} "
                                       "(or run with --no-graph)")

    def forward(self, x):
        key = (tuple(x.shape), x.dtype)
        st = self._graphs.get(key)
        if st is None:
            st = self._capture(x)
            self._graphs[key] = st
        st.x.copy_(x)
        st.graph.replay()
        # read back (one copy, after the whole forward) only when someone asks: the next replay replaces it
        self.executor.last_trace = functools.partial(st.capture.trace, st.trace)
        return st.out.clone()

    __call__ = forward

    def _dot(self, g, path: str):
        drv = self.device.drv
        flags = int(drv.CUgraphDebugDot_flags.CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE)
        check(drv.cuGraphDebugDotPrint(drv.CUgraph(g.raw_cuda_graph()), path.encode(), flags), "cuGraphDebugDotPrint")
        print(f"snn: captured graph written to {path}", file=sys.stderr, flush=True)

    def replayer(self, x):
        """Copy x into its shape's captured graph (captured already) and return that graph's replay:
        the GPU work alone, without the copy in or the read back (for timing it)."""
        st = self._graphs[(tuple(x.shape), x.dtype)]
        st.x.copy_(x)
        return st.graph.replay

    def capture_for(self, x) -> Capture | None:
        st = self._graphs.get((tuple(x.shape), x.dtype))
        return st.capture if st else None

    def _capture(self, x) -> _Graph:
        torch, ex = self.torch, self.executor
        static_x = torch.empty(x.shape, dtype=x.dtype, device=ex.device)
        static_x.copy_(x)
        # warm-up outside the graph, on a side stream (torch's advice): cuDNN plans and handles for the
        # dense path of every layer, our modules, the lazily made weight layouts and workspaces
        cur = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            force = ex.force
            try:
                ex.force = "dense"
                ex.forward(static_x)
            finally:
                ex.force = force
            ex.forward(static_x)
        cur.wait_stream(side)
        torch.cuda.synchronize()
        dot = os.environ.get("SNN_GRAPH_DOT")  # debugging: the captured graph as DOT, before instantiation
        while True:
            cap = Capture(self, static_x.shape[0])
            g = cap.parts = _Parts(torch, keep=bool(dot))
            try:
                with _no_gc(), g.recording():
                    out = ex.forward(static_x, capture=cap)
                    cap.finish()
                if dot:
                    for k, part in enumerate(g.graphs):
                        self._dot(part, f"{dot}.b{static_x.shape[0]}" + (f".part{k}" if k else "") + ".dot")
                        part.instantiate()
                break
            except BodyUnsupported as e:  # capture again with that layer dense outside any SWITCH
                if e.layer is None or e.layer in self.dense_layers:
                    raise RunError(f"capturing the forward pass as a CUDA graph failed: {e}; run with --no-graph") from None
                self.dense_layers.add(e.layer)
                self.notes.append(f"{e}: captured dense, without a device-side decision")
            except RunError as e:
                raise RunError(f"capturing the forward pass as a CUDA graph failed: {e}; run with --no-graph") from None
        self.captures += 1
        return _Graph(g, static_x, out, cap, list(ex.last_trace))
