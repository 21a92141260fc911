"""`snn-codegen import` / snn.import_onnx: ONNX graphs built with onnx.helper become specs that load_spec
accepts, with the right ops, fields and sparse flags; their weights fit runtime.weights and compute what
onnx's reference evaluator computes; everything unsupported is one line naming the node, and nothing is
written then. Needs onnx (in the dev extra); the weight tests also need torch."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from click.testing import CliRunner

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import snn  # noqa: E402
from snn import cli  # noqa: E402
from snn.codegen.errors import UserError  # noqa: E402
from snn.codegen.importer import import_onnx  # noqa: E402
from snn.codegen.spec import load_spec  # noqa: E402


class G:
    """A small ONNX graph builder: random initializers, one image input [N, C, H, W]."""

    def __init__(self, c=3, h=32, w=32, batch="N", seed=0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.input = helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, c, h, w])

    def init(self, name, shape=None, value=None, positive=False):
        if value is None:
            value = self.rng.standard_normal(shape).astype(np.float32)
            if positive:
                value = np.abs(value) + 0.5
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op, inputs, name, outputs=None, **attrs):
        outputs = outputs or [name + "_out"]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, **attrs))
        return outputs[0]

    def conv(self, name, x, cin, cout, k=3, stride=1, pad=1, group=1, bias=False, **attrs):
        kh, kw = (k, k) if isinstance(k, int) else k
        w = self.init(f"{name}.w", (cout, cin // group, kh, kw))
        w_scale = np.sqrt(2.0 / (cin // group * kh * kw))
        self.inits[-1] = numpy_helper.from_array(numpy_helper.to_array(self.inits[-1]) * np.float32(w_scale), w)
        ins = [x, w] + ([self.init(f"{name}.b", (cout,))] if bias else [])
        pads = attrs.pop("pads", [pad, pad, pad, pad] if isinstance(pad, int) else [pad[0], pad[1], pad[0], pad[1]])
        if "auto_pad" in attrs:
            pads = None
        kw_attrs = dict(kernel_shape=[kh, kw], strides=[stride, stride] if isinstance(stride, int) else stride,
                        group=group, **attrs)
        if pads is not None:
            kw_attrs["pads"] = pads
        return self.node("Conv", ins, name, **kw_attrs)

    def bn(self, name, x, c, eps=1e-5):
        ins = [x, self.init(f"{name}.scale", (c,)), self.init(f"{name}.bias", (c,)),
               self.init(f"{name}.mean", (c,)), self.init(f"{name}.var", (c,), positive=True)]
        return self.node("BatchNormalization", ins, name, epsilon=eps)

    def relu(self, name, x):
        return self.node("Relu", [x], name)

    def model(self, out, check=True):
        graph = helper.make_graph(self.nodes, "g", [self.input],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        try:  # give the output its inferred shape (the checker wants one)
            m = onnx.shape_inference.infer_shapes(m)
        except Exception:  # the deliberately broken graphs
            pass
        if check:
            onnx.checker.check_model(m)
        return m

    def save(self, out, folder, check=True, stem="model"):
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{stem}.onnx"
        onnx.save(self.model(out, check), str(path))
        return path


# -- the models ------------------------------------------------------------------------------------
def residual():
    """conv-bn-relu-maxpool stem, a residual block, GlobalAveragePool, Flatten, Gemm."""
    g = G()
    x = g.relu("relu1", g.bn("bn1", g.conv("conv1", "image", 3, 8), 8))
    x = g.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = g.relu("relu2", g.bn("bn2", g.conv("conv2", x, 8, 8), 8, eps=1e-3))
    y = g.bn("bn3", g.conv("conv3", y, 8, 8), 8)
    y = g.relu("relu3", g.node("Add", [y, x], "add"))
    y = g.node("GlobalAveragePool", [y], "gap")
    y = g.node("Flatten", [y], "flatten", axis=1)
    return g, g.node("Gemm", [y, g.init("fc.w", (10, 8)), g.init("fc.b", (10,))], "fc", transB=1)


def dense():
    """DenseNet-like: two bn-relu-conv layers concatenated onto their input, then a transition."""
    g = G(h=16, w=16)
    x = g.relu("relu0", g.conv("conv0", "image", 3, 8))
    feats = [x]
    c = 8
    for i in range(2):
        inp = feats[0] if len(feats) == 1 else g.node("Concat", feats, f"cat{i}", axis=1)
        y = g.conv(f"dl{i}.conv", g.relu(f"dl{i}.relu", g.bn(f"dl{i}.bn", inp, c)), c, 4)
        feats.append(y)
        c += 4
    x = g.node("Concat", feats, "cat_final", axis=1)
    x = g.conv("trans.conv", g.relu("trans.relu", g.bn("trans.bn", x, c)), c, 8, k=1, pad=0)
    return g, g.node("AveragePool", [x], "trans.pool", kernel_shape=[2, 2], strides=[2, 2])


def grouped():
    """Grouped, depthwise and pointwise convs with biases."""
    g = G(h=16, w=16)
    x = g.relu("relu0", g.conv("stem", "image", 3, 8, bias=True))
    x = g.relu("relu1", g.conv("grouped", x, 8, 16, group=4, bias=True))
    x = g.relu("relu2", g.conv("depthwise", x, 16, 16, group=16, stride=2))
    return g, g.conv("pointwise", x, 16, 8, k=1, pad=0, bias=True)


def strided():
    """Stride 2 / padding variants, auto_pad SAME, pools with ceil_mode and padding, Reshape + MatMul + Add."""
    g = G(h=33, w=30)
    x = g.relu("r0", g.conv("c_s2", "image", 3, 8, k=3, stride=2, pad=1))           # 17 x 15
    x = g.relu("r1", g.conv("c_rect", x, 8, 8, k=[3, 5], pad=[1, 2]))               # 17 x 15
    x = g.relu("r2", g.conv("c_same", x, 8, 8, k=3, auto_pad="SAME_UPPER"))         # 17 x 15
    x = g.node("MaxPool", [x], "mp_ceil", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)  # 8 x 7
    x = g.relu("r3", g.conv("c_1x1s2", x, 8, 12, k=1, stride=2, pad=0))             # 4 x 4
    x = g.node("AveragePool", [x], "ap_pad", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
               count_include_pad=1)                                                 # 4 x 4
    x = g.node("AveragePool", [x], "ap_s2", kernel_shape=[2, 2], strides=[2, 2])    # 2 x 2
    x = g.node("Reshape", [x, g.init("shape", value=np.array([0, -1], dtype=np.int64))], "reshape")
    x = g.node("MatMul", [x, g.init("fc.w", (48, 5))], "fc")
    return g, g.node("Add", [x, g.init("fc.b", (5,))], "fc_bias")


def skipped():
    """Dropout and Identity vanish; Gemm with transB=0."""
    g = G(h=8, w=8)
    x = g.node("Dropout", [g.conv("conv1", "image", 3, 8)], "drop1", outputs=["drop1_out", "drop1_mask"])
    x = g.relu("relu1", x)
    x = g.node("Identity", [x], "ident")
    x = g.node("GlobalAveragePool", [g.conv("conv2", x, 8, 8)], "gap")
    x = g.node("Dropout", [g.node("Flatten", [x], "flatten")], "drop2")
    return g, g.node("Gemm", [x, g.init("fc.w", (8, 3))], "fc")


MODELS = {"residual": residual, "dense": dense, "grouped": grouped, "strided": strided, "skipped": skipped}


def imported(tmp_path, build, weights=False):
    g, out = build()
    path = g.save(out, tmp_path / "in")
    w = tmp_path / "model.pth" if weights else None
    res = import_onnx(path, tmp_path / "model.yaml", w)
    return res, load_spec(res.spec_path), g, out


def ops(net):
    return [(n.name, n.op) for n in net.nodes]


# -- (a) residual ----------------------------------------------------------------------------------
def test_residual_block(tmp_path):
    res, net, _, _ = imported(tmp_path, residual)
    assert res.spec_path == tmp_path / "model.yaml" and res.weights_path is None
    assert not (tmp_path / "model.pth").exists()
    assert net.name == "model" and net.input_name == "image" and net.input_shape == (3, 32, 32)
    assert ops(net) == [("conv1", "conv"), ("bn1", "batchnorm"), ("relu1", "relu"), ("maxpool", "maxpool"),
                        ("conv2", "conv"), ("bn2", "batchnorm"), ("relu2", "relu"), ("conv3", "conv"),
                        ("bn3", "batchnorm"), ("add", "add"), ("relu3", "relu"), ("gap", "global_avgpool"),
                        ("flatten", "flatten"), ("fc", "linear")]
    assert res.nodes == 14 and res.convs == 3 and res.sparse_convs == 2 and net.output == "fc"
    c1 = net.node("conv1")
    assert (c1["in_channels"], c1["out_channels"], c1["kernel"], c1["stride"], c1["padding"], c1["groups"],
            c1["bias"]) == (3, 8, (3, 3), (1, 1), (1, 1), 1, False)
    assert c1.param == "conv1" and net.node("bn2").param == "bn2"
    assert net.node("bn1")["eps"] == 1e-5 and net.node("bn2")["eps"] == pytest.approx(1e-3)
    mp = net.node("maxpool")
    assert (mp["kernel"], mp["stride"], mp["padding"], mp["ceil_mode"], mp.shape) == ((3, 3), (2, 2), (1, 1), False, (8, 16, 16))
    assert net.node("add").inputs == ("bn3", "maxpool")
    fc = net.node("fc")
    assert (fc["in_features"], fc["out_features"], fc["bias"], fc.shape) == (8, 10, True, (10,))
    assert {c.name: (c.sparse, c.input_op) for c in net.convs} == {
        "conv1": (False, "input"), "conv2": (True, "maxpool"), "conv3": (True, "relu")}
    assert snn.import_onnx is not None and "import_onnx" in snn.__all__


# -- (b) concat ------------------------------------------------------------------------------------
def test_concat_block(tmp_path):
    res, net, _, _ = imported(tmp_path, dense)
    assert net.node("cat1").inputs == ("relu0", "dl0.conv") and net.node("cat1").shape == (12, 16, 16)
    assert net.node("cat_final").inputs == ("relu0", "dl0.conv", "dl1.conv")
    assert net.node("cat_final").shape == (16, 16, 16)
    pool = net.node("trans.pool")   # before the 1x1 transition conv now (spec.pools_first), at its input's width
    assert pool.op == "avgpool" and pool["kernel"] == (2, 2) and pool.shape == (16, 8, 8)
    assert net.node("trans.conv").inputs == ("trans.pool",) and net.node("trans.conv").shape == (8, 8, 8)
    assert {c.name: c.sparse for c in net.convs} == {"conv0": False, "dl0.conv": True, "dl1.conv": True,
                                                      "trans.conv": True}
    assert res.convs == 4 and res.sparse_convs == 3


# -- (c) grouped / depthwise -----------------------------------------------------------------------
def test_grouped_and_depthwise(tmp_path):
    _, net, _, _ = imported(tmp_path, grouped)
    gc, dw, pw = net.node("grouped"), net.node("depthwise"), net.node("pointwise")
    assert (gc["groups"], gc["in_channels"], gc["out_channels"], gc["bias"]) == (4, 8, 16, True)
    assert (dw["groups"], dw["stride"], dw.shape) == (16, (2, 2), (16, 8, 8))
    assert (pw["groups"], pw["kernel"], pw["bias"]) == (1, (1, 1), True)
    assert {c.name: c.sparse for c in net.convs} == {"stem": False, "grouped": False, "depthwise": False,
                                                      "pointwise": True}


# -- (d) strides, padding, pools -------------------------------------------------------------------
def test_stride_padding_and_pools(tmp_path):
    _, net, _, _ = imported(tmp_path, strided)
    n = net.node
    assert (n("c_s2")["stride"], n("c_s2")["padding"], n("c_s2").shape) == ((2, 2), (1, 1), (8, 17, 15))
    assert (n("c_rect")["kernel"], n("c_rect")["padding"], n("c_rect").shape) == ((3, 5), (1, 2), (8, 17, 15))
    assert (n("c_same")["padding"], n("c_same").shape) == ((1, 1), (8, 17, 15))
    assert (n("mp_ceil")["ceil_mode"], n("mp_ceil").shape) == (True, (8, 8, 7))
    assert (n("c_1x1s2")["stride"], n("c_1x1s2")["padding"], n("c_1x1s2").shape) == ((2, 2), (0, 0), (12, 4, 4))
    ap = n("ap_pad")
    assert (ap.op, ap["kernel"], ap["stride"], ap["padding"], ap.shape) == ("avgpool", (3, 3), (1, 1), (1, 1), (12, 4, 4))
    assert n("ap_s2").shape == (12, 2, 2)
    assert n("reshape").op == "flatten" and n("reshape").shape == (48,)
    fc = n("fc")
    assert (fc.op, fc["in_features"], fc["out_features"], fc["bias"]) == ("linear", 48, 5, True)
    assert "fc_bias" not in [x.name for x in net.nodes] and net.output == "fc"


# -- (e) Dropout / Identity ------------------------------------------------------------------------
def test_dropout_and_identity_skipped(tmp_path):
    _, net, _, _ = imported(tmp_path, skipped)
    assert ops(net) == [("conv1", "conv"), ("relu1", "relu"), ("conv2", "conv"), ("gap", "global_avgpool"),
                        ("flatten", "flatten"), ("fc", "linear")]
    assert net.node("relu1").inputs == ("conv1",) and net.node("conv2").inputs == ("relu1",)
    assert net.node("fc").inputs == ("flatten",) and net.node("fc")["bias"] is False
    assert net.node("fc")["in_features"] == 8 and net.node("fc")["out_features"] == 3
    assert net.node("conv2").param == "conv2" and [c.sparse for c in net.convs] == [False, True]


def test_unnamed_and_odd_names(tmp_path):
    """Unnamed or duplicate node names fall back to the output name; names YAML would misread are quoted."""
    g = G(h=8, w=8)
    x = g.node("Conv", ["image", g.init("w", (4, 3, 1, 1))], "", outputs=["/stem/conv: out"], kernel_shape=[1, 1])
    x = g.node("Relu", [x], "dup", outputs=["true"])
    x = g.node("Relu", [x], "dup", outputs=["r2"])
    path = g.save(x, tmp_path / "in")
    net = load_spec(import_onnx(path, tmp_path / "m.yaml", name="odd: net").spec_path)
    assert [n.name for n in net.nodes] == ["/stem/conv: out", "true", "r2"]
    assert net.name == "odd: net" and net.node("/stem/conv: out").param == "/stem/conv: out"


# -- (f) errors ------------------------------------------------------------------------------------
def bad_sigmoid(g):
    return g.node("Sigmoid", [g.conv("conv1", "image", 3, 8)], "sig")


def bad_pads(g):
    return g.conv("conv1", "image", 3, 8, pads=[1, 1, 2, 2])


def bad_dilation(g):
    return g.conv("conv1", "image", 3, 8, pad=2, dilations=[2, 2])


def bad_clip(g):
    return g.node("Clip", [g.conv("conv1", "image", 3, 8), g.init("lo", value=np.float32(0)),
                           g.init("hi", value=np.float32(6))], "relu6")


def bad_count_exclude_pad(g):
    return g.node("AveragePool", ["image"], "pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1])


def bad_broadcast_add(g):
    return g.node("Add", [g.conv("conv1", "image", 3, 8), g.init("shift", (8, 1, 1))], "shift_add")


def bad_weight_computed(g):
    w = g.node("Relu", ["image"], "wrelu")  # a weight computed from the image
    return g.node("Conv", ["image", w], "conv1", kernel_shape=[3, 3])


def bad_concat_axis(g):
    x = g.conv("conv1", "image", 3, 8)
    return g.node("Concat", [x, "image"], "cat", axis=2)


ERRORS = [
    (bad_sigmoid, "sig", "Sigmoid", "op not supported"),
    (bad_clip, "relu6", "Clip", "op not supported"),
    (bad_pads, "conv1", "Conv", "asymmetric pads [1, 1, 2, 2]"),
    (bad_dilation, "conv1", "Conv", "dilation [2, 2]"),
    (bad_count_exclude_pad, "pool", "AveragePool", "count_include_pad=0"),
    (bad_broadcast_add, "shift_add", "Add", "only as the bias after a MatMul"),
    (bad_weight_computed, "conv1", "Conv", "not an initializer"),
    (bad_concat_axis, "cat", "Concat", "axis=2"),
]


def assert_one_line_error(call, path, node, op, why, out_dir):
    with pytest.raises(UserError) as e:
        call()
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: node '{node}' ({op}): "), msg
    assert why in msg, msg
    assert list(out_dir.iterdir()) == []  # nothing written, no temporary left behind


@pytest.mark.parametrize("build, node, op, why", ERRORS, ids=[e[0].__name__ for e in ERRORS])
def test_unsupported_is_one_line_and_writes_nothing(tmp_path, build, node, op, why):
    g = G()
    path = g.save(build(g), tmp_path / "in", check=False)
    out = tmp_path / "out"
    out.mkdir()
    assert_one_line_error(lambda: import_onnx(path, out / "m.yaml", out / "m.pth" if _has_torch() else None),
                          path, node, op, why, out)


def test_dynamic_height_names_the_input(tmp_path):
    g = G(h="H")
    path = g.save(g.relu("relu", g.conv("conv1", "image", 3, 8)), tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    assert_one_line_error(lambda: import_onnx(path, out / "m.yaml"), path, "image", "graph input",
                          "dynamic height ('H')", out)


def test_two_outputs_and_spec_errors(tmp_path):
    g = G()
    x = g.relu("relu", g.conv("conv1", "image", 3, 8))
    m = g.model(x)
    m.graph.output.append(helper.make_tensor_value_info("conv1_out", TensorProto.FLOAT, None))
    path = tmp_path / "two.onnx"
    onnx.save(m, str(path))
    with pytest.raises(UserError, match=r"node 'conv1_out' \(graph output\): the model has 2 outputs"):
        import_onnx(path, tmp_path / "m.yaml")
    with pytest.raises(UserError, match="no such file"):
        import_onnx(tmp_path / "missing.onnx", tmp_path / "m.yaml")
    (tmp_path / "junk.onnx").write_bytes(b"\xff\x00not a model")
    with pytest.raises(UserError, match="cannot read as an ONNX model"):
        import_onnx(tmp_path / "junk.onnx", tmp_path / "m.yaml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.onnx", "two.onnx"]


def test_missing_packages_give_install_hints(tmp_path, monkeypatch):
    g, out = residual()
    path = g.save(out, tmp_path)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(UserError, match="pip install torch"):
        import_onnx(path, tmp_path / "m.yaml", tmp_path / "m.pth")
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(UserError, match="pip install onnx"):
        import_onnx(path, tmp_path / "m.yaml")
    assert not (tmp_path / "m.yaml").exists()


# -- (g) weights and numerics ----------------------------------------------------------------------
def _has_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("which", list(MODELS))
def test_weights_fit_and_match_reference_evaluator(tmp_path, which):
    torch = pytest.importorskip("torch")
    from onnx.reference import ReferenceEvaluator

    from snn.runtime.measure.inputs import forward
    from snn.runtime.weights import expected, from_state_dict, load_file

    res, net, g, out = imported(tmp_path, MODELS[which], weights=True)
    assert res.weights_path == tmp_path / "model.pth"
    sd = torch.load(res.weights_path, weights_only=True)
    want = expected(net)
    assert set(sd) == set(want)
    assert {k: tuple(v.shape) for k, v in sd.items()} == want
    assert all(v.dtype == torch.float32 for v in sd.values())
    assert set(from_state_dict(net, sd, "test")) == set(want)
    sd = load_file(net, res.weights_path)

    x = np.random.default_rng(1).standard_normal((2, *net.input_shape)).astype(np.float32)
    ref = ReferenceEvaluator(g.model(out)).run(None, {"image": x})[0]
    with torch.no_grad():
        got, _ = forward(net, sd, torch.from_numpy(x))
    got = got.numpy().reshape(ref.shape)
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-6)
    assert err < 1e-4, (which, err)


def test_weights_keys_for_residual(tmp_path):
    torch = pytest.importorskip("torch")
    res, _, g, _ = imported(tmp_path, residual, weights=True)
    sd = torch.load(res.weights_path, weights_only=True)
    inits = {t.name: numpy_helper.to_array(t) for t in g.inits}
    assert np.array_equal(sd["conv1.weight"].numpy(), inits["conv1.w"])
    assert np.array_equal(sd["bn2.running_var"].numpy(), inits["bn2.var"])
    assert np.array_equal(sd["fc.weight"].numpy(), inits["fc.w"]) and np.array_equal(sd["fc.bias"].numpy(), inits["fc.b"])
    assert "conv1.bias" not in sd


# -- (h) the CLI -----------------------------------------------------------------------------------
def test_cli_import(tmp_path, monkeypatch):
    g, out = residual()
    path = g.save(out, tmp_path / "in", stem="tiny")
    runner = CliRunner()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    r = runner.invoke(cli.codegen_main, ["import", str(path)])
    assert r.exit_code == 0, r.output
    assert "spec: tiny.yaml" in r.output
    assert "tiny: 14 nodes, 3 convolutions (2 can run sparse)" in r.output
    assert load_spec(f"{cwd}/tiny.yaml").name == "tiny"
    assert ("weights: tiny.pth" in r.output) == _has_torch()
    r = runner.invoke(cli.codegen_main, ["import", str(path), "--out", "sub.yaml", "--name", "resnetish",
                                         *(["--weights-out", "w.pth"] if _has_torch() else [])])
    assert r.exit_code == 0, r.output
    assert "spec: sub.yaml" in r.output and "resnetish: 14 nodes" in r.output
    r = runner.invoke(cli.codegen_main, ["inspect", "sub.yaml"])
    assert r.exit_code == 0 and "3 convolutions (2 can run sparse)" in r.output

    bad = G()
    bad_path = bad.save(bad_sigmoid(bad), tmp_path / "in", stem="bad")
    r = runner.invoke(cli.codegen_main, ["import", str(bad_path)])
    assert r.exit_code == 1
    assert r.output.strip() == f"Error: {bad_path}: node 'sig' (Sigmoid): op not supported (supported: " \
                               f"{r.output.split('(supported: ')[1].strip()}"
    assert len(r.output.strip().splitlines()) == 1
    assert not any(p.name.startswith("bad") for p in cwd.iterdir())
