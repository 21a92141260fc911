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
    assert "155 conv layers, 23 distinct shapes" in r.output
    assert "36× layer3.0.conv3" in r.output or "35× layer3.1.conv2" in r.output
    numbered = [l for l in r.output.splitlines() if l.strip()[:2].strip().isdigit()]
    assert len(numbered) == 23
    assert "0.40:" in r.output and "0.90:" in r.output


def test_plan_json_has_every_layer_and_level():
    r = run(RESNET152, "--gpu", "a100", "--batch", "8", "--model", "paper", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["model"] == "paper" and d["batch"] == 8 and d["gpu_description"]["sms"] == 108
    assert len(d["layers"]) == 155 and all(len(l["levels"]) == 11 for l in d["layers"])
    assert d["layers"][0]["levels"]["0.40"]["kernel"].startswith("sconv_r7s7_str2_pad3_c3n64_h224w224_")


def test_plan_candidates_lists_the_alternatives_and_counts_the_kernels():
    r = run(RESNET152, "--gpu", "h100", "--layer", "layer3.1.conv2", "--levels", "0.5,0.7", "--candidates", "3")
    assert r.exit_code == 0, r.output
    assert "with the alternatives (snn-codegen build --candidates):" in r.output
    assert "with the alternatives" not in run(RESNET152, "--gpu", "h100", "--layer", "layer3.1.conv2").output
    d = json.loads(run(RESNET152, "--gpu", "h100", "--layer", "layer3.1.conv2", "--levels", "0.7", "--candidates", "3",
                       "--json").output)
    lv = d["layers"][0]["levels"]["0.70"]
    assert len(lv["alternatives"]) == 2 and lv["kernel"] not in {a["kernel"] for a in lv["alternatives"]}
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
