"""The checked-in specs of the paper's eight networks against known facts about torchvision's models."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from snn.codegen.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "network_specs"

# (convs incl. downsample, GMACs (conv + linear), parameters as torchvision counts them (BN weight+bias included))
FACTS = {
    "resnet50": (53, 4.09, 25_557_032),
    "resnet101": (104, 7.80, 44_549_160),
    "resnet152": (155, 11.5, 60_192_808),
    "densenet121": (120, 2.83, 7_978_856),
    "densenet169": (168, 3.36, 14_149_480),
    "densenet201": (200, 4.3, 20_013_928),
    "vgg16": (13, 15.47, 138_357_544),
    "vgg19": (16, 19.6, 143_667_240),
}


@pytest.mark.parametrize("name", FACTS)
def test_network_facts(name):
    convs, gmacs, params = FACTS[name]
    net = load_spec(SPECS / f"{name}.yaml")
    assert net.name == name
    assert len(net.convs) == convs
    # a DenseNet's transition convs run on the pooled map (spec.pools_first): a quarter of torchvision's MACs
    moved = sum(c.macs for c in net.convs if c.input_op == "avgpool")
    assert (moved > 0) == name.startswith("densenet")
    assert (net.macs + 3 * moved) / 1e9 == pytest.approx(gmacs, rel=0.02)
    assert net.params == params
    assert net.node(net.output).shape == (1000,)
    assert all(c.param for c in net.convs), "every conv maps to a torchvision parameter"


def test_resnet_v15_puts_the_stride_in_the_3x3_conv():
    net = load_spec(SPECS / "resnet50.yaml")
    by_name = {c.name: c.shape for c in net.convs}
    assert by_name["layer2.0.conv1"].stride == (1, 1)
    assert by_name["layer2.0.conv2"].stride == (2, 2) and by_name["layer2.0.conv2"].R == 3
    assert by_name["layer2.0.downsample.0"].stride == (2, 2)
    assert by_name["layer4.2.conv2"].H == 7


def test_densenet_inputs_come_through_bn_relu():
    net = load_spec(SPECS / "densenet201.yaml")
    c = {c.name: c for c in net.convs}
    assert c["features.denseblock4.denselayer32.conv1"].shape.C == 896 + 31 * 32
    assert c["features.denseblock1.denselayer2.conv2"].input_op == "relu"
    assert c["features.transition3.conv"].shape.N == c["features.transition3.conv"].shape.C // 2


def test_checked_in_specs_match_the_generator(tmp_path):
    pytest.importorskip("torch")  # the generator imports torchvision's models through snn's PyTorch importer
    pytest.importorskip("torchvision")
    r = subprocess.run([sys.executable, str(SPECS / "generate.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, str(SPECS / "generate.py"), "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0 and len(list(tmp_path.glob("*.yaml"))) == 8
    (tmp_path / "vgg16.yaml").write_text("# edited\n")
    r = subprocess.run([sys.executable, str(SPECS / "generate.py"), "--check", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "vgg16.yaml" in r.stderr


def test_generator_without_torch_says_so_in_one_line(tmp_path):
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    env = {**os.environ, "PYTHONPATH": str(fake.parent)}
    r = subprocess.run([sys.executable, str(SPECS / "generate.py"), "--check"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "needs torch, torchvision and snn installed" in r.stderr
