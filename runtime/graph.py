"""The whole forward pass as one CUDA graph, with the dense/sparse decision taken on the device.

Per eligible conv layer the captured graph holds (docs/graphs.md):

    snn_select (1 thread)  reads the layer's zero counter, applies dispatch's rule from a float64 table
                           (dispatch.selector_table), writes the branch, the dense predicate, and sets
                           the SWITCH node's handle (cudaGraphSetConditional)
    IF   (dense predicate)   body: the cuDNN convolution (captured by torch: begin_capture_to_if_node,
                           so its output and cuDNN workspace come from the graph's memory pool)
    SWITCH (branch - 1)    body k: the steps of the layer's k-th sparse kernel, writing into the same
                           output tensor as the dense body (+ the bias epilogue where the conv has a bias)

The zero counters are reset by a memset node at the start of the graph. Nothing is read on the host
inside a forward pass; after a replay the branches and counters are copied back once for the trace.
A graph is captured per batch size and replayed for every batch of that size; shapes are the only
thing that triggers a new capture.

mode="if" builds one torch IF node per branch instead of the SWITCH (more nodes; kept as a fallback
and as a baseline for docs/graphs.md).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from . import dispatch
from .cuda import check, import_torch
from .errors import RunError
from .executor import LayerTrace
from .manifest import build_command

MODES = ("switch", "if")
_PTR, _I64, _I32, _U64 = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_ulonglong


class GraphUnavailable(RunError):
    """This torch or this cache cannot run the graph path; the message says why and what to do."""


def conditional_nodes_supported(torch) -> bool:
    return hasattr(getattr(torch.cuda, "CUDAGraph", object), "begin_capture_to_if_node")


@dataclass
class _Layer:
    conv: object           # codegen.spec.ConvLayer
    slot: int              # zero counter index
    numel: int             # elements of the conv input (whole batch)
    table: dispatch.SelectorTable


class Capture:
    """State of one batch size's graph: counters, selector tables, branch record; used by
    Executor.forward(x, capture=...) while torch records the graph."""

    def __init__(self, runner: "GraphRunner", batch: int, mode: str):
        torch = self.torch = runner.torch
        ex = self.ex = runner.executor
        self.runner, self.batch, self.mode = runner, batch, mode
        self.graph = None
        self.counters = torch.zeros(max(1, len(ex.slots)), dtype=torch.int64, device=ex.device)
        self.tables: dict[str, dispatch.SelectorTable] = {}
        if ex.cache is not None and ex.force != "dense":
            for name in ex.eligible:
                t = dispatch.selector_table(ex.cache.layer_entry(name, batch), ex.force)
                if t is not None:
                    self.tables[name] = t
        rows, self.offsets = [], {}
        for name, t in sorted(self.tables.items()):
            self.offsets[name] = len(rows)
            rows += t.row()
        self.table_dev = torch.tensor(rows or [0.0], dtype=torch.float64, device=ex.device)
        n = max(1, len(self.tables))
        width = max([t.branches for t in self.tables.values()] or [1])
        self.preds = torch.zeros((n, width), dtype=torch.bool, device=ex.device)
        self.choice = torch.zeros(n, dtype=torch.int32, device=ex.device)
        self.layers: list[_Layer] = []
        self._prepare()

    def _prepare(self):
        """Everything that allocates or loads a module happens now, not inside a conditional body."""
        ex, dev = self.ex, self.runner.device
        if not self.tables:
            return
        sel = self.runner.selector
        dev.function(sel["cubin"], sel["function"])
        for name, t in self.tables.items():
            op = next(o for o in ex.ops if o.kind == "conv" and o.name == name)
            if op.attrs["bias"] is not None:
                ex.backend._const(1.0, ex.convs[name].shape.N)
            for k in t.kernels:
                kentry = ex.cache.kernel(k)
                ex._weight_in(name, kentry.get("weight_layout", "NCRS"))
                ex._workspace(k, kentry)
                for step in kentry["steps"]:
                    if step.get("op") == "launch":
                        dev.function(kentry["cubin"], step["function"])
        self.side = self.torch.cuda.Stream()
        if self.mode == "switch":
            self.ctx = check(dev.drv.cuCtxGetCurrent(), "cuCtxGetCurrent")

    # -- during capture ----------------------------------------------------------------------------
    def conv(self, op, inp, B, counters, trace):
        torch, ex = self.torch, self.ex
        F = torch.nn.functional
        conv = ex.convs[op.name]
        shape = conv.shape
        table = self.tables.get(op.name)
        if table is None:  # no kernels for this layer: always dense, no selector
            trace.append(LayerTrace(conv.index, conv.name, None, "dense", None, None))
            return F.conv2d(inp, op.attrs["weight"], op.attrs["bias"], shape.stride, shape.padding)
        cl = torch.channels_last
        inp = inp.contiguous(memory_format=cl)
        i = len(self.layers)
        slot = ex.slots[op.inputs[0]]
        self.layers.append(_Layer(conv, slot, inp.numel(), table))
        handle = self._new_handle(len(table.kernels)) if self.mode == "switch" else None
        self._select(i, counters, slot, inp.numel(), table, handle)

        g = self.graph
        g.begin_capture_to_if_node(self.preds[i, 0])
        y = F.conv2d(inp, op.attrs["weight"], op.attrs["bias"], shape.stride, shape.padding)
        if not y.is_contiguous(memory_format=cl):
            y = y.contiguous(memory_format=cl)
        g.end_capture_to_conditional_node()

        runs = [lambda k=k: self._sparse(op, k, inp, y) for k in table.kernels]
        if self.mode == "switch":
            self._switch(handle, runs)
        else:
            for b, run in enumerate(runs, 1):
                g.begin_capture_to_if_node(self.preds[i, b])
                run()
                g.end_capture_to_conditional_node()
        trace.append(LayerTrace(conv.index, conv.name, None, "device", None, None))
        return y

    def _sparse(self, op, kernel, inp, out):
        ex = self.ex
        kentry = ex.cache.kernel(kernel)
        w = ex._weight_in(op.name, kentry.get("weight_layout", "NCRS"))
        ex.backend.sparse_conv(kernel, kentry, inp, w, out, ex._workspace(kernel, kentry), ex.convs[op.name].shape)
        if op.attrs["bias"] is not None:
            ex.backend.epilogue(out, None, op.attrs["bias"], None, out, None, None, False)

    def _select(self, i, counters, slot, numel, table, handle):
        sel, dev = self.runner.selector, self.runner.device
        row = self.table_dev.data_ptr() + 8 * self.offsets[self.layers[i].conv.name]
        npreds = 1 if self.mode == "switch" else table.branches
        args = [(counters.data_ptr() + 8 * slot, _PTR), (row, _PTR), (numel, _I64),
                (self.preds[i].data_ptr(), _PTR), (npreds, _I32), (self.choice[i].data_ptr(), _PTR),
                (int(handle) if handle is not None else 0, _U64), (1 if handle is not None else 0, _I32),
                (len(table.kernels), _I32)]
        dev.launch(sel["cubin"], sel["function"], (1, 1, 1), (32, 1, 1), 0, args)

    def _capture_info(self):
        drv = self.runner.device.drv
        stream = drv.CUstream(self.torch.cuda.current_stream().cuda_stream)
        status, _id, graph, deps, edges, n = check(drv.cuStreamGetCaptureInfo(stream), "cuStreamGetCaptureInfo")
        if status != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
            raise RunError("internal: the SWITCH node must be added while torch captures the graph")
        return stream, graph, deps, edges, n

    def _new_handle(self, variants: int):
        drv = self.runner.device.drv
        _, graph, _, _, _ = self._capture_info()
        # reset to `variants` (= no body) at every launch: a selector that did not run selects nothing
        return check(drv.cuGraphConditionalHandleCreate(graph, self.ctx, variants,
                                                         int(drv.CU_GRAPH_COND_ASSIGN_DEFAULT)),
                     "cuGraphConditionalHandleCreate")

    def _switch(self, handle, runs):
        """Append a SWITCH node to torch's capture and record body k by running runs[k] on a side
        stream captured into it (cuStreamBeginCaptureToGraph); the main capture continues after it."""
        torch, drv = self.torch, self.runner.device.drv
        stream, graph, deps, edges, n = self._capture_info()
        params = drv.CUgraphNodeParams()
        params.type = drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = handle
        params.conditional.type = drv.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_SWITCH
        params.conditional.size = len(runs)
        params.conditional.ctx = self.ctx
        node = check(drv.cuGraphAddNode(graph, list(deps)[:n] if n else None, list(edges)[:n] if (n and edges) else None,
                                        n, params), "cuGraphAddNode (SWITCH)")
        bodies = list(params.conditional.phGraph_out)[:len(runs)]
        check(drv.cuStreamUpdateCaptureDependencies(
            stream, [node], None, 1,
            int(drv.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES)),
            "cuStreamUpdateCaptureDependencies")
        side = drv.CUstream(self.side.cuda_stream)
        mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        for body, run in zip(bodies, runs):
            check(drv.cuStreamBeginCaptureToGraph(side, body, None, None, 0, mode), "cuStreamBeginCaptureToGraph")
            try:
                with torch.cuda.stream(self.side):
                    run()
            finally:
                check(drv.cuStreamEndCapture(side), "cuStreamEndCapture (SWITCH body)")

    # -- after a replay ----------------------------------------------------------------------------
    def trace(self, captured: list[LayerTrace]) -> list[LayerTrace]:
        """The executor's trace with each device-dispatched layer's measured sparsity and branch."""
        if not self.layers:
            return list(captured)
        choice = self.choice.cpu().tolist()
        counters = self.counters.cpu().tolist()
        by_name = {}
        for i, lay in enumerate(self.layers):
            b = choice[i]
            by_name[lay.conv.name] = LayerTrace(lay.conv.index, lay.conv.name, counters[lay.slot] / lay.numel,
                                                "sparse" if b else "dense", lay.table.kernel(b), None)
        return [by_name.get(t.name, t) for t in captured]

    def branches(self) -> dict[str, int]:
        """Layer name -> branch taken in the last replay (0 dense, b >= 1 the table's kernel b - 1)."""
        choice = self.choice.cpu().tolist()
        return {lay.conv.name: choice[i] for i, lay in enumerate(self.layers)}


@dataclass
class _Graph:
    graph: object
    x: object
    out: object
    capture: Capture
    trace: list


class GraphRunner:
    """Executor.forward as one CUDA graph per batch size. `forward(x)` captures on the first call for
    x's shape, then only copies x in, replays, and reads the branches back for the trace."""

    def __init__(self, executor, device, mode: str = "switch"):
        if mode not in MODES:
            raise RunError(f"graph mode must be one of {', '.join(MODES)}, got {mode!r}")
        torch = self.torch = import_torch()
        self.executor, self.device, self.mode = executor, device, mode
        self.captures = 0
        self.fallback: str | None = None
        self._graphs: dict[tuple, _Graph] = {}
        self.selector = None
        if executor.cache is not None and executor.force != "dense":
            if not conditional_nodes_supported(torch):
                raise GraphUnavailable(f"this PyTorch ({torch.__version__}) cannot capture CUDA graph conditional nodes "
                               "(CUDAGraph.begin_capture_to_if_node, PyTorch >= 2.7 built with CUDA >= 12.4); "
                               "run with --no-graph")
            self.selector = executor.cache.data.get("selector")
            if not self.selector:
                c = executor.cache
                raise GraphUnavailable(f"{c.path}: no device-side selector (snn_select) in this cache; rebuild with: "
                                 f"{build_command(c.spec_path, c.gpu, max(c.batches))} (or run with --no-graph)")

    def forward(self, x):
        torch = self.torch
        key = (tuple(x.shape), x.dtype)
        st = self._graphs.get(key)
        if st is None:
            st = self._capture(x)
            self._graphs[key] = st
        st.x.copy_(x)
        st.graph.replay()
        self.executor.last_trace = st.capture.trace(st.trace)  # one copy back, after the whole forward
        return st.out.clone()

    __call__ = forward

    def capture_for(self, x) -> Capture | None:
        st = self._graphs.get((tuple(x.shape), x.dtype))
        return st.capture if st else None

    def _capture(self, x) -> _Graph:
        torch, ex = self.torch, self.executor
        static_x = torch.empty(x.shape, dtype=x.dtype, device=ex.device)
        static_x.copy_(x)
        # warm-up outside the graph (torch's advice, on a side stream): cuDNN plans and handles for the
        # dense path of every layer, our modules, the lazily allocated weights and workspaces
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
        try:
            return self._record(static_x, self.mode)
        except (RunError, RuntimeError) as e:
            if self.mode != "switch":
                raise
            # the hand-built SWITCH failed on this driver/binding: fall back to torch's IF nodes
            self.fallback = f"{type(e).__name__}: {e}"
            self.mode = "if"
            torch.cuda.synchronize()
            return self._record(static_x, "if")

    def _record(self, static_x, mode) -> _Graph:
        torch, ex = self.torch, self.executor
        cap = Capture(self, static_x.shape[0], mode)
        g = torch.cuda.CUDAGraph()
        cap.graph = g
        try:
            with torch.cuda.graph(g):
                out = ex.forward(static_x, capture=cap)
        finally:
            ex._capture = None
        trace = list(ex.last_trace)
        self.captures += 1
        return _Graph(g, static_x, out, cap, trace)
