"""measure.profiles and the ReLU sources of measure.inputs, without a GPU or torch: parsing a profile, its
stages, and which bias moves which ReLU."""
from pathlib import Path

import pytest

from snn.codegen.spec import load_spec
from snn.runtime.errors import RunError
from snn.runtime.measure import inputs, profiles

ROOT = Path(__file__).resolve().parents[1]


def test_parse_profile():
    assert profiles.parse_profile(None) is None
    assert profiles.parse_profile("0.7") == [0.7]
    assert profiles.parse_profile("0.5, 0.9") == [0.5, 0.9]
    for bad in ("", "x", "1.0", "-0.1", "0.5,,abc"):
        with pytest.raises(RunError, match="--sparsity-profile"):
            profiles.parse_profile(bad)


def test_stage_targets_split_relus_into_consecutive_stages():
    assert profiles.stage_targets(5, [0.7]) == [0.7] * 5
    assert profiles.stage_targets(5, [0.5, 0.9]) == [0.5, 0.5, 0.5, 0.9, 0.9]
    t = profiles.stage_targets(150, [0.4, 0.5, 0.6, 0.7])
    assert len(t) == 150 and t == sorted(t) and t.count(0.4) == 38 and t.count(0.7) == 37


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
