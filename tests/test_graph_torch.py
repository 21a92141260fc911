"""The executor's capture hook and runtime.graph.Capture's wiring, on the CPU (torch, no CUDA).

A CPU stand-in replaces only what needs a GPU: the selector launch (dispatch.select on the host, which
the GPU test holds equal to the kernel) and the SWITCH node (body 0, the dense conv that allocates the
output, is recorded, i.e. run, always; then the chosen sparse body, if any). Everything else is graph.Capture's own code: the tables, the
zeroed counters, the per-layer bookkeeping, the sparse bodies with the bias epilogue, the trace.
Skips without torch."""
import pytest

torch = pytest.importorskip("torch")

from runtime import dispatch, executor, graph, weights  # noqa: E402
from test_runtime_torch import fake_cache, rel_err, tiny  # noqa: E402,F401


class CpuCapture(graph.Capture):
    def _prepare(self):
        pass

    def _select(self, i, counters, slot, numel, table, handle):
        b = dispatch.select(table, int(counters[slot]), numel)
        assert self.table_dev[self.offsets[self.layers[i].conv.name]].item() == table.threshold
        self.choice[i] = b
        assert handle == ("handle", table.branches)

    def _new_handle(self, branches):
        return ("handle", branches)

    def _switch(self, handle, bodies):
        assert len(bodies) == handle[1]
        self.bodies.append(len(bodies))
        b = int(self.choice[len(self.layers) - 1])
        bodies[0]()
        if b:
            bodies[b]()


class Runner:
    def __init__(self, ex):
        self.torch, self.executor, self.device, self.selector = torch, ex, None, {"cubin": "x", "function": "snn_select"}


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
    assert ex._capture is None
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
    # the same counts as the eager pass
    ex2 = executor.Executor(tiny, sd, executor.TorchBackend(), cache, device="cpu", force=force)
    ex2.forward(x)
    assert {t.name: t.sparsity for t in ex2.last_trace if t.sparsity is not None} == \
        {t.name: t.sparsity for t in measured}


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
