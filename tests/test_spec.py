"""Spec parsing, validation and shape inference: every user mistake gets one clear line."""
import pytest

from snn.codegen.spec import SpecError, load_spec, parse_spec

HEAD = "name: tiny\ninput: {name: image, shape: [3, 32, 32]}\nnodes:\n"
GOOD_NODES = """\
  - {name: c1, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, stride: 1, padding: 1, param: c1}
  - {name: b1, op: batchnorm, input: c1, channels: 8, param: b1}
  - {name: r1, op: relu, input: b1}
  - {name: c2, op: conv, input: r1, in_channels: 8, out_channels: 8, kernel: [3, 3], stride: 2, padding: 1}
  - {name: c3, op: conv, input: r1, in_channels: 8, out_channels: 8, kernel: 1, stride: 2}
  - {name: a, op: add, inputs: [c2, c3]}
  - {name: cat, op: concat, inputs: [a, c3]}
  - {name: mp, op: maxpool, input: cat, kernel: 3, stride: 2, padding: 1}
  - {name: ap, op: avgpool, input: mp, kernel: 2}
  - {name: g, op: global_avgpool, input: ap}
  - {name: f, op: flatten, input: g}
  - {name: fc, op: linear, input: f, in_features: 16, out_features: 10, param: fc}
"""


def parse(nodes, head=HEAD):
    return parse_spec(head + nodes, "t.yaml")


def error_of(text):
    with pytest.raises(SpecError) as e:
        parse_spec(text, "t.yaml")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("t.yaml")
    return msg


def test_shapes_are_inferred():
    net = parse(GOOD_NODES)
    shapes = {n.name: n.shape for n in net.nodes}
    assert shapes["c1"] == (8, 32, 32)
    assert shapes["c2"] == (8, 16, 16) and shapes["c3"] == (8, 16, 16)
    assert shapes["cat"] == (16, 16, 16)
    assert shapes["mp"] == (16, 8, 8)
    assert shapes["ap"] == (16, 4, 4)
    assert shapes["g"] == (16, 1, 1) and shapes["f"] == (16,) and shapes["fc"] == (10,)
    assert net.output == "fc"
    convs = net.convs
    assert [c.name for c in convs] == ["c1", "c2", "c3"]
    assert convs[1].shape.P == 16 and convs[1].input_op == "relu" and convs[0].input_op == "input"
    assert net.macs == 8 * 32 * 32 * 3 * 9 + 8 * 16 * 16 * 8 * 9 + 8 * 16 * 16 * 8 + 160
    assert net.node("c1").param == "c1"


def test_nodes_may_come_in_any_order():
    lines = GOOD_NODES.splitlines(keepends=True)
    net = parse("".join(reversed(lines)))
    assert net.node("fc").shape == (10,)
    assert [n.name for n in net.nodes].index("c1") < [n.name for n in net.nodes].index("c2")


def test_pool_ceil_mode_matches_pytorch_rule():
    net = parse("  - {name: p, op: maxpool, input: image, kernel: 3, stride: 2, ceil_mode: true}\n")
    assert net.node("p").shape == (3, 16, 16)  # floor gives 15; ceil gives 16 (torch agrees)


@pytest.mark.parametrize("text, expected", [
    ("", "file is empty"),
    ("name: x\ninput: [1\n", "YAML syntax error at line 3"),
    ("- a\n- b\n", "top level must be a mapping"),
    (HEAD.replace("name: tiny", "name: 3") + GOOD_NODES, "'name' must be a non-empty string"),
    (HEAD.replace("[3, 32, 32]", "[3, 32]") + GOOD_NODES, "input.shape"),
    (HEAD.replace("[3, 32, 32]", "[3, 0, 32]") + GOOD_NODES, "positive integers"),
    (HEAD + "  - {name: z, op: conv2d, input: image}\n", "node 'z': unknown op 'conv2d'"),
    (HEAD + "  - {name: z, op: relu}\n", "node 'z': op 'relu' needs 'input'"),
    (HEAD + "  - {name: z, op: relu, input: nowhere}\n", "node 'z': input 'nowhere' is not defined"),
    (HEAD + "  - {name: z, op: relu, input: image}\n  - {name: z, op: relu, input: image}\n", "node 'z': duplicate name"),
    (HEAD + "  - {name: a, op: relu, input: b}\n  - {name: b, op: relu, input: a}\n", "part of a cycle"),
    (HEAD + "  - {name: c, op: conv, input: image, in_channels: 4, out_channels: 8, kernel: 3}\n",
     "node 'c': in_channels is 4 but input 'image' has 3 channels"),
    (HEAD + "  - {name: c, op: conv, input: image, in_channels: 3, out_channels: 0, kernel: 3}\n",
     "node 'c': field 'out_channels' must be positive"),
    (HEAD + "  - {name: c, op: conv, input: image, in_channels: 3, out_channels: 2.5, kernel: 3}\n",
     "node 'c': field 'out_channels' must be an integer"),
    (HEAD + "  - {name: c, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: three}\n",
     "node 'c': field 'kernel' must be an integer or a list of two integers"),
    (HEAD + "  - {name: c, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, padding: -1}\n",
     "node 'c': field 'padding' must be non-negative"),
    (HEAD + "  - {name: c, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, bias: 1}\n",
     "node 'c': field 'bias' must be true or false"),
    (HEAD + "  - {name: c, op: conv, input: image, in_channels: 3, out_channels: 8}\n",
     "node 'c': op 'conv' needs field 'kernel'"),
    (HEAD + "  - {name: c, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, dilation: 2}\n",
     "node 'c': unknown field(s) for op 'conv': dilation"),
    (HEAD + "  - {name: c, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 40}\n",
     "node 'c': kernel 40x40 is larger than the padded input"),
    (HEAD + "  - {name: a, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 1}\n"
            "  - {name: b, op: conv, input: image, in_channels: 3, out_channels: 4, kernel: 1}\n"
            "  - {name: s, op: add, inputs: [a, b]}\n", "node 's': cannot add 'a' (8, 32, 32) and 'b' (4, 32, 32)"),
    (HEAD + "  - {name: a, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 1, stride: 2}\n"
            "  - {name: s, op: concat, inputs: [a, image]}\n", "node 's': cannot concatenate"),
    (HEAD + "  - {name: s, op: add, input: image}\n", "node 's': op 'add' needs 'inputs'"),
    (HEAD + "  - {name: b, op: batchnorm, input: image, channels: 5}\n", "node 'b': channels is 5 but input"),
    (HEAD + "  - {name: f, op: linear, input: image, in_features: 3, out_features: 2}\n", "add a flatten node"),
    (HEAD + "  - {name: f, op: flatten, input: image}\n  - {name: l, op: linear, input: f, in_features: 3, out_features: 2}\n",
     "node 'l': in_features is 3 but input 'f' has 3072 features"),
    (HEAD + "  - [1, 2]\n", "nodes[0] must be a mapping"),
    (HEAD + "  - {op: relu, input: image}\n", "nodes[0] needs a 'name'"),
    (HEAD.replace("nodes:\n", "nodes: 3\n"), "'nodes' must be a non-empty list"),
    (HEAD + GOOD_NODES + "output: nothing\n", "field 'output' names unknown node 'nothing'"),
    (HEAD + GOOD_NODES + "extra: 1\n", "unknown top-level field(s): extra"),
])
def test_bad_specs_give_one_clear_line(text, expected):
    assert expected in error_of(text)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="is a directory"):
        load_spec(tmp_path)


def test_param_defaults_to_the_node_name_for_nodes_with_tensors():
    net = parse_spec("name: p\ninput: {name: image, shape: [3, 8, 8]}\nnodes:\n"
                     "  - {name: c, op: conv, input: image, in_channels: 3, out_channels: 4, kernel: 3}\n"
                     "  - {name: b, op: batchnorm, input: c, channels: 4, param: bn}\n"
                     "  - {name: r, op: relu, input: b}\n")
    assert [(n.name, n.param) for n in net.nodes] == [("c", "c"), ("b", "bn"), ("r", None)]
    assert net.convs[0].param == "c"


TRANSITION = """\
  - {name: c1, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, padding: 1}
  - {name: r1, op: relu, input: c1}
  - {name: t, op: conv, input: r1, in_channels: 8, out_channels: 4, kernel: 1, bias: true}
  - {name: p, op: avgpool, input: t, kernel: 2}
  - {name: r2, op: relu, input: p}
  - {name: c2, op: conv, input: p, in_channels: 4, out_channels: 4, kernel: 3, padding: 1}
"""


def test_a_1x1_conv_before_an_average_pool_runs_after_it():
    """spec.pools_first: the pool reads the conv's input, the conv (its name, param and fields kept) reads the pool at
    the pooled size, and what read the pool reads the conv; the conv is ReLU-derived through the pool."""
    net = parse(TRANSITION)
    assert [(n.name, n.op, n.inputs, n.shape) for n in net.nodes[2:]] == [
        ("p", "avgpool", ("r1",), (8, 16, 16)), ("t", "conv", ("p",), (4, 16, 16)),
        ("r2", "relu", ("t",), (4, 16, 16)), ("c2", "conv", ("t",), (4, 16, 16))]
    t = next(c for c in net.convs if c.name == "t")
    assert (t.shape.C, t.shape.N, t.shape.H, t.shape.W, t.param, t.bias) == (8, 4, 16, 16, "t", True)
    assert t.sparse and t.input_op == "avgpool"
    assert net.output == "c2" and parse(TRANSITION + "  - {name: out, op: relu, input: c2}\n").output == "out"
    # the pool as the network's output: the conv's node is the output then
    assert parse("".join(TRANSITION.splitlines(True)[:4])).output == "t"


@pytest.mark.parametrize("change", [
    ("kernel: 1, bias: true", "kernel: 3, padding: 1, bias: true"),     # not a 1x1
    ("kernel: 1, bias: true", "kernel: 1, stride: 2, bias: true"),      # strided
    ("op: avgpool, input: t, kernel: 2", "op: avgpool, input: t, kernel: 3, stride: 1, padding: 1"),   # padded
    ("op: avgpool, input: t, kernel: 2", "op: avgpool, input: t, kernel: 3, stride: 2, ceil_mode: true"),
    ("op: avgpool, input: t, kernel: 2", "op: avgpool, input: t, kernel: 1"),   # as many pixels out as in
    ("op: avgpool, input: t, kernel: 2", "op: maxpool, input: t, kernel: 2"),   # a max does not commute
    ("input: p, in_channels: 4", "input: t, in_channels: 4"),           # the conv read by another node too
])
def test_what_does_not_commute_keeps_its_order(change):
    net = parse(TRANSITION.replace(*change))
    assert [n.name for n in net.nodes][2:4] == ["t", "p"] and net.node("p").inputs == ("t",)
