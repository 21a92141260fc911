"""The executor's capture hook and runtime.graph.Capture's wiring, on the CPU (torch, no CUDA).

A CPU stand-in replaces only what needs a GPU: the selector launch (dispatch.select on the host, which
the GPU test holds equal to the kernel), the IF node (its body is recorded, i.e. run, always) and the
SWITCH node (only the chosen body runs). Everything else is graph.Capture's own code: the tables, the
zeroed counters, the per-layer bookkeeping, the sparse bodies with the bias epilogue, the trace.
Skips without torch."""
import pytest

torch = pytest.importorskip("torch")

from runtime import dispatch, executor, graph, weights  # noqa: E402
from test_runtime_torch import fake_cache, rel_err, tiny  # noqa: E402,F401


class _IfNodes:
    def begin_capture_to_if_node(self, pred):
        assert pred.dim() == 0 and pred.dtype == torch.bool

    def end_capture_to_conditional_node(self):
        pass


class CpuCapture(graph.Capture):
    def _prepare(self):
        pass

    def _select(self, i, counters, slot, numel, table, handle):
        b = dispatch.select(table, int(counters[slot]), numel)
        assert self.table_dev[self.offsets[self.layers[i].conv.name]].item() == table.threshold
        self.choice[i] = b
        self.preds[i].zero_()
        self.preds[i, b] = True

    def _new_handle(self, variants):
        return None

    def _switch(self, handle, runs):
        b = int(self.choice[len(self.layers) - 1])
        if b:
            runs[b - 1]()


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
    cap = CpuCapture(Runner(ex), 2, "switch")
    cap.graph = _IfNodes()
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


def test_if_mode_records_one_predicate_per_branch(tiny):
    sd = weights.random_init(tiny, seed=3)
    cache = fake_cache(tiny, threshold=0.0)
    ex = executor.Executor(tiny, sd, executor.TorchBackend(), cache, device="cpu", force="sparse")
    cap = CpuCapture(Runner(ex), 2, "if")
    seen = []
    cap.graph = _IfNodes()
    cap.graph.begin_capture_to_if_node = lambda p: seen.append(p)
    ex.forward(torch.randn(2, 3, 20, 20), capture=cap)
    per_layer = sum(t.branches for t in cap.tables.values())
    assert len(seen) == per_layer and cap.preds.shape[1] == max(t.branches for t in cap.tables.values())
