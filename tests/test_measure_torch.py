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
            assert set(rec["times"]) >= {"sparse", "dense_fp32_nhwc", "dense_tf32_nhwc", "dense_fp32_nchw",
                                         "dense_fp16_nhwc", "dense_bf16_nhwc", "dense_bf16_nchw"}
            # rounded to 4 places (a CPU stand-in run can be far below 1)
            assert rec["speedup_bf16"] == pytest.approx(rec["dense_bf16_us"] / rec["sparse_us"], rel=1e-3, abs=5e-5)
            assert rec["kernel"] == f"sconv_{s['layers'][0]}_l{round(float(lk) * 100)}"
    assert (tmp / "res" / "summary.md").is_file()


def test_bench_e2e_profiles_and_baselines(setup):
    spec, m, tmp = setup
    out = run(["bench", "e2e", "--spec", str(spec), "--cache", str(tmp / "gen"), "--gpu", "fake", "--batch", "2",
               "--sparsity-profile", "0.8", "--sparsity-profile", "0.5", "--precisions", "fp32,bf16",
               "--out", str(tmp / "res")])
    doc = json.loads((tmp / "res" / "e2e_tinybench.json").read_text())
    assert [p["name"] for p in doc["profiles"]] == ["0.8", "0.5"] and "SET" in doc["profile_note"]
    assert doc["baselines_on_profile"] == "0.8"
    for p in doc["profiles"]:  # every conv reading a ReLU: target and what it realized on the images
        assert {c["conv"] for c in p["per_conv"]} == {"conv2", "conv3", "conv4"}
        assert all(abs(c["realized"] - float(p["name"])) < 0.02 for c in p["per_conv"]), p["per_conv"]
    r = doc["runs"]["2"]
    for label, target in (("0.8", 0.8), ("0.5", 0.5)):
        sp = {l["name"]: l for l in r["snn"][label]["layers"]}
        # the profile was fitted on the whole image pool; the measured batch is a part of it
        assert abs(sp["conv3"]["sparsity"] - target) < 0.1 and sp["conv3"]["target"] == target
        assert r["snn"][label]["rel_err_vs_fp64"] < 1e-5
    # no torchvision model of that name: the spec itself as a PyTorch module, eager here; graphs and
    # torch.compile are not run on the CPU dry run, and the document says so
    assert set(r["baselines"]) == {"torch_eager_fp32", "torch_eager_bf16"}
    assert "spec as a PyTorch module" in r["baseline_model"]
    assert r["baselines"]["torch_eager_fp32"]["rel_err_vs_fp64"] < 1e-5
    assert 1e-4 < r["baselines"]["torch_eager_bf16"]["rel_err_vs_fp64"] < 0.1
    assert "CPU dry run" in r["notes"]["torch.compile_fp32"] and "CPU dry run" in r["notes"]["graph"]
    assert r["strongest"]["same_precision"] == "torch_eager_fp32"
    assert r["speedup"]["0.8"]["same_precision"] > 0
    assert "Profile <b>0.8</b>" in (tmp / "res" / "summary.md").read_text()
    assert "wrote" in out
