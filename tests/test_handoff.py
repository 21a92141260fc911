"""Epilogue hand-off (runtime/handoff.py) on the CPU: which splits hand their epilogue to the next conv and which
pre-activations move into the conv that reads them, the sums buffer's bookkeeping, and a captured pass (graph.Capture with the CPU stand-ins of test_graph_torch.py)
whose handed-off epilogues the TorchBackend emulation applies in the consumer. Skips without torch."""
import pytest

torch = pytest.importorskip("torch")

from snn.codegen.spec import parse_spec  # noqa: E402
from snn.runtime import executor, handoff, weights  # noqa: E402
from snn.runtime.kernels import pixel_pitch  # noqa: E402
from test_graph_torch import CpuCapture, Runner  # noqa: E402
from test_lower import dense_yaml  # noqa: E402
from test_runtime_torch import fake_cache, rel_err, tiny  # noqa: E402,F401

SPLIT_ARGS = ["input", "weight", "accumulator", "bias", "residual", "zeros", "relu"]


def split_cache(net, in_args=True, static=True, in_res=False, zero=False, bn=False):
    """Every kernel a channel split (adds into the accumulator) that takes its producer's epilogue (in_args; its
    residual and a store of the finished input with in_res; a range to zero with zero; a pre-activation's scale
    and its input's pixel pitch with bn), every layer static (one kernel at any sparsity: no decision in the
    graph)."""
    cache = fake_cache(net, threshold=0.4)
    for k in cache.data["kernels"].values():
        k["steps"] = [{"op": "launch", "function": "f", "grid": [1, 1, 1], "block": [32, 1, 1], "smem": 0,
                       "args": SPLIT_ARGS + (["in_shift", "in_zeros"] if in_args else [])
                       + (["in_res", "in_out"] if in_res else []) + (["zero", "zero_total"] if zero else [])
                       + (["in_scale", "in_ld"] if bn else [])}]
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
    assert cap.handoffs == {"b.conv1": "b.conv2"} and cap.stored == set()
    assert rel_err(y, executor.reference(tiny, sd, x.double())) < 1e-5
    assert cap.sums is not None and not bool(cap.sums.buf.any()) and not any(r.pending for r in cap.sums.live)
    graph = {t.name: t.sparsity for t in cap.trace(ex.last_trace) if t.sparsity is not None}
    eager = executor.Executor(tiny, sd, executor.TorchBackend(), cache, device="cpu", force="auto")
    eager.forward(x)
    assert graph == {t.name: t.sparsity for t in eager.last_trace if t.sparsity is not None}
    assert 0 < graph["b.conv2"] < 1


def test_a_residual_block_output_is_handed_off_and_stored(tiny):
    """With kernels that add the residual and store the finished input (emit.IN_RES_ARGS), the residual block's
    last conv hands its epilogue (bias + residual + ReLU) to c.conv, its first reader, which stores the value for
    the concat that reads it later. Logits as the reference's, sparsities as the eager pass counts them."""
    sd = weights.random_init(tiny, seed=5)
    x = torch.randn(2, 3, 20, 20)
    cache = split_cache(tiny, in_res=True)
    ex, cap, y = capture(tiny, cache, x, sd)
    res = next(o.name for o in ex.ops if o.kind == "conv" and (o.attrs.get("epilogue") or {}).get("residual"))
    assert cap.handoffs == {"b.conv1": "b.conv2", res: "c.conv"} and cap.stored == {res}
    assert rel_err(y, executor.reference(tiny, sd, x.double())) < 1e-5
    assert not bool(cap.sums.buf.any())
    graph = {t.name: t.sparsity for t in cap.trace(ex.last_trace) if t.sparsity is not None}
    eager = executor.Executor(tiny, sd, executor.TorchBackend(), cache, device="cpu", force="auto")
    eager.forward(x)
    assert graph == {t.name: t.sparsity for t in eager.last_trace if t.sparsity is not None}
    assert 0 < graph["c.conv"] < 1


@pytest.mark.parametrize("zero", [False, True])
def test_read_regions_are_cleared_by_the_next_launch_that_can(tiny, zero):
    """Kernels that take a range to zero (emit.ZERO_ARGS) clear the regions read before them: no fill of the
    graph's own (without them an epilogue launch or a fill does, the end's after the last consumer, beside the
    pass's tail). Either way the logits are the reference's and the buffer is zero at the end (the next replay
    starts from zeros)."""
    sd = weights.random_init(tiny, seed=5)
    x = torch.randn(2, 3, 20, 20)
    _, cap, y = capture(tiny, split_cache(tiny, in_res=True, zero=zero), x, sd)
    assert len(cap.handoffs) == 2
    assert rel_err(y, executor.reference(tiny, sd, x.double())) < 1e-5
    assert not bool(cap.sums.buf.any()) and cap.sums.dirty() == []
    assert cap.reads_done == 2
    if zero:
        assert getattr(cap, "side_cleared", 0) == 0
    else:   # the end's fill waits for the last consumer only, not for the ops recorded after it
        assert cap.clears_after[-1] == ("read", 2)


def test_a_stored_value_the_consumer_does_not_store_shows_in_the_logits(tiny, monkeypatch):
    """The concat reads the value the consumer stores: a consumer that left it unwritten would change the logits."""
    sd = weights.random_init(tiny, seed=5)
    x = torch.randn(2, 3, 20, 20)
    real = executor.TorchBackend.sparse_conv

    def no_store(self, *a, **k):
        in_epi = k.get("in_epi") if "in_epi" in k else (a[8] if len(a) > 8 else None)
        if in_epi is not None and in_epi.out is not None:
            in_epi.out.fill_(7.0)
            in_epi = executor.InputEpilogue(in_epi.shift, in_epi.counters, in_epi.slot, in_epi.residual, None,
                                            in_epi.sums)
            a = a[:8] + (in_epi,) + a[9:] if len(a) > 8 else a
            k = {**k, "in_epi": in_epi} if "in_epi" in k else k
        return real(self, *a, **k)
    monkeypatch.setattr(executor.TorchBackend, "sparse_conv", no_store)
    _, cap, y = capture(tiny, split_cache(tiny, in_res=True), x, sd)
    assert cap.stored
    assert rel_err(y, executor.reference(tiny, sd, x.double())) > 1e-3


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


class PreactRecorder(executor.TorchBackend):
    """Records, per conv kernel given a pre-activation (in_epi.scale), the pixel pitch of the input it read."""

    def __init__(self):
        super().__init__()
        self.preact = {}

    def sparse_conv(self, name, kentry, inp, weight, out, workspace, shape, epi=None, in_epi=None, into=None,
                    zero=None, zeroed=False):
        if in_epi is not None and in_epi.scale is not None:
            self.preact[name.rsplit("_l", 1)[0].removeprefix("sconv_")] = pixel_pitch(inp)
        return super().sparse_conv(name, kentry, inp, weight, out, workspace, shape, epi, in_epi, into, zero, zeroed)


@pytest.mark.parametrize("growth", [4, 6])
def test_a_pre_activation_is_staged_by_its_conv(growth):
    """DenseNet's norm1: with kernels that take in_bn (emit.IN_BN_ARGS), each batchnorm + ReLU read by one static
    conv is applied by that conv as it stages the block's buffer in place: no epilogue of its own, the conv's input
    the buffer's first channels at its pitch. A pitch the kernel cannot read in whole 16-byte vectors (26 floats,
    growth 6) keeps the epilogue. A transition's norm is its pool's (spec.pools_first, lower._into_avgpools), not
    its conv's. Logits as float64's, sparsities as the eager pass counts them."""
    net = parse_spec(dense_yaml(growth), "dense.yaml")
    sd = weights.random_init(net, seed=6)
    x = torch.randn(2, 3, 12, 12)
    cache = split_cache(net, bn=True)
    be = PreactRecorder()
    ex = executor.Executor(net, sd, be, cache, device="cpu", force="auto")
    cap = CpuCapture(Runner(ex), 2)
    cap.bodies = []
    y = ex.forward(x, capture=cap)
    cap.finish()
    total = 8 + 3 * growth
    assert cap.preacts == {"l1.relu1": "l1.conv1", "l2.relu1": "l2.conv1", "l3.relu1": "l3.conv1"}
    staged = {"l1.conv1": 8} if growth == 6 else {"l1.conv1": 8, "l2.conv1": total, "l3.conv1": total}
    assert be.preact == staged
    assert rel_err(y, executor.reference(net, sd, x.double())) < 1e-5
    graph = {t.name: t.sparsity for t in cap.trace(ex.last_trace) if t.sparsity is not None}
    eager = executor.Executor(net, sd, executor.TorchBackend(), cache, device="cpu", force="auto")
    eager.forward(x)
    assert graph == {t.name: t.sparsity for t in eager.last_trace if t.sparsity is not None}
    assert all(0 < graph[c] < 1 for c in staged)


def test_no_pre_activation_move_without_in_bn_or_a_fixed_kernel(monkeypatch):
    net = parse_spec(dense_yaml(4), "dense.yaml")
    sd = weights.random_init(net, seed=6)
    x = torch.randn(2, 3, 12, 12)
    for cache in (split_cache(net), split_cache(net, bn=True, static=False)):
        _, cap, y = capture(net, cache, x, sd)
        assert cap.preacts == {}
        assert rel_err(y, executor.reference(net, sd, x.double())) < 1e-5
    monkeypatch.setenv("SNN_HANDOFF", "0")
    _, cap, _ = capture(net, split_cache(net, bn=True), x, sd)
    assert cap.preacts == {}


def test_a_sums_buffer_not_zeroed_shows_in_the_logits(tiny, monkeypatch):
    """The emulated producer adds into its region like the kernel's atomics: a region handed out dirty changes
    the result (so the tests above would see a clearing mistake)."""
    sd = weights.random_init(tiny, seed=5)
    x = torch.randn(2, 3, 20, 20)
    take = handoff.Sums.take

    def dirty(self, n):
        region, waits, must_clear = take(self, n)
        if region is not None:
            region.view.fill_(1.0)
        return region, waits, must_clear
    monkeypatch.setattr(handoff.Sums, "take", dirty)
    _, _, y = capture(tiny, split_cache(tiny), x, sd)
    assert rel_err(y, executor.reference(tiny, sd, x.double())) > 1e-3


def test_sums_regions_are_a_ring_reused_once_cleared():
    A = handoff.ALIGN
    capacity, batch_clear = handoff.Sums.capacity([100, 30, 10])
    assert (capacity, batch_clear) == (4 * 2 * A, 2 * 2 * A)  # the largest, aligned, four times; a fill per two
    s = handoff.Sums(torch, capacity, "cpu", 2 * A)
    a, wa, _ = s.take(30)
    b, wb, _ = s.take(100)
    assert wa == wb == [] and b.view.numel() == 100 and (b.start, b.end) == (A, 3 * A)  # one after the other
    c, _, _ = s.take(100)
    d, _, _ = s.take(100)
    g, _, _ = s.take(30)
    assert (c.start, d.start, g.start) == (3 * A, 5 * A, 7 * A)
    assert s.take(30) == (None, [], False)  # the ring wraps onto a, still to be read: no region
    assert not s.consumed(a)  # read, dirty, not worth a clear alone ...
    assert s.take(30) == (None, [], True)  # ... but in the way: the caller clears it first
    assert s.consumed(b) and s.dirty() == [(0, 3 * A)]  # one range worth a clear, for both
    s.clearing("clear-ab")
    e, waits, _ = s.take(30)
    assert e.start == 0 and waits == ["clear-ab"] and a not in s.live  # the clear is waited for before reuse
    f, waits, _ = s.take(30)
    assert f.start == A and waits == ["clear-ab"]
    s.consumed(c)
    s.cleared(s.dirty()[0])  # cleared by a launch on the graph's stream: nothing to wait for
    assert c not in s.live and s.dirty() == []
    assert s.take(10 ** 6) == (None, [], False)  # larger than the buffer


def test_after_a_graph_split_no_earlier_clear_is_waited_for():
    """A clear recorded in the graph before a split is done before the next graph runs: settle() drops it, and a
    region taken over it after the split waits for nothing (an event of another capture cannot be waited on)."""
    A = handoff.ALIGN
    s = handoff.Sums(torch, 4 * A, "cpu", A)
    a, _, _ = s.take(A)
    s.consumed(a)
    s.clearing("clear-a")
    s.settle()
    s.next = 0
    b, waits, dirty = s.take(A)
    assert b.start == 0 and waits == [] and not dirty and a not in s.live


@pytest.mark.parametrize("split,force,static", [("1", "auto", False), ("0", "auto", False), ("1", "auto", True),
                                               ("1", "dense", False)])
def test_a_capture_split_into_two_graphs_records_the_same_pass(tiny, monkeypatch, split, force, static):
    """With a graph split the second graph begins once, at the conv split_before names among all the pass's convs
    (SNN_GRAPH_SPLIT=0: never), and the pass is the same: the reference's logits, the eager pass's counts, the sums
    buffer left zeroed. A pass without a device-side decision (every layer static, or force dense as the 16-bit
    engine runs) holds no conditional node and is one graph."""
    from snn.runtime import graph
    monkeypatch.setenv("SNN_GRAPH_SPLIT", split)
    sd = weights.random_init(tiny, seed=5)
    x = torch.randn(2, 3, 20, 20)
    cache = split_cache(tiny, static=static)
    ex = executor.Executor(tiny, sd, executor.TorchBackend(), cache, device="cpu", force=force)
    cap = CpuCapture(Runner(ex), 2)
    cap.bodies = []

    class Parts:
        at = []

        def next(self):
            self.at.append(cap._convs)
    cap.parts = Parts()
    y = ex.forward(x, capture=cap)
    cap.finish()
    k = graph.split_before(len(tiny.convs), not static and force != "dense")
    assert Parts.at == ([] if k is None else [k]) and (k is None) == (split == "0" or static or force == "dense")
    assert 0 < (k or 1) < len(tiny.convs) == cap._convs
    assert rel_err(y, executor.reference(tiny, sd, x.double())) < 1e-5
    if force == "dense":
        assert not cap.layers and cap.sums is None
        return
    assert cap.sums is None if not static else not bool(cap.sums.buf.any())   # a decided layer hands none over
    eager = executor.Executor(tiny, sd, executor.TorchBackend(), cache, device="cpu", force="auto")
    eager.forward(x)
    assert {t.name: t.sparsity for t in cap.trace(ex.last_trace) if t.sparsity is not None} == \
        {t.name: t.sparsity for t in eager.last_trace if t.sparsity is not None}


def test_a_pass_of_plain_nodes_is_one_graph_up_to_its_size(monkeypatch):
    """A split where a layer is decided on the device (its SWITCH nodes launch slowly), or where the pass is larger
    than graph.ONE_GRAPH_MAX_CONVS (ResNet-152's 155 convs one graph, DenseNet-201's 200 split); never with
    SNN_GRAPH_SPLIT=0."""
    from snn.runtime import graph
    monkeypatch.delenv("SNN_GRAPH_SPLIT", raising=False)
    assert graph.split_before(155, True) == round(155 * graph.HEAD)
    assert graph.split_before(155, False) is None and graph.split_before(graph.ONE_GRAPH_MAX_CONVS, False) is None
    assert graph.split_before(200, False) == 25 and graph.split_before(1, True) is None
    monkeypatch.setenv("SNN_GRAPH_SPLIT", "0")
    assert graph.split_before(200, True) is None
