"""Side branches (runtime/branches.py): which convs run beside the main chain in a CUDA graph, and a captured pass
(graph.Capture with the CPU stand-ins of test_graph_torch.py) that forks the downsample and joins it at the block's
last conv. The plan needs no torch; the captured pass skips without it."""
import pytest

from snn.codegen.spec import parse_spec
from snn.runtime import branches
from snn.runtime.lower import Op

# A bottleneck block in torchvision's order: conv1 and the downsample read the block's input, conv3 adds the
# downsample as its residual; the next block reads the output.
BLOCK = """
name: block
input: {name: image, shape: [3, 16, 16]}
nodes:
  - {name: stem, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, padding: 1, param: stem}
  - {name: stem.bn, op: batchnorm, input: stem, channels: 8, param: stem.bn}
  - {name: stem.relu, op: relu, input: stem.bn}
  - {name: b.conv1, op: conv, input: stem.relu, in_channels: 8, out_channels: 4, kernel: 1, param: b.conv1}
  - {name: b.bn1, op: batchnorm, input: b.conv1, channels: 4, param: b.bn1}
  - {name: b.relu1, op: relu, input: b.bn1}
  - {name: b.down, op: conv, input: stem.relu, in_channels: 8, out_channels: 16, kernel: 1, stride: 2, param: b.down}
  - {name: b.downbn, op: batchnorm, input: b.down, channels: 16, param: b.downbn}
  - {name: b.conv2, op: conv, input: b.relu1, in_channels: 4, out_channels: 4, kernel: 3, stride: 2, padding: 1, param: b.conv2}
  - {name: b.bn2, op: batchnorm, input: b.conv2, channels: 4, param: b.bn2}
  - {name: b.relu2, op: relu, input: b.bn2}
  - {name: b.conv3, op: conv, input: b.relu2, in_channels: 4, out_channels: 16, kernel: 1, param: b.conv3}
  - {name: b.bn3, op: batchnorm, input: b.conv3, channels: 16, param: b.bn3}
  - {name: b.add, op: add, inputs: [b.bn3, b.downbn]}
  - {name: b.relu3, op: relu, input: b.add}
  - {name: c.conv, op: conv, input: b.relu3, in_channels: 16, out_channels: 8, kernel: 3, padding: 1, param: c.conv}
  - {name: c.bn, op: batchnorm, input: c.conv, channels: 8, param: c.bn}
  - {name: c.relu, op: relu, input: c.bn}
  - {name: gap, op: global_avgpool, input: c.relu}
  - {name: flat, op: flatten, input: gap}
  - {name: fc, op: linear, input: flat, in_features: 8, out_features: 5, param: fc}
"""


def conv(name, *inputs, **attrs):
    return Op("conv", name, inputs, attrs)


def resnet_ops():
    """A lowered bottleneck block: conv1 and the downsample read x, conv3 reads conv2 and adds the downsample."""
    return [conv("c1", "x"), conv("down", "x"), Op("alias", "r1", ("c1",)), conv("c2", "r1"),
            Op("alias", "r2", ("c2",)), conv("c3", "r2", "down"), Op("alias", "y", ("c3",)), conv("next", "y")]


def test_the_downsample_branches_off_and_nothing_else():
    assert branches.plan(resnet_ops(), "next") == {"down"}


def test_no_branch_where_its_reader_comes_next_or_an_op_between_writes():
    ops = resnet_ops()
    ops.insert(3, Op("epilogue", "e", ("r1",), {"inplace": True}))   # an in-place op between fork and join
    assert branches.plan(ops, "next") == set()
    ops = resnet_ops()
    ops[3].attrs["concat"] = {"buffer": "cat"}   # a conv between writes a concat buffer
    assert branches.plan(ops, "next") == set()
    # conv1 read by the very next op (through its alias): nothing to run beside; the output never branches
    assert branches.plan([conv("a", "x"), Op("alias", "ra", ("a",)), conv("b", "ra")], "b") == set()
    ops = resnet_ops()[:2] + [conv("c2", "c1")]
    assert branches.plan(ops, "down") == set()


@pytest.fixture
def block():
    return parse_spec(BLOCK, "block.yaml")


def captured(net, monkeypatch, enabled="1", split=None):
    torch = pytest.importorskip("torch")
    from snn.runtime import executor, weights
    from test_graph_torch import CpuCapture, Runner
    from test_runtime_torch import fake_cache, rel_err
    monkeypatch.setenv("SNN_BRANCHES", enabled)
    sd = weights.random_init(net, seed=7)
    x = torch.randn(2, 3, 16, 16)
    cache = fake_cache(net, threshold=0.4)
    for c in net.convs:   # every layer static: plain launches, as the downsample is on ResNet at batch 1
        entry = cache.layer_entry(c.name, 2)
        entry["static_kernel"] = entry["levels"]["0.40"]["kernel"]
    be = executor.TorchBackend()
    ex = executor.Executor(net, sd, be, cache, device="cpu", force="auto")
    order = []

    class Logged(CpuCapture):
        def _fork(self, name, record, keep):
            order.append(("fork", name))
            super()._fork(name, record, keep)

        def _join(self, name, by):
            order.append(("join", name))
            super()._join(name, by)

        def conv(self, op, *a, **k):
            order.append(("conv", op.name))
            return super().conv(op, *a, **k)

    cap = Logged(Runner(ex), 2)
    cap.bodies = []
    if split is not None:
        class Parts:
            def next(self):
                order.append(("split", cap._convs))
        cap.parts, cap._split_at = Parts(), split
    y = ex.forward(x, capture=cap)
    cap.finish()
    assert rel_err(y, executor.reference(net, sd, x.double())) < 1e-5
    assert "sconv_b.down_l40" in be.sparse_calls
    return cap, order


def test_a_captured_block_forks_the_downsample_and_joins_it_at_conv3(block, monkeypatch):
    cap, order = captured(block, monkeypatch)
    assert cap.branches == {"b.down"} and cap.joins == [("b.down", "b.conv3")]
    assert order.index(("fork", "b.down")) < order.index(("conv", "b.conv2")) < order.index(("join", "b.down")) \
        < order.index(("conv", "b.conv3"))


def test_branches_off_record_every_conv_in_order(block, monkeypatch):
    cap, order = captured(block, monkeypatch, enabled="0")
    assert cap.branches == set() and cap.joins == [] and not [o for o in order if o[0] != "conv"]


def test_a_graph_split_between_fork_and_join_joins_the_branch_first(block, monkeypatch):
    """The graph that forked a branch must join it: a split after the downsample (the third conv) joins it there."""
    cap, order = captured(block, monkeypatch, split=3)
    assert cap.joins == [("b.down", None)]
    assert order.index(("fork", "b.down")) < order.index(("join", "b.down")) < order.index(("split", 3)) \
        < order.index(("conv", "b.conv3"))


def test_resnet_branches_are_its_four_downsamples_densenet_has_none():
    pytest.importorskip("torch")
    from snn.codegen.spec import load_spec
    from snn.runtime import weights
    from snn.runtime.lower import lower
    for name, want in (("resnet50", {f"layer{i}.0.downsample.0" for i in (1, 2, 3, 4)}), ("densenet121", set())):
        net = load_spec(name)
        prog = lower(net, weights.random_init(net))
        assert branches.plan(prog.ops, prog.output) == want, name
