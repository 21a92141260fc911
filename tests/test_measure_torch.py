"""bench layers and bench e2e end to end on the CPU (`--cpu-dry-run`: torch emulation of the sparse steps,
host timings that mean nothing) over a tiny spec and a fake on-disk kernel cache. Skips without torch."""
import json

import pytest

torch = pytest.importorskip("torch")

from measurefakes import run, tiny_cache  # noqa: E402


@pytest.fixture()
def setup(tmp_path):
    return tiny_cache(tmp_path)


def test_bench_layers_inputs_hit_the_levels(setup):
    spec, m, tmp = setup
    run(["bench", "layers", "--spec", str(spec), "--cache", str(tmp / "gen"), "--gpu", "fake", "--batch", "2",
         "--levels", "0.5,0.9", "--out", str(tmp / "res")])
    doc = json.loads((tmp / "res" / "layers_tinybench.json").read_text())
    assert [s["layers"] for s in doc["shapes"]] == [["conv2"], ["conv3"], ["conv4"]]
    for s in doc["shapes"]:
        for lk, rec in s["batches"]["2"]["levels"].items():
            assert all(abs(x - float(lk)) < 0.03 for x in rec["sparsity"]), (s["label"], lk, rec["sparsity"])
            assert rec["rel_err_vs_cudnn_fp32"] < 1e-6 and not rec["nan_in_output"]
            assert set(rec["times"]) >= {"sparse", "dense_fp32_nhwc", "dense_tf32_nhwc", "dense_fp32_nchw"}
            assert rec["kernel"] == f"sconv_{s['layers'][0]}_l{round(float(lk) * 100)}"
    assert (tmp / "res" / "summary.md").is_file()


def test_bench_e2e_profile_reaches_its_target(setup):
    spec, m, tmp = setup
    run(["bench", "e2e", "--spec", str(spec), "--cache", str(tmp / "gen"), "--gpu", "fake", "--batch", "2",
         "--sparsity-profile", "0.8", "--out", str(tmp / "res")])
    doc = json.loads((tmp / "res" / "e2e_tinybench_profile0.8.json").read_text())
    assert doc["sparsity_profile"] == [0.8] and "SET" in doc["sparsity_profile_note"]
    assert {r["relu"] for r in doc["profile_report"]} == {"relu1", "relu2", "relu3"}  # relu4 feeds no conv
    assert all(abs(r["after"] - 0.8) < 0.01 for r in doc["profile_report"])
    run_b2 = doc["runs"]["2"]
    sp = {l["name"]: l["sparsity"] for l in run_b2["layers"]}
    # the profile was fitted on the whole image pool; the measured batch is a part of it
    assert abs(sp["conv3"] - 0.8) < 0.1 and abs(sp["conv4"] - 0.8) < 0.1
    assert run_b2["rel_err_snn_vs_dense"] < 1e-5
    assert {"snn", "dense_exec_fp32"} <= set(run_b2["times_ms"])
    assert "torchvision" in run_b2["notes"]  # no torchvision model of that name: said, not hidden
