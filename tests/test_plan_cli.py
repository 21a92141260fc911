"""`snn-codegen plan`: the table, --explain, --json, and one-line errors."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from snn import cli

ROOT = Path(__file__).resolve().parents[1]
RESNET152 = str(ROOT / "network_specs" / "resnet152.yaml")
VGG16 = str(ROOT / "network_specs" / "vgg16.yaml")


def run(*args):
    return CliRunner().invoke(cli.codegen_main, ["plan", *args])


def test_plan_table_is_one_block_per_distinct_shape():
    r = run(RESNET152, "--gpu", "h100")
    assert r.exit_code == 0, r.output
    assert "154 conv layers, 22 distinct shapes" in r.output  # the stem reads the image: always dense
    assert "36× layer3.0.conv3" in r.output or "35× layer3.1.conv2" in r.output
    numbered = [l for l in r.output.splitlines() if l.strip()[:2].strip().isdigit()]
    assert len(numbered) == 22
    assert "0.40:" in r.output and "0.90:" in r.output


def test_plan_json_has_every_layer_and_level():
    r = run(RESNET152, "--gpu", "a100", "--batch", "8", "--model", "paper", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["model"] == "paper" and d["batch"] == 8 and d["gpu_description"]["sms"] == 108
    assert len(d["layers"]) == 154 and all(len(l["levels"]) == 11 for l in d["layers"])
    assert "conv1" not in {l["name"] for l in d["layers"]}  # the stem reads the image: no kernels
    assert d["layers"][0]["levels"]["0.40"]["kernel"].startswith("sconv_r1s1_str1_pad0_c64n64_h56w56_")


def test_plan_of_a_dense_only_layer_says_why(tmp_path):
    r = run(RESNET152, "--gpu", "h100", "--layer", "conv1")
    assert r.exit_code == 1
    assert r.output.strip().endswith("conv layer 'conv1' always runs dense: its input 'image' is no ReLU output")
    spec = tmp_path / "g.yaml"
    spec.write_text("name: g\ninput: {name: image, shape: [8, 8, 8]}\nnodes:\n"
                    "  - {name: a, op: conv, input: image, in_channels: 8, out_channels: 8, kernel: 3, padding: 1}\n"
                    "  - {name: r, op: relu, input: a}\n"
                    "  - {name: g, op: conv, input: r, in_channels: 8, out_channels: 8, kernel: 3, padding: 1, groups: 4}\n"
                    "  - {name: r2, op: relu, input: g}\n"
                    "  - {name: b, op: conv, input: r2, in_channels: 8, out_channels: 8, kernel: 1}\n")
    r = run(str(spec), "--gpu", "h100", "--layer", "g")
    assert r.exit_code == 1 and r.output.strip().endswith("conv layer 'g' always runs dense: it is grouped (4 groups)")
    d = json.loads(run(str(spec), "--gpu", "h100", "--json").output)
    assert [l["name"] for l in d["layers"]] == ["b"]  # neither the stem nor the grouped conv is planned
    info = json.loads(CliRunner().invoke(cli.codegen_main, ["inspect", str(spec), "--json"]).output)
    assert [(l["name"], l["groups"], l["sparse"]) for l in info["layers"]] == [("a", 1, False), ("g", 4, False),
                                                                              ("b", 1, True)]
    macs = [l["macs"] for l in info["layers"]]
    assert macs[1] * 4 == macs[0] and abs(sum(l["mac_share"] for l in info["layers"]) - 1.0) < 1e-9


def test_plan_candidates_lists_the_alternatives_and_counts_the_kernels():
    r = run(RESNET152, "--gpu", "h100", "--layer", "layer3.1.conv1", "--levels", "0.5,0.7", "--candidates", "3")
    assert r.exit_code == 0, r.output
    assert "with the alternatives (snn-codegen build --candidates; " in r.output
    assert "with the alternatives" not in run(RESNET152, "--gpu", "h100", "--layer", "layer3.1.conv1").output
    d = json.loads(run(RESNET152, "--gpu", "h100", "--layer", "layer3.1.conv1", "--levels", "0.7", "--candidates", "3",
                       "--json").output)
    lv = d["layers"][0]["levels"]["0.70"]
    assert len(lv["alternatives"]) == 2 and lv["kernel"] not in {a["kernel"] for a in lv["alternatives"]}
    # a stride-1 3x3 at batch 1 carries the one-row tiles whatever --candidates; at batch 8 none
    d = json.loads(run(RESNET152, "--gpu", "h100", "--layer", "layer3.1.conv2", "--levels", "0.7", "--json").output)
    assert [a["kernel"].split("_h14w14_")[1] for a in d["layers"][0]["levels"]["0.70"]["alternatives"]] == [
        "th1tw7tc8_t32n2_w7x2_b1", "th1tw7tc8_t32n4_w7x2_b1", "th1tw7tc8_t32n2_w7x1_b1"]
    assert "with the alternatives" not in run(RESNET152, "--gpu", "h100", "--layer", "layer3.1.conv2", "--batch",
                                              "8").output
    assert run(RESNET152, "--gpu", "h100", "--candidates", "0").exit_code != 0


def test_plan_explain_one_layer():
    r = run(VGG16, "--gpu", "v100", "--layer", "features.5", "--levels", "0.5,0.8", "--explain", "--top", "2")
    assert r.exit_code == 0, r.output
    assert r.output.count("stage 1 occupancy") == 2 and "features.5" in r.output
    r = run(VGG16, "--gpu", "v100", "--layer", "features.5", "--levels", "0.5", "--explain", "--json")
    d = json.loads(r.output)
    info = d["explain"][0]["levels"]["0.50"]
    assert info["chosen"]["config"] == d["layers"][0]["levels"]["0.50"]["config"]


@pytest.mark.parametrize("args, expected", [
    (("--gpu", "p100"), "unknown GPU 'p100': known GPUs are a100, h100, h200, rtx2080ti, v100"),
    (("--gpu", "h100", "--levels", "0.4:1.2:0.1"), "--levels '0.4:1.2:0.1'"),
    (("--gpu", "h100", "--layer", "nope"), "no conv layer named 'nope'"),
])
def test_plan_errors_are_one_line(args, expected):
    r = run(VGG16, *args)
    assert r.exit_code == 1, r.output
    assert expected in r.output and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_plan_auto_without_gpu_is_one_line_or_works():
    r = run(VGG16, "--gpu", "auto", "--levels", "0.5")
    if r.exit_code:
        assert r.exit_code == 1 and "--gpu auto" in r.output and len(r.output.strip().splitlines()) == 1
    else:
        assert "distinct shapes" in r.output


def test_plan_help_documents_every_option():
    r = CliRunner().invoke(cli.codegen_main, ["plan", "--help"])
    assert r.exit_code == 0
    for opt in ("--gpu", "--batch", "--levels", "--layer", "--model", "--explain", "--top", "--json"):
        assert opt in r.output
    text = " ".join(r.output.split())  # click wraps lines
    assert "default: 0.4:0.9:0.05" in text and "default: snn" in text and "default: 1;" in text
