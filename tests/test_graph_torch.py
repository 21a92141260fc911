"""The executor's capture hook and runtime.graph.Capture's wiring, on the CPU (torch, no CUDA).

A CPU stand-in replaces only what needs a GPU: the selector launch (dispatch.select on the host, which
the GPU test holds equal to the kernel) and the SWITCH node (body 0, the dense conv that allocates the
output, is recorded, i.e. run, always; then the chosen sparse body, if any). Everything else is graph.Capture's own code: the tables, the
zeroed counters, the per-layer bookkeeping, the bodies with their epilogues, the trace.
Skips without torch."""
import pytest

torch = pytest.importorskip("torch")

from snn.runtime import dispatch, executor, graph, weights  # noqa: E402
from test_runtime_torch import fake_cache, rel_err, tiny  # noqa: E402,F401


class CpuCapture(graph.Capture):
    def _prepare(self):
        pass

    def _clear(self, after=None):  # one stream on the CPU: cleared at once, as the side branch does before reuse
        self.clears_after = getattr(self, "clears_after", []) + [after]
        self.side_cleared = getattr(self, "side_cleared", 0) + sum(r.state == "dirty" for r in self.sums.live)
        for span in self.sums.dirty():
            self.sums.buf[span[0]:span[1]].zero_()
            self.sums.cleared(span)

    def _await(self, events):
        assert events == []

    def _read_done(self):
        self.reads_done = getattr(self, "reads_done", 0) + 1
        self._last_read = ("read", self.reads_done)

    def _fork(self, name, record, keep):  # one stream on the CPU: recorded at once, joined later
        record()
        self._forks[name] = (None, keep)

    def _join(self, name, by):
        self._forks.pop(name)
        self.joins.append((name, by))

    def _select(self, i, counters, slot, numel, table, handle):
        b = dispatch.select(table, int(counters[slot]), numel)
        assert self.table_dev[self.offsets[self.layers[i].conv.name]].item() == table.threshold
        self.choice[i] = b
        assert handle == ("handle", table.branches)

    def _new_handle(self, branches):
        return ("handle", branches)

    def conv(self, op, inp, epi, B, counters, trace, target=None):
        self.target = target
        return super().conv(op, inp, epi, B, counters, trace, target)

    def _switch(self, handle, bodies):
        assert len(bodies) == handle[1]
        self.bodies.append(len(bodies))
        b = int(self.choice[len(self.layers) - 1])
        before = self.counters.clone()
        target = self.target.clone() if self.target is not None else None
        bodies[0]()
        if b:  # on the GPU only the chosen body runs: its epilogue counts, body 0's must not have, nor its copy
            self.counters.copy_(before)   # into a concat's slice
            if target is not None:
                self.target.copy_(target)
            bodies[b]()


class Runner:
    def __init__(self, ex):
        self.torch, self.executor, self.device, self.selector = torch, ex, None, {"cubin": "x", "function": "snn_select"}
        self.dense_layers = set()


@pytest.mark.parametrize("force,threshold", [("auto", 0.5), ("auto", 0.0), ("sparse", 0.5), ("dense", 0.5)])
def test_capture_hook_dispatches_like_choose(tiny, force, threshold):
    sd = weights.random_init(tiny, seed=3)
    x = torch.randn(2, 3, 20, 20)
    cache = fake_cache(tiny, threshold=threshold)
    be = executor.TorchBackend()
    ex = executor.Executor(tiny, sd, be, cache, device="cpu", force=force)
    ref = executor.reference(tiny, sd, x.double())
    cap = CpuCapture(Runner(ex), 2)
    cap.bodies = []
    cap.counters.fill_(12345)  # stale counts from a previous forward: the capture must zero them
    y = ex.forward(x, capture=cap)
    assert rel_err(y, ref) < 1e-5
    tr = cap.trace(ex.last_trace)
    assert [t.name for t in tr] == [c.name for c in tiny.convs]
    if force == "dense":
        assert not cap.layers and all(t.path == "dense" for t in tr)
        return
    assert {lay.conv.name for lay in cap.layers} == ex.eligible
    assert cap.bodies == [lay.table.branches for lay in cap.layers]  # one SWITCH per layer: dense + kernels
    measured = [t for t in tr if t.sparsity is not None]
    assert len(measured) == len(ex.eligible)
    for t in measured:
        assert t.kernel == dispatch.choose(cache.layer_entry(t.name, 2), t.sparsity, force)
    assert be.sparse_calls == [t.kernel for t in tr if t.kernel]  # only the chosen SWITCH bodies ran
    if force == "sparse" or threshold == 0.0:
        assert be.sparse_calls
    captured = len(cap.layers)
    ex.forward(x)  # the capture lasts one forward: a later eager pass does not reach it
    assert len(cap.layers) == captured
    # the same counts as the eager pass
    ex2 = executor.Executor(tiny, sd, executor.TorchBackend(), cache, device="cpu", force=force)
    ex2.forward(x)
    assert {t.name: t.sparsity for t in ex2.last_trace if t.sparsity is not None} == \
        {t.name: t.sparsity for t in measured}


def test_static_layers_launch_their_kernel_without_selector_or_switch(tiny):
    """Calibrated 'sparse always wins' layers (static_kernel): one plain launch in the graph."""
    sd = weights.random_init(tiny, seed=3)
    x = torch.randn(2, 3, 20, 20)
    cache = fake_cache(tiny, threshold=0.4)
    statics = set()
    for i, c in enumerate(tiny.convs):
        if i % 2:
            entry = cache.layer_entry(c.name, 2)
            entry["static_kernel"] = entry["levels"]["0.40"]["kernel"]
            statics.add(c.name)
    be = executor.TorchBackend()
    ex = executor.Executor(tiny, sd, be, cache, device="cpu", force="auto")
    assert statics & ex.eligible  # the test means something only if some static layers are dispatched

    class NoDecision(CpuCapture):
        def _select(self, i, counters, slot, numel, table, handle):
            assert self.layers[i].conv.name not in statics
            super()._select(i, counters, slot, numel, table, handle)

    cap = NoDecision(Runner(ex), 2)
    cap.bodies = []
    y = ex.forward(x, capture=cap)
    assert rel_err(y, executor.reference(tiny, sd, x.double())) < 1e-5
    assert len(cap.bodies) == len(ex.eligible - statics)  # a SWITCH only where something is decided
    tr = {t.name: t for t in cap.trace(ex.last_trace)}
    for name in statics & ex.eligible:
        entry = cache.layer_entry(name, 2)
        assert tr[name].path == "sparse" and tr[name].kernel == entry["static_kernel"]
        assert dispatch.choose(entry, tr[name].sparsity) == entry["static_kernel"]
        assert entry["static_kernel"] in be.sparse_calls


@pytest.mark.parametrize("threshold,static", [(0.4, False), (0.4, True), (1.1, False)])
def test_a_dense_blocks_conv2_writes_its_slice_in_the_graph(threshold, static):
    """DenseNet's conv2 in the captured pass: every kernel of the layer takes out_ld, so each body writes the
    block buffer's slice (a sparse split adds into it, zeroed when the buffer was made; the dense body copies its
    result in), a static layer's one launch too; the result matches float64 whichever body runs."""
    from test_lower import DENSE, SliceRecorder
    from snn.codegen.spec import parse_spec
    net = parse_spec(DENSE, "dense.yaml")
    sd = weights.random_init(net, seed=6)
    x = torch.randn(2, 3, 12, 12)
    cache = fake_cache(net, threshold=threshold, split=True, out_ld=True)
    if static:
        for c in net.convs:
            entry = cache.layer_entry(c.name, 2)
            entry["static_kernel"] = entry["levels"]["0.40"]["kernel"]
    be = SliceRecorder(torch.float64)
    ex = executor.Executor(net, sd, be, cache, device="cpu", force="auto")
    cap = CpuCapture(Runner(ex), 2)
    cap.bodies = []
    y = ex.forward(x, capture=cap)
    assert rel_err(y, executor.reference(net, sd, x.double())) < 1e-5
    tr = {t.name: t for t in cap.trace(ex.last_trace)}
    sparse = [i for i in (1, 2, 3) if tr[f"l{i}.conv2"].path == "sparse"]
    assert all(be.outs[f"l{i}.conv2"] == (26, True) for i in sparse)
    assert len(sparse) == (3 if threshold < 1 or static else 0)


def test_runner_needs_the_selector_in_the_cache(tiny):
    """An older manifest (no snn_select) makes the graph path unavailable with the rebuild command;
    a dense-only run needs no selector."""
    drv = pytest.importorskip("cuda.bindings.driver")

    class Dev:
        pass
    dev = Dev()
    dev.drv = drv
    sd = weights.random_init(tiny, seed=3)
    cache = fake_cache(tiny)
    ex = executor.Executor(tiny, sd, executor.TorchBackend(), cache, device="cpu", force="auto")
    with pytest.raises(graph.GraphUnavailable, match="snn-codegen build tiny.yaml --gpu fake --batch 2"):
        graph.GraphRunner(ex, dev)
    cache.data["selector"] = {"cubin": "/x.cubin", "function": "snn_select"}
    assert graph.GraphRunner(ex, dev).selector["function"] == "snn_select"
    exd = executor.Executor(tiny, sd, executor.TorchBackend(), fake_cache(tiny), device="cpu", force="dense")
    assert graph.GraphRunner(exd, dev).selector is None


def test_append_switch_calls_the_driver_in_order():
    """The cuda-python sequence of graph.append_switch / new_switch_handle against a recording driver
    whose functions take exactly the real bindings' parameters (read from cuda.bindings' signatures) and
    whose node-params object only accepts the real struct's field names."""
    real = pytest.importorskip("cuda.bindings.driver")
    import contextlib
    import inspect
    import re
    from types import SimpleNamespace

    calls = []

    def nparams(name):
        first = getattr(real, name).__doc__.strip().splitlines()[0]
        return len([p for p in re.match(r"\w+\((.*)\)", first).group(1).split(",") if p.strip()])

    class Strict(SimpleNamespace):
        fields: tuple = ()

        def __setattr__(self, k, v):
            assert k in self.fields, f"no field {k!r} in the real struct"
            super().__setattr__(k, v)

    class Cond(Strict):
        fields = tuple(a for a in dir(real.CUgraphNodeParams().conditional) if not a.startswith("_"))

    class Params(Strict):
        fields = tuple(a for a in dir(real.CUgraphNodeParams()) if not a.startswith("_"))

        def __init__(self):
            object.__setattr__(self, "conditional", Cond())

    def rec(name, ret):
        def f(*args):
            assert len(args) == nparams(name), (name, len(args), nparams(name))
            calls.append((name, args))
            return ret(*args) if callable(ret) else ret
        return f

    active = real.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE

    def add_node(graph, deps, edges, n, params):
        assert params.type == real.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        assert params.conditional.type == real.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_SWITCH
        assert deps == ["dep"] and n == 1
        object.__setattr__(params.conditional, "phGraph_out", [f"body{k}" for k in range(params.conditional.size)])
        return (0, "node")

    T = real.CUgraphNodeType
    graphs = {"body0": [("k0", T.CU_GRAPH_NODE_TYPE_KERNEL)], "body1": [],
              "body2": [("m0", T.CU_GRAPH_NODE_TYPE_MEMSET), ("k2", T.CU_GRAPH_NODE_TYPE_KERNEL)]}
    types = {nd: t for lst in graphs.values() for nd, t in lst}

    def get_nodes(g, n):
        lst = [nd for nd, _ in graphs[g]]
        return (0, lst[:n] if n else None, len(lst))

    def destroy(nd):
        for lst in graphs.values():
            lst[:] = [x for x in lst if x[0] != nd]
        return (0,)

    drv = SimpleNamespace(
        cuGraphGetNodes=rec("cuGraphGetNodes", get_nodes),
        cuGraphNodeGetType=rec("cuGraphNodeGetType", lambda nd: (0, types[nd])),
        cuGraphDestroyNode=rec("cuGraphDestroyNode", destroy),
        CUstream=lambda s: ("stream", s), CUstreamCaptureStatus=real.CUstreamCaptureStatus,
        CUgraphNodeType=real.CUgraphNodeType, CUgraphConditionalNodeType=real.CUgraphConditionalNodeType,
        CUstreamUpdateCaptureDependencies_flags=real.CUstreamUpdateCaptureDependencies_flags,
        CUstreamCaptureMode=real.CUstreamCaptureMode, CU_GRAPH_COND_ASSIGN_DEFAULT=real.CU_GRAPH_COND_ASSIGN_DEFAULT,
        CUgraphNodeParams=Params,
        cuStreamGetCaptureInfo=rec("cuStreamGetCaptureInfo", (0, active, 1, "graph", ["dep"], None, 1)),
        cuGraphConditionalHandleCreate=rec("cuGraphConditionalHandleCreate", (0, "handle")),
        cuGraphAddNode=rec("cuGraphAddNode", add_node),
        cuStreamUpdateCaptureDependencies=rec("cuStreamUpdateCaptureDependencies", (0,)),
        cuStreamBeginCaptureToGraph=rec("cuStreamBeginCaptureToGraph", (0,)),
        cuStreamEndCapture=rec("cuStreamEndCapture", (0, "g")))
    state = {"stream": "main", "pool": None}

    @contextlib.contextmanager
    def stream(s):
        old, state["stream"] = state["stream"], s
        yield
        state["stream"] = old

    def begin(dev, pool_id):
        assert state["stream"] is side and dev == 0  # the body's stream is current when routing starts
        state["pool"] = pool_id

    def end(dev, pool_id):
        assert state["pool"] == pool_id
        state["pool"] = None

    fake_torch = SimpleNamespace(
        cuda=SimpleNamespace(current_stream=lambda: SimpleNamespace(cuda_stream=state["stream"]), stream=stream,
                             current_device=lambda: 0),
        _C=SimpleNamespace(_cuda_beginAllocateCurrentThreadToPool=begin, _cuda_endAllocateToPool=end,
                           _cuda_releasePool=lambda dev, pool_id: calls.append(("release", pool_id))))
    h = graph.new_switch_handle(drv, fake_torch, "ctx", 3)
    assert h == "handle" and calls[-1][1] == ("graph", "ctx", 3, int(real.CU_GRAPH_COND_ASSIGN_DEFAULT))
    ran = []
    side = SimpleNamespace(cuda_stream="side")
    bodies = [lambda k=k: ran.append((k, state["stream"].cuda_stream if hasattr(state["stream"], "cuda_stream")
                                      else state["stream"], state["pool"])) for k in range(3)]
    calls.clear()
    pool = SimpleNamespace(id=(0, 5))
    assert graph.append_switch(drv, fake_torch, "ctx", "handle", bodies, side, [pool, None, None]) == "node"
    assert ("release", (0, 5)) in calls
    calls.remove(("release", (0, 5)))
    names = [c[0] for c in calls if c[0] not in ("cuGraphGetNodes", "cuGraphNodeGetType")]
    assert names == ["cuStreamGetCaptureInfo", "cuGraphAddNode", "cuStreamUpdateCaptureDependencies"] + \
        ["cuStreamBeginCaptureToGraph", "cuStreamEndCapture"] * 3
    assert sum(c[0] == "cuGraphNodeGetType" for c in calls) == 3  # every body node checked
    upd = calls[2][1]
    assert upd[0] == ("stream", "main") and upd[1] == ["node"] and upd[3] == 1 and \
        upd[4] == int(real.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES)
    begins = [c[1] for c in calls if c[0] == "cuStreamBeginCaptureToGraph"]
    assert [b[1] for b in begins] == ["body0", "body1", "body2"] and all(b[0] == ("stream", "side") for b in begins)
    assert ran == [(0, "side", (0, 5)), (1, "side", None), (2, "side", None)]
    assert state == {"stream": "main", "pool": None}
    assert inspect.isfunction(graph.capture_info)
    # a body holding a node a conditional body may not hold: emptied (the capture can still end) and reported
    graphs["body1"].append(("ev", T.CU_GRAPH_NODE_TYPE_EVENT_RECORD))
    types["ev"] = T.CU_GRAPH_NODE_TYPE_EVENT_RECORD
    with pytest.raises(graph.BodyUnsupported, match="body 1 recorded EVENT_RECORD"):
        graph.append_switch(drv, fake_torch, "ctx", "handle", bodies, side, [pool, None, None])
    assert graphs["body1"] == [] and graphs["body0"]  # only the offending body emptied


def test_replayer_copies_the_input_in_and_returns_the_graph_replay():
    class G:
        replays = 0

        def replay(self):
            G.replays += 1
    runner = object.__new__(graph.GraphRunner)
    static = torch.zeros(2, 3)
    g = G()
    runner._graphs = {((2, 3), torch.float32): graph._Graph(g, static, None, None, [])}
    x = torch.ones(2, 3)
    replay = runner.replayer(x)
    assert torch.equal(static, x) and G.replays == 0  # the input is in, nothing replayed yet
    replay()
    assert G.replays == 1
    with pytest.raises(KeyError):  # another shape was never captured
        runner.replayer(torch.ones(4, 3))
