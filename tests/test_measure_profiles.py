"""measure.profiles and the ReLU sources of measure.inputs: conv roles and stages, resolving a
--sparsity-profile (numbers, comma lists, `trained`, shipped names, files), the validation of profile
files, and (with torch, on the CPU) applying a profile to the weights."""
import re
from collections import Counter
from pathlib import Path

import pytest
from measurefakes import TINY
from snn.codegen.spec import load_spec, parse_spec, shipped_specs
from snn.runtime.errors import RunError
from snn.runtime.measure import inputs, profiles

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def nets():
    return {}


def net_of(nets, name):
    if name not in nets:
        nets[name] = load_spec(name)
    return nets[name]


def test_relu_sources_and_shift_targets():
    net = load_spec(ROOT / "network_specs/resnet152.yaml")
    src = inputs.relu_sources(net)
    assert "conv1" not in src                       # the stem reads the image
    assert src["layer1.0.conv1"] == {"relu"}        # through the maxpool
    assert profiles.shift_target(net, "layer1.0.relu1") == "layer1.0.bn1.bias"
    # conv3 + bn3 + identity -> relu: the bn of the main path (or the downsample's) moves the sum
    assert profiles.shift_target(net, "layer1.0.relu3") in ("layer1.0.bn3.bias", "layer1.0.downsample.1.bias")
    vgg = load_spec(ROOT / "network_specs/vgg19.yaml")
    assert profiles.shift_target(vgg, "features.1") == "features.0.bias"  # no BN: the conv's own bias
    dn = load_spec(ROOT / "network_specs/densenet201.yaml")
    s = inputs.relu_sources(dn)
    assert all(len(v) == 1 for v in s.values())      # every DenseNet conv input is one pre-activation relu


def test_roles_on_shipped_specs(nets):
    r = profiles.conv_roles(net_of(nets, "resnet152"))
    assert r["layer1.0.conv1"] == {"block_input", "bottleneck"}
    assert r["layer2.0.downsample.0"] == {"block_input", "shortcut"}
    assert r["layer3.5.conv1"] == {"block_input", "bottleneck"}
    assert r["layer3.5.conv2"] == {"3x3", "spatial"}
    assert r["layer3.5.conv3"] == {"expand"}
    assert r["conv1"] == {"spatial"}                 # the 7x7 stem
    d = profiles.conv_roles(net_of(nets, "densenet201"))
    assert d["features.denseblock2.denselayer1.conv1"] == {"bottleneck"}
    assert d["features.denseblock2.denselayer1.conv2"] == {"3x3", "spatial"}
    assert d["features.transition1.conv"] == {"transition"}
    v = profiles.conv_roles(net_of(nets, "vgg19"))
    assert v["features.2"] == {"3x3", "spatial"} and v["features.5"] == {"block_input", "3x3", "spatial"}
    assert all(r <= set(profiles.ROLES) for n in shipped_specs() for r in profiles.conv_roles(net_of(nets, n)).values())


def test_stages(nets):
    v = profiles.conv_stages(net_of(nets, "vgg19"))
    assert "features.0" not in v                     # the stem reads the image: no stage, no target
    assert [v[c] for c in ("features.2", "features.5", "features.10", "features.19", "features.28", "features.34")] \
        == [1, 2, 3, 4, 5, 5]
    r = profiles.conv_stages(net_of(nets, "resnet152"))
    assert (r["layer1.0.conv1"], r["layer2.0.conv2"], r["layer2.0.conv3"], r["layer4.2.conv3"]) == (1, 1, 2, 4)
    assert sorted(set(r.values())) == [1, 2, 3, 4]


@pytest.mark.parametrize("spec", shipped_specs())
def test_trained_covers_every_relu_fed_conv(nets, spec):
    net = net_of(nets, spec)
    p = profiles.resolve_profile("trained", net)
    src = inputs.relu_sources(net)
    assert set(p.targets) == set(src) == set(p.origin) == set(p.rule)
    assert all(0 < t < 1 for t in p.targets.values()) and all(i >= 1 for i in p.rule.values())
    assert set(p.relu_targets) == set().union(*src.values())
    for c, rs in src.items():                        # a ReLU's target is that of every conv reading it
        assert all(p.relu_targets[r] == p.targets[c] for r in rs)
    assert p.path and Path(p.path).parent == profiles.PROFILES_DIR and p.description and "\n" not in p.description


def test_trained_values_and_origins(nets):
    r152 = profiles.resolve_profile("trained", net_of(nets, "resnet152"))
    assert r152.name == "resnet-trained"
    assert r152.targets["layer2.0.conv1"] == r152.targets["layer2.0.downsample.0"] == 0.32
    assert (r152.targets["layer3.5.conv2"], r152.targets["layer3.5.conv3"]) == (0.72, 0.75)
    assert r152.origin["layer4.0.downsample.0"] == "measured" and r152.origin["layer4.1.conv1"] == "assumed"
    r50 = profiles.resolve_profile("resnet-trained.yaml", net_of(nets, "resnet50"))
    assert r50.origin["layer1.0.conv2"] == "assumed (measured on resnet152)"
    assert r50.origin["layer4.2.conv2"] == "assumed"
    dn = profiles.resolve_profile("densenet-trained", net_of(nets, "densenet121"))
    assert dn.targets["features.transition3.conv"] == 0.64
    assert dn.targets["features.denseblock4.denselayer16.conv2"] == 0.76
    vgg = profiles.resolve_profile("trained", net_of(nets, "vgg16"))
    assert Counter(vgg.origin.values()) == {"assumed": 9, "published": 3}
    assert vgg.targets["features.28"] == 0.84


def test_numbers(nets):
    net = net_of(nets, "resnet152")
    src = inputs.relu_sources(net)
    u = profiles.resolve_profile("0.7", net)
    assert u.name == "0.7" and u.path is None and set(u.targets) == set(src)
    assert set(u.targets.values()) == {0.7} and set(u.origin.values()) == {"uniform"} and set(u.rule.values()) == {0}
    s = profiles.resolve_profile("0.5, 0.6,0.7,0.8", net)
    assert s.name == "0.5-0.6-0.7-0.8" and set(s.origin.values()) == {"per-stage"}
    order = [n.name for n in net.nodes]
    t = [s.relu_targets[r] for r in sorted(s.relu_targets, key=order.index)]
    assert len(t) == 150 and t == sorted(t) and t.count(0.5) == 38 and t.count(0.8) == 37
    for bad in ("", "1.0", "-0.1", "0.5,,abc", "1.2", "nan"):
        with pytest.raises(RunError, match="--sparsity-profile") as e:
            profiles.resolve_profile(bad, net)
        assert "\n" not in str(e.value)


def test_names_and_unknowns(nets):
    assert profiles.shipped_profiles() == ["densenet-trained", "resnet-trained", "vgg-trained"]
    tiny = parse_spec(TINY)
    with pytest.raises(RunError) as e:
        profiles.resolve_profile("trained", tiny)
    msg = str(e.value)
    assert "tinybench" in msg and "resnet-trained" in msg and "vgg-trained" in msg and "\n" not in msg
    with pytest.raises(RunError) as e:
        profiles.resolve_profile("alexnet-trained", tiny)
    assert "densenet-trained, resnet-trained, vgg-trained" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(RunError, match="matches no conv of tinybench.*file is for resnet50"):
        profiles.resolve_profile("resnet-trained", tiny)


GOOD = "  - {sparsity: 0.5, origin: assumed}\n"


@pytest.mark.parametrize("body,spec,expect", [
    ("rules:\n  - [0.5]\n" + GOOD, "tiny", r"rule 1: must be a mapping"),
    ("rules:\n  - {role: 3x3, sparsity: 0.6, origin: assumed, colour: red}\n" + GOOD, "tiny",
     r"rule 1 \{role: 3x3\}: unknown key\(s\) colour"),
    ("rules:\n  - {stage: 1, sparsity: 1.2, origin: assumed}\n" + GOOD, "tiny", r"rule 1 \{stage: 1\}: 'sparsity' must be"),
    ("rules:\n  - {stage: [1, 2], origin: assumed}\n" + GOOD, "tiny", r"rule 1 \{stage: \[1, 2\]\}: needs 'sparsity'"),
    ("rules:\n" + GOOD + "  - {role: expnd, sparsity: 0.6, origin: assumed}\n", "tiny",
     r"rule 2 \{role: expnd\}: unknown role 'expnd' \(roles: block_input, 3x3"),
    ("rules:\n  - {layers: 'conv*', sparsity: 0.6, origin: guessed}\n" + GOOD, "tiny",
     r"rule 1 \{layers: conv\*\}: 'origin' must be one of measured, assumed, published"),
    ("rules:\n  - {stage: one, sparsity: 0.6, origin: assumed}\n" + GOOD, "tiny", r"rule 1 \{stage: one\}: 'stage' must be"),
    ("rules:\n  - {layers: 'layer9.*', sparsity: 0.6, origin: assumed}\n" + GOOD, "tiny",
     r"rule 1 \{layers: layer9\.\*\}: matches no conv of tinybench"),
    ("rules:\n" + GOOD + "  - {role: 3x3, sparsity: 0.6, origin: assumed}\n", "tiny",
     (r"rule 2 \{role: 3x3\}: takes no conv of tinybench: every conv it matches is taken by an earlier rule "
      r"\(rule 1 \{\}: 2, e\.g\. conv2\)")),
    ("rules:\n  - {role: 3x3, sparsity: 0.6, origin: assumed}\n", "tiny",
     r"no rule covers conv 'conv3' of tinybench \(roles: block_input, bottleneck; stage 1\); add a default rule"),
    ("rules:\n  - {layers: layer2.0.conv1, sparsity: 0.3, origin: measured}\n" + GOOD, "resnet50",
     (r"convs 'layer2\.0\.conv1' \(rule 1 \{layers: layer2\.0\.conv1\}: 0\.3\) and 'layer2\.0\.downsample\.0' "
      r"\(rule 2 \{\}: 0\.5\) read the same ReLU 'layer1\.2\.relu3' but get different targets")),
    ("rules: [\n  {sparsity: 0.5\n", "tiny", r"YAML syntax error at line \d+, column \d+"),
    ("name: x\n", "tiny", r"needs 'rules'"),
    ("- {sparsity: 0.5, origin: assumed}\n", "tiny", r"expected a mapping with 'rules'"),
    ("rule:\n" + GOOD, "tiny", r"unknown key\(s\) rule"),
])
def test_file_validation(tmp_path, nets, body, spec, expect):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    net = parse_spec(TINY) if spec == "tiny" else net_of(nets, spec)
    with pytest.raises(RunError) as e:
        profiles.resolve_profile(str(path), net)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)), msg
    assert re.search(expect, msg), msg


def test_file_rules_first_match_wins(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: mine\ndescription: a test\nrules:\n"
                    "  - {layers: [conv3, nothing], sparsity: 0.4, origin: measured}\n"
                    "  - {role: [block_input, expand], stage: 1, sparsity: 0.6, origin: published, note: x}\n"
                    "  - {sparsity: 0.8, origin: assumed}\n")
    p = profiles.resolve_profile(str(path), parse_spec(TINY))
    assert (p.name, p.description, p.path) == ("mine", "a test", str(path))
    assert p.targets == {"conv2": 0.6, "conv3": 0.4, "conv4": 0.8}
    assert p.rule == {"conv2": 2, "conv3": 1, "conv4": 3}
    assert p.origin == {"conv2": "published", "conv3": "measured", "conv4": "assumed"}
    assert p.relu_targets == {"relu1": 0.6, "relu2": 0.4, "relu3": 0.8}


def test_apply_profile_reaches_targets_through_a_maxpool(tmp_path):
    torch = pytest.importorskip("torch")
    from snn.runtime import weights
    net = parse_spec(TINY)
    sd, _, _ = weights.load(net, None, seed=1)
    x = weights.synthetic_images(8, net.input_shape, seed=2)
    path = tmp_path / "p.yaml"
    path.write_text("rules:\n  - {layers: conv2, sparsity: 0.8, origin: assumed}\n"
                    "  - {layers: conv3, sparsity: 0.3, origin: assumed}\n  - {sparsity: 0.6, origin: assumed}\n")
    for arg in ("0.7", "0.5,0.9", str(path)):
        prof = profiles.resolve_profile(arg, net)
        new, report = profiles.apply_profile(net, sd, x, prof)
        assert [r["conv"] for r in report] == ["conv2", "conv3", "conv4"]
        assert report[0]["relus"] == ["relu1"] and "block_input" in report[0]["roles"]  # conv2 reads maxpool(relu1)
        assert report[2]["param"] == "conv3.bias" and "note" not in report[2]
        for r in report:
            assert abs(r["realized"] - r["target"]) < 0.02, (arg, r)
            assert set(r) == {"conv", "target", "realized", "origin", "rule", "roles", "stage", "relus", "param"}
        # the shifted weights alone give what the report says (the hooks changed nothing else)
        seen = {}

        def zeros(n, v, seen=seen):
            seen[n.name] = float((v == 0).float().mean())
        inputs.forward(net, new, x, on_conv=zeros)
        assert all(abs(seen[r["conv"]] - r["realized"]) < 1e-3 for r in report)
        assert torch.equal(new["bn2.weight"], sd["bn2.weight"]) and not torch.equal(new["bn1.bias"], sd["bn1.bias"])
