"""`snn-codegen import NAME` / snn.import_torch: small nn.Modules and torchvision's classification models,
traced with torch.fx, become specs that load_spec accepts, named after their modules; their weights fit
runtime.weights and compute what the module computes; everything unsupported is one line naming the
module or node and its op, and nothing is written then; the eight checked-in specs are the importer's
output. Needs torch (CPU); the torchvision tests also need torchvision."""
from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import snn  # noqa: E402
from snn import cli  # noqa: E402
from snn.codegen.errors import UserError  # noqa: E402
from snn.codegen.importer import import_torch  # noqa: E402
from snn.codegen.importer.torch_model import convert  # noqa: E402
from snn.codegen.spec import SPECS_DIR, load_spec, parse_spec, tensor_shapes  # noqa: E402

try:
    import torchvision  # noqa: F401
    HAVE_TORCHVISION = True
except ImportError:
    HAVE_TORCHVISION = False
needs_torchvision = pytest.mark.skipif(not HAVE_TORCHVISION, reason="needs torchvision")

SHIPPED = ("resnet50", "resnet101", "resnet152", "densenet121", "densenet169", "densenet201", "vgg16", "vgg19")


# -- the models ------------------------------------------------------------------------------------
class Block(nn.Module):
    """torchvision's BasicBlock: one ReLU module called twice, `out += identity`, a downsample branch."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout, eps=1e-3)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(Block(8, 8, 1), Block(8, 16, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer1(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


class Dense(nn.Module):
    """DenseNet-like: torch.cat (list and tuple), functional relu (in place too), F.avg_pool2d, mean."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.a = nn.Sequential(nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1))
        self.b = nn.Sequential(nn.BatchNorm2d(12), nn.ReLU(), nn.Conv2d(12, 4, 3, padding=1))
        self.trans = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        x = F.relu(self.stem(x))
        y = torch.cat([x, self.a(x)], 1)
        y = torch.cat((y, self.b(y)), dim=1)
        y = F.avg_pool2d(F.relu(self.trans(y), inplace=True), 2)
        return y.mean([2, 3])


class Grouped(nn.Module):
    """Grouped, depthwise and pointwise convs with biases; strides, pair kernels and paddings; pools."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, (3, 5), stride=(2, 1), padding=(1, 2))
        self.group = nn.Conv2d(16, 16, 3, padding=1, groups=4)
        self.depthwise = nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16)
        self.same = nn.Conv2d(16, 16, 5, padding="same", bias=False)
        self.point = nn.Conv2d(16, 32, 1)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.apool = nn.AvgPool2d(3, 1, 1)
        self.adapt = nn.AdaptiveAvgPool2d((2, None))
        self.drop = nn.Dropout(0.5)
        self.ident = nn.Identity()
        self.fc = nn.Linear(32 * 2 * 4, 10, bias=False)

    def forward(self, x):
        x = self.group(F.relu(self.stem(x)))
        x = F.relu(self.depthwise(x)).relu_()
        x = self.point(self.same(x)).relu()
        x = self.apool(self.pool(x))
        x = self.ident(self.adapt(x))
        return self.fc(self.drop(x.view(x.size(0), -1)))


class InPlace(nn.Module):
    """In-place ops whose results are not assigned: later readers see the modified tensor."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        x = self.conv1(x)
        F.relu(x, inplace=True)   # x itself is now relu'd
        y = self.conv2(x)
        y.add_(x)
        unused = torch.sigmoid(x) * 2  # noqa: F841 - computed, never read: not part of the network
        return self.conv3(y).flatten(1)


def randomize(module, seed=0):
    """Random weights and BN statistics, so the numbers checked mean something."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in module.state_dict().items():
            if t.dtype.is_floating_point:
                t.copy_(torch.rand(t.shape, generator=g) + 0.5 if name.endswith("running_var")
                        else torch.randn(t.shape, generator=g) * 0.3)
    return module.eval()


def imported(tmp_path, module, shape=(3, 32, 32), weights=True, **kw):
    res = import_torch(module, tmp_path / "model.yaml", tmp_path / "model.pth" if weights else None,
                       input_shape=shape, **kw)
    return res, load_spec(res.spec_path)


def assert_computes_the_same(module, res, net, batch=2):
    """The spec interpreted node by node on the weights file == the module's own forward."""
    from snn.runtime.measure.inputs import forward
    from snn.runtime.weights import load_file
    sd = load_file(net, res.weights_path)
    x = torch.randn(batch, *net.input_shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = module.eval()(x)
        got, _ = forward(net, sd, x)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max()


def ops(net):
    return [(n.name, n.op) for n in net.nodes]


# -- (a) residual ----------------------------------------------------------------------------------
def test_residual_names_follow_the_modules(tmp_path):
    m = randomize(Residual())
    res, net = imported(tmp_path, m)
    assert res.nodes == len(net.nodes) == 23 and res.convs == 6 and res.sparse_convs == 5
    names = [n.name for n in net.nodes]
    assert names[:4] == ["conv1", "bn1", "relu", "maxpool"]
    # a ReLU module called twice in a block: numbered in call order; the block's `+=` is its add
    assert [n for n in names if n.startswith("layer1.0.")] == [
        "layer1.0.conv1", "layer1.0.bn1", "layer1.0.relu1", "layer1.0.conv2", "layer1.0.bn2", "layer1.0.add",
        "layer1.0.relu2"]
    add = net.node("layer1.1.add")
    assert add.op == "add" and add.inputs == ("layer1.1.bn2", "layer1.1.downsample.1")
    assert net.node("layer1.0.add").inputs == ("layer1.0.bn2", "maxpool")
    assert net.node("layer1.0.relu2").inputs == ("layer1.0.add",)
    assert net.node("layer1.0.bn2")["eps"] == 1e-3 and net.node("layer1.0.bn1")["eps"] == 1e-5
    assert net.node("avgpool").op == "global_avgpool" and net.node("flatten").inputs == ("avgpool",)
    assert net.output == "fc" and net.node("fc").shape == (10,)
    assert net.node("layer1.1.downsample.0").param == "layer1.1.downsample.0"
    assert set(tensor_shapes(net)) <= set(m.state_dict())
    assert_computes_the_same(m, res, net)


def test_weights_file_round_trips_to_the_params(tmp_path):
    m = randomize(Residual())
    res, net = imported(tmp_path, m)
    sd = torch.load(res.weights_path, weights_only=True)
    want = tensor_shapes(net)
    assert {k: tuple(v.shape) for k, v in sd.items()} == want
    assert all(v.dtype == torch.float32 for v in sd.values())
    own = m.state_dict()
    assert all(torch.equal(sd[k], own[k]) for k in sd)
    assert "layer1.1.bn1.running_var" in sd and "fc.bias" in sd and "conv1.bias" not in sd
    assert not any(k.endswith("num_batches_tracked") for k in sd)


# -- (b) concat, functional relu, mean -------------------------------------------------------------
def test_concat_and_functional_ops(tmp_path):
    m = randomize(Dense())
    res, net = imported(tmp_path, m, shape=(3, 16, 16))
    assert ops(net) == [("stem", "conv"), ("relu1", "relu"), ("a.0", "batchnorm"), ("a.1", "relu"), ("a.2", "conv"),
                        ("cat1", "concat"), ("b.0", "batchnorm"), ("b.1", "relu"), ("b.2", "conv"),
                        ("cat2", "concat"), ("trans", "conv"), ("relu2", "relu"), ("avgpool1", "avgpool"),
                        ("avgpool2", "global_avgpool"), ("flatten", "flatten")]
    assert net.node("cat1").inputs == ("relu1", "a.2") and net.node("cat2").shape == (16, 16, 16)
    assert net.node("avgpool1")["kernel"] == (2, 2) and net.node("flatten").shape == (8,)
    # a.2 and b.2 read a ReLU; trans reads a concat that holds conv outputs
    assert {c.name for c in net.sparse_convs} == {"a.2", "b.2"}
    assert_computes_the_same(m, res, net)


# -- (c) grouped convs, strides, paddings, pools ---------------------------------------------------
def test_grouped_strided_and_pooled(tmp_path):
    m = randomize(Grouped())
    res, net = imported(tmp_path, m, shape=(3, 32, 16))
    n = net.node
    assert n("stem")["kernel"] == (3, 5) and n("stem")["stride"] == (2, 1) and n("stem")["padding"] == (1, 2)
    assert n("stem").shape == (16, 16, 16)
    assert n("group")["groups"] == 4 and n("depthwise")["groups"] == 16 and n("point")["groups"] == 1
    assert n("same")["padding"] == (2, 2) and not n("same")["bias"] and n("point")["bias"]
    assert n("pool")["ceil_mode"] and n("pool").shape == (32, 4, 4)
    assert n("apool")["padding"] == (1, 1) and n("apool")["stride"] == (1, 1)
    assert n("adapt").op == "adaptive_avgpool" and n("adapt")["output_size"] == (2, 4)
    assert n("flatten").inputs == ("adapt",) and n("fc").inputs == ("flatten",) and not n("fc")["bias"]
    # F.relu, F.relu, Tensor.relu_, Tensor.relu at the top: one short name, numbered in call order
    assert [x.name for x in net.nodes if x.op == "relu"] == ["relu1", "relu2", "relu3", "relu4"]
    assert net.node("relu3").inputs == ("relu2",) and net.node("same").inputs == ("relu3",)
    assert not any(x.name in ("drop", "ident") for x in net.nodes)
    # grouped convs and the stem run on cuDNN; the pointwise conv reads a conv, not a ReLU
    assert [c.name for c in net.sparse_convs] == ["same"]
    assert_computes_the_same(m, res, net)
    text = res.spec_path.read_text()
    assert "{name: apool, op: avgpool, input: pool, kernel: 3, stride: 1, padding: 1}" in text
    assert "{name: fc, op: linear, input: flatten, in_features: 256, out_features: 10, bias: false, param: fc}" in text


def test_in_place_ops_and_dead_code(tmp_path):
    m = randomize(InPlace())
    res, net = imported(tmp_path, m, shape=(3, 8, 8))
    assert ops(net) == [("conv1", "conv"), ("relu", "relu"), ("conv2", "conv"), ("add", "add"),
                        ("conv3", "conv"), ("flatten", "flatten")]
    assert net.node("conv2").inputs == ("relu",) and net.node("add").inputs == ("conv2", "relu")
    assert net.node("conv3").inputs == ("add",)
    assert_computes_the_same(m, res, net)


def test_names_stay_unique_and_training_mode_is_restored(tmp_path):
    class Clash(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)
            self.conv1 = nn.Conv2d(4, 4, 1)
            self.features = nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU())

        def forward(self, x):
            x = self.features(x)
            y = self.features[1](self.conv(x))
            return self.conv1(self.conv(y) + x)

    m = randomize(Clash()).train()
    res, net = imported(tmp_path, m, shape=(3, 8, 8))
    names = [n.name for n in net.nodes]
    assert len(set(names)) == len(names)
    assert "conv1" in names and net.node("conv1").param == "conv1"          # the module keeps its name
    assert [n.name for n in net.nodes if n.param == "conv"] == ["conv1_2", "conv2"]
    assert [n.name for n in net.nodes if n.op == "relu"] == ["features.1_1", "features.1_2"]
    assert m.training and all(x.training for x in m.modules())
    assert_computes_the_same(m, res, net)


# -- (d) what is refused ---------------------------------------------------------------------------
class Act(nn.Module):
    """A conv, then `act`: a module (traced as a call to module 'act') or a function (traced as its op)."""
    def __init__(self, act):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.act = act

    def forward(self, x):
        return self.act(self.conv(x))


class Gate(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent: torch.fx cannot trace it
            return x
        return -x


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.gate = Gate()

    def forward(self, x):
        return self.gate(self.conv(x))


class TwoOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        return y, F.relu(y)


REFUSED = [
    (lambda: Act(nn.SiLU()), "module 'act' (SiLU)", "op not supported"),
    (lambda: Act(nn.Hardswish()), "module 'act' (Hardswish)", "op not supported"),
    (lambda: Act(F.gelu), "node 'gelu' (torch.nn.functional.gelu)", "op not supported"),
    (lambda: Act(torch.sigmoid), "node 'sigmoid' (torch.sigmoid)", "op not supported"),
    (lambda: Gated(), "module 'gate' (Gate)", "torch.fx cannot trace its forward"),
    (lambda: Act(nn.Conv2d(4, 4, 3, dilation=2)), "module 'act' (Conv2d)", "dilation [2, 2] is not supported"),
    (lambda: Act(nn.Conv2d(4, 4, 3, padding_mode="reflect")), "module 'act' (Conv2d)", "padding_mode 'reflect'"),
    (lambda: Act(nn.BatchNorm2d(4, affine=False)), "module 'act' (BatchNorm2d)", "affine=True"),
    (lambda: Act(nn.Linear(4, 2)), "module 'act' (Linear)", "needs a flat [N, features] input"),
    (lambda: Act(nn.Conv2d(5, 4, 1)), "module 'act' (Conv2d)", "takes 5 input channels, its input has 4"),
    (lambda: Act(lambda y: torch.cat([y, y], 1)), "node 'cat' (torch.cat)", "same tensor twice"),
    (lambda: Act(lambda y: torch.cat([y, F.relu(y)], 2)), "node 'cat' (torch.cat)", "dim=2"),
    (lambda: Act(lambda y: y + 1), "node 'add' (operator.add)", "adds a constant"),
    (lambda: Act(lambda y: y.view(y.size(0), 2, -1)), "node 'view' (Tensor.view)", "reshapes to ['N', 2, -1]"),
    (lambda: Act(lambda y: torch.flatten(y)), "node 'flatten' (torch.flatten)", "start_dim=1"),
    (lambda: Act(lambda y: F.dropout(y, 0.3)), "node 'dropout' (torch.nn.functional.dropout)", "training=True"),
    (lambda: TwoOut(), "node 'output' (output)", "forward returns 2 values"),
]


@pytest.mark.parametrize("make, where, why", REFUSED, ids=[w.split("'")[1] + ":" + y[:20] for _, w, y in REFUSED])
def test_unsupported_is_one_line_and_writes_nothing(tmp_path, make, where, why):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UserError) as e:
        import_torch(make(), out / "m.yaml", out / "m.pth", input_shape=(3, 8, 8))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{type(make()).__name__}: ")
    assert where in msg and why in msg, msg
    assert list(out.iterdir()) == []


def test_bad_arguments(tmp_path):
    with pytest.raises(UserError, match="expected an nn.Module or a torchvision model name, got int"):
        import_torch(3, tmp_path / "m.yaml")
    with pytest.raises(UserError, match=r"input shape \(3, 0, 8\): expected \(channels, height, width\)"):
        import_torch(Residual(), tmp_path / "m.yaml", input_shape=(3, 0, 8))
    with pytest.raises(UserError, match="does not exist"):
        import_torch(Residual(), tmp_path / "no" / "m.yaml")
    with pytest.raises(UserError, match="the spec and the weights cannot be the same file"):
        import_torch(Residual(), tmp_path / "m.yaml", tmp_path / "m.yaml")
    with pytest.raises(UserError, match=r"module 'conv1' \(Conv2d\): takes 3 input channels, its input has 1"):
        import_torch(Residual(), tmp_path / "m.yaml", input_shape=(1, 32, 32))
    assert list(tmp_path.iterdir()) == []


def test_missing_packages_give_install_hints(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(UserError, match="needs torchvision: pip install torchvision"):
        import_torch("resnet18", tmp_path / "m.yaml")
    assert import_torch(Residual(), tmp_path / "m.yaml", input_shape=(3, 16, 16)).nodes == 23
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(UserError, match="pip install torch torchvision"):
        import_torch("resnet18", tmp_path / "n.yaml")
    assert not (tmp_path / "n.yaml").exists()


# -- (e) torchvision ---------------------------------------------------------------------------------
@needs_torchvision
@pytest.mark.parametrize("name, nodes, convs, sparse", [("resnet18", 69, 20, 19), ("resnext50_32x4d", 175, 53, 36),
                                                         ("vgg11_bn", 36, 8, 7), ("densenet121", 427, 120, 119),
                                                         ("wide_resnet50_2", 175, 53, 52), ("squeezenet1_1", 65, 26, 25)])
def test_torchvision_models_import(tmp_path, name, nodes, convs, sparse):
    res = import_torch(name, tmp_path / f"{name}.yaml")
    assert res.weights_path is None and not (tmp_path / f"{name}.pth").exists()
    net = parse_spec(res.spec_path.read_text(), res.spec_path)
    assert (net.name, len(net.nodes), len(net.convs), len(net.sparse_convs)) == (name, nodes, convs, sparse)
    assert net.node(net.output).shape == (1000,)
    assert res.spec_path.read_text().startswith(f"# {name}: imported from torchvision's {name} by `snn-codegen import`\n")
    if name == "resnext50_32x4d":  # the 3x3 convs are grouped (32 groups), and so not sparse
        assert net.node("layer1.0.conv2")["groups"] == 32 and net.node("layer1.0.conv1")["groups"] == 1
        assert "layer1.0.conv2" not in {c.name for c in net.sparse_convs}


@needs_torchvision
def test_torchvision_weights_round_trip_and_compute_the_same(tmp_path):
    from snn.codegen.importer.torch_model import _torchvision_model
    res = import_torch("resnet18", tmp_path / "r.yaml", tmp_path / "r.pth", input_shape=(3, 64, 64))
    net = load_spec(res.spec_path)
    assert net.input_shape == (3, 64, 64)
    # seeded: the same random weights on every import
    sd = torch.load(res.weights_path, weights_only=True)
    again = _torchvision_model("resnet18", weights=True).state_dict()
    assert set(sd) == set(tensor_shapes(net)) and all(torch.equal(sd[k], again[k]) for k in sd)
    model = randomize(_torchvision_model("resnet18", weights=True))
    res = import_torch(model, tmp_path / "m.yaml", tmp_path / "m.pth", input_shape=(3, 64, 64), name="resnet18")
    assert load_spec(res.spec_path).nodes == net.nodes  # a module and its torchvision name: the same spec
    assert_computes_the_same(model, res, load_spec(res.spec_path))


@needs_torchvision
def test_googlenet_and_inception_sizes():
    g = parse_spec(convert("googlenet").text)
    assert g.node("conv1.bn")["eps"] == 1e-3 and g.node("maxpool1")["ceil_mode"]
    assert g.node("inception3a.cat").op == "concat" and len(g.node("inception3a.cat").inputs) == 4
    i = parse_spec(convert("inception_v3").text)
    assert i.input_shape == (3, 299, 299) and i.node("Mixed_7c.cat1").inputs[0] == "Mixed_7c.branch3x3_2a.relu"


@needs_torchvision
@pytest.mark.parametrize("name, why", [
    ("mobilenet_v2", "mobilenet_v2: module 'features.0.2' (ReLU6): op not supported"),
    ("efficientnet_b0", "efficientnet_b0: module 'features.0.2' (SiLU): op not supported"),
    ("vit_b_16", "vit_b_16: node 'reshape' (Tensor.reshape): reshapes to ['N', 768, 196]"),
    ("fasterrcnn_resnet50_fpn", "is not an image classification model"),
    ("resnet5O", "resnet5O: no such file, nor a torchvision classification model (did you mean resnet50"),
])
def test_torchvision_refusals(tmp_path, name, why):
    with pytest.raises(UserError) as e:
        import_torch(name, tmp_path / "m.yaml", tmp_path / "m.pth")
    assert why in str(e.value) and "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


@needs_torchvision
@pytest.mark.parametrize("name", SHIPPED)
def test_checked_in_specs_are_the_importers_output(name):
    assert convert(name).text == (SPECS_DIR / f"{name}.yaml").read_text()


# -- (f) the CLI and the API -----------------------------------------------------------------------
@needs_torchvision
def test_cli_import_torchvision(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    r = runner.invoke(cli.codegen_main, ["import", "resnet50"])
    assert r.exit_code == 0, r.output
    assert "spec: resnet50.yaml" in r.output and "resnet50: 175 nodes, 53 convolutions (52 can run sparse)" in r.output
    assert "weights not written" in r.output and not (tmp_path / "resnet50.pth").exists()
    assert (tmp_path / "resnet50.yaml").read_text() == (SPECS_DIR / "resnet50.yaml").read_text()

    r = runner.invoke(cli.codegen_main, ["import", "resnet18", "--out", "r.yaml", "--weights-out", "r.pth",
                                         "--name", "tiny", "--input-shape", "3,64,64"])
    assert r.exit_code == 0, r.output
    net = load_spec(tmp_path / "r.yaml")
    assert net.name == "tiny" and net.input_shape == (3, 64, 64) and "weights: r.pth" in r.output
    assert set(torch.load(tmp_path / "r.pth", weights_only=True)) == set(tensor_shapes(net))

    for args, why in [(["resnet5O"], "resnet5O: no such file, nor a torchvision classification model"),
                      (["mobilenet_v2"], "module 'features.0.2' (ReLU6): op not supported"),
                      (["resnet18", "--input-shape", "3,64"], "--input-shape '3,64': expected C,H,W"),
                      (["no/such.model"], "no/such.model: no such file (MODEL is an .onnx file or a torchvision")]:
        r = runner.invoke(cli.codegen_main, ["import", *args, "--out", "bad.yaml"])
        assert r.exit_code != 0
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and why in lines[0], r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.pth", "r.yaml", "resnet50.yaml"]


def test_api():
    assert "import_torch" in snn.__all__ and snn.import_torch.__doc__
    assert "snn.import_torch" in snn.__doc__
