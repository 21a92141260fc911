"""Epilogue hand-off (runtime/handoff.py) on the CPU: which splits hand their epilogue to the next conv, the
sums buffer's bookkeeping, and a captured pass (graph.Capture with the CPU stand-ins of test_graph_torch.py)
whose handed-off epilogues the TorchBackend emulation applies in the consumer. Skips without torch."""
import pytest

torch = pytest.importorskip("torch")

from snn.runtime import executor, handoff, weights  # noqa: E402
from test_graph_torch import CpuCapture, Runner  # noqa: E402
from test_runtime_torch import fake_cache, rel_err, tiny  # noqa: E402,F401

SPLIT_ARGS = ["input", "weight", "accumulator", "bias", "residual", "zeros", "relu"]


def split_cache(net, in_args=True, static=True):
    """Every kernel a channel split (adds into the accumulator) that takes its producer's epilogue (in_args),
    every layer static (one kernel at any sparsity: no decision in the graph)."""
    cache = fake_cache(net, threshold=0.4)
    for k in cache.data["kernels"].values():
        k["steps"] = [{"op": "launch", "function": "f", "grid": [1, 1, 1], "block": [32, 1, 1], "smem": 0,
                       "args": SPLIT_ARGS + (["in_shift", "in_zeros"] if in_args else [])}]
    if static:
        for c in net.convs:
            entry = cache.layer_entry(c.name, 2)
            entry["static_kernel"] = entry["levels"]["0.40"]["kernel"]
    return cache


def capture(net, cache, x, sd):
    be = executor.TorchBackend()
    ex = executor.Executor(net, sd, be, cache, device="cpu", force="auto")
    cap = CpuCapture(Runner(ex), 2)
    cap.bodies = []
    y = ex.forward(x, capture=cap)
    cap.finish()
    return ex, cap, y


def test_split_hands_its_epilogue_to_the_next_conv(tiny):
    """b.conv1 (bn + relu, read only by b.conv2) hands its epilogue over; b.conv2 (a residual) and c.conv (read by
    a concat) do not. Logits as the reference's, every layer's input sparsity as the eager pass counts it, the
    sums buffer left zeroed."""
    sd = weights.random_init(tiny, seed=5)
    x = torch.randn(2, 3, 20, 20)
    cache = split_cache(tiny)
    ex, cap, y = capture(tiny, cache, x, sd)
    assert cap.handoffs == {"b.conv1": "b.conv2"}
    assert rel_err(y, executor.reference(tiny, sd, x.double())) < 1e-5
    assert cap.sums is not None and not bool(cap.sums.buf.any()) and cap.sums.used == 0
    graph = {t.name: t.sparsity for t in cap.trace(ex.last_trace) if t.sparsity is not None}
    eager = executor.Executor(tiny, sd, executor.TorchBackend(), cache, device="cpu", force="auto")
    eager.forward(x)
    assert graph == {t.name: t.sparsity for t in eager.last_trace if t.sparsity is not None}
    assert 0 < graph["b.conv2"] < 1


def test_no_handoff_without_the_kernel_arguments_or_a_fixed_kernel(tiny, monkeypatch):
    sd = weights.random_init(tiny, seed=5)
    x = torch.randn(2, 3, 20, 20)
    for cache in (split_cache(tiny, in_args=False), split_cache(tiny, static=False)):
        _, cap, y = capture(tiny, cache, x, sd)
        assert cap.handoffs == {} and cap.sums is None
        assert rel_err(y, executor.reference(tiny, sd, x.double())) < 1e-5
    monkeypatch.setenv("SNN_HANDOFF", "0")
    _, cap, _ = capture(tiny, split_cache(tiny), x, sd)
    assert cap.handoffs == {}


def test_a_sums_buffer_not_zeroed_shows_in_the_logits(tiny, monkeypatch):
    """The emulated producer adds into its region like the kernel's atomics: a region taken twice without being
    cleared changes the result (so the test above would see a clearing mistake)."""
    sd = weights.random_init(tiny, seed=5)
    x = torch.randn(2, 3, 20, 20)
    monkeypatch.setattr(handoff.Sums, "take", lambda self, n, flush=True: self.buf[:n].fill_(1.0))
    _, _, y = capture(tiny, split_cache(tiny), x, sd)
    assert rel_err(y, executor.reference(tiny, sd, x.double())) > 1e-3


def test_sums_regions_cleared_by_a_launch_or_a_memset():
    A = handoff.ALIGN
    s = handoff.Sums(torch, handoff.Sums.capacity([100, 30, 10]), "cpu")
    assert s.buf.numel() == 2 * A + A and s.dirty() is None  # the two largest, aligned
    a = s.take(100)
    a.fill_(1.0)
    b = s.take(30)
    b.fill_(2.0)
    assert (b.data_ptr() - s.buf.data_ptr()) // 4 == 2 * A  # one after the other, aligned
    assert s.dirty().numel() == 3 * A  # both regions, one range
    s.dirty().zero_()   # what an epilogue launch does with its zero range
    s.cleared()
    assert s.used == 0 and not bool(s.buf.any())
    s.take(100).fill_(3.0)
    assert s.take(100, flush=False) is None and s.used == 2 * A  # a region may still be read: no memset
    c = s.take(100)  # no room: what was taken is memset first, and the region starts over
    assert c.data_ptr() == s.buf.data_ptr() and not bool(c.any()) and s.used == 2 * A
    c.fill_(4.0)
    s.flush()
    assert s.used == 0 and not bool(s.buf.any())
