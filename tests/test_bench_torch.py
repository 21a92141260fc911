"""The bench pipeline end to end on the CPU (`--cpu-dry-run`: torch emulation of the sparse steps,
host timings that mean nothing) over a tiny spec and a fake on-disk kernel cache. Skips without torch."""
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from snn import cli  # noqa: E402
from snn.codegen.spec import load_spec  # noqa: E402
from snn.runtime import bench, calibrate, manifest, tuning  # noqa: E402

TINY = """
name: tinybench
input: {name: image, shape: [3, 24, 24]}
nodes:
  - {name: conv1, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, padding: 1, param: conv1}
  - {name: bn1, op: batchnorm, input: conv1, channels: 8, param: bn1}
  - {name: relu1, op: relu, input: bn1}
  - {name: pool1, op: maxpool, input: relu1, kernel: 2, stride: 2}
  - {name: conv2, op: conv, input: pool1, in_channels: 8, out_channels: 8, kernel: 3, padding: 1, param: conv2}
  - {name: bn2, op: batchnorm, input: conv2, channels: 8, param: bn2}
  - {name: add, op: add, inputs: [bn2, pool1]}
  - {name: relu2, op: relu, input: add}
  - {name: conv3, op: conv, input: relu2, in_channels: 8, out_channels: 16, kernel: 1, bias: true, param: conv3}
  - {name: relu3, op: relu, input: conv3}
  - {name: conv4, op: conv, input: relu3, in_channels: 16, out_channels: 8, kernel: 3, padding: 1, param: conv4}
  - {name: bn4, op: batchnorm, input: conv4, channels: 8, param: bn4}
  - {name: relu4, op: relu, input: bn4}
  - {name: gap, op: global_avgpool, input: relu4}
  - {name: flat, op: flatten, input: gap}
  - {name: fc, op: linear, input: flat, in_features: 8, out_features: 5, param: fc}
"""
LEVELS = (0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@pytest.fixture()
def setup(tmp_path):
    spec = tmp_path / "tinybench.yaml"
    spec.write_text(TINY)
    net = load_spec(spec)
    bundle = tmp_path / "gen" / "tinybench" / "fake"
    (bundle / "cubins").mkdir(parents=True)
    (bundle / "cubins" / "k.cubin").write_bytes(b"\0")
    cubin = "cubins/k.cubin"  # relative to the bundle, as the build writes it
    kernels, layers = {}, []
    for c in net.convs[1:]:  # the stem reads the image: no kernels, as in real manifests
        entry = {"threshold": 0.5, "threshold_source": "default", "levels": {}}
        for l in LEVELS:
            name = f"sconv_{c.name}_l{int(l * 100)}"
            kernels[name] = {"cubin": str(cubin), "weight_layout": "CRSN", "workspace": {},
                             "steps": [{"op": "memset", "buffer": "output"},
                                       {"op": "launch", "function": "f", "grid": [1, 1, 1], "block": [32, 1, 1],
                                        "smem": 0, "args": ["input", "weight", "output"]}]}
            entry["levels"][f"{l:.2f}"] = {"kernel": name, "predicted_us": 1.0, "measured_us": None}
        layers.append({"index": c.index, "name": c.name, "batches": {"2": entry}})
    m = bundle / "manifest.json"
    m.write_text(json.dumps({"format": 1, "network": "tinybench", "gpu": "fake", "compute_capability": [9, 0], "batches": [2],
                             "levels": list(LEVELS), "epilogue": {"cubin": str(cubin)}, "kernels": kernels,
                             "layers": layers}))
    return spec, m, tmp_path


def run(args):
    r = CliRunner().invoke(cli.run_main, args + ["--cpu-dry-run", "--reps", "2", "--warmup", "1"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    return r.output


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
    run2 = doc["runs"]["2"]
    sp = {l["name"]: l["sparsity"] for l in run2["layers"]}
    # the profile was fitted on the whole image pool; the measured batch is a part of it
    assert abs(sp["conv3"] - 0.8) < 0.1 and abs(sp["conv4"] - 0.8) < 0.1
    assert run2["rel_err_snn_vs_dense"] < 1e-5
    assert {"snn", "dense_exec_fp32"} <= set(run2["times_ms"])
    assert "torchvision" in run2["notes"]  # no torchvision model of that name: said, not hidden


def tuned(spec, m):
    """The manifest as the runtime sees it: the bundle with its tuning file merged in."""
    return manifest.load(m, load_spec(spec), str(spec), 2, (9, 0)).data


def test_calibrate_writes_its_tuning_file_never_the_manifest_and_resumes(setup):
    spec, m, tmp = setup
    before = m.read_bytes()
    args = ["calibrate", "--spec", str(spec), "--cache", str(tmp / "gen"), "--gpu", "fake", "--levels", "0.5,0.9"]
    out = run(args)
    assert "6 measurement(s) to make" in out and f"wrote {m.parent / 'tuning.json'}" in out
    assert m.read_bytes() == before
    for layer in tuned(spec, m)["layers"]:
        e = layer["batches"]["2"]
        assert e["threshold_source"] == "calibrated"
        assert e["levels"]["0.50"]["measured_us"] > 0 and e["levels"]["0.90"]["dense_us"] > 0
        assert e["levels"]["0.70"]["measured_us"] is None
    side = json.loads((m.parent / "tuning.json").read_text())
    assert len(side["measurements"]) == 6
    assert "0 measurement(s) to make" in run(args)            # resumed: nothing left
    assert "6 measurement(s) to make" in run(args + ["--remeasure"])
    other = tmp / "elsewhere" / "t.json"                      # a tuning file the user names
    assert "6 measurement(s) to make" in run(args + ["--tuning", str(other)])
    assert len(json.loads(other.read_text())["measurements"]) == 6 and m.read_bytes() == before


def test_calibrate_measures_every_candidate_and_times_cudnn_once_a_level(setup):
    spec, m, tmp = setup
    data = json.loads(m.read_text())
    for layer in data["layers"]:  # as `snn-codegen build --candidates 2` writes them: one alternative a level
        for lk, lv in layer["batches"]["2"]["levels"].items():
            alt = lv["kernel"] + "_alt"
            data["kernels"][alt] = data["kernels"][lv["kernel"]]
            lv["candidates"] = [{"kernel": lv["kernel"], "predicted_us": 1.0}, {"kernel": alt, "predicted_us": 1.2}]
    m.write_text(json.dumps(data))
    args = ["calibrate", "--spec", str(spec), "--cache", str(tmp / "gen"), "--gpu", "fake", "--levels", "0.5,0.9"]
    assert "12 measurement(s) to make" in run(args + ["--out", str(tmp / "res")])
    md = (tmp / "res" / "summary.md").read_text()
    assert "Candidate kernels measured" in md and "levels retuned" in md
    side = json.loads((m.parent / "tuning.json").read_text())["measurements"]
    dense = [k for k, v in side.items() if v["dense_us"] is not None]
    assert len(side) == 12 and len(dense) == 6 and not any("_alt|" in k for k in dense)
    for layer in tuned(spec, m)["layers"]:
        for lk in ("0.50", "0.90"):
            lv = layer["batches"]["2"]["levels"][lk]
            pick, alt = (c["measured_us"] for c in lv["candidates"])
            faster = alt < pick * (1 - tuning.TUNE_MARGIN)
            assert lv["kernel"] == lv["candidates"][int(faster)]["kernel"]
            assert lv["measured_us"] == (alt if faster else pick)
            assert lv["dense_us"] > 0
    assert "0 measurement(s) to make" in run(args + ["--no-tune"])  # the picks are measured already


def test_time_exhaustive_compares_model_with_best(setup):
    """The timing half of --exhaustive on a hand-made sample (building needs nvcc: not here)."""
    spec, m, tmp = setup
    net = load_spec(spec)
    env = bench.Env(cpu_dry_run=True)
    sd, _ = bench._weights(env, net, None, 0)
    step = [{"op": "launch", "function": "f", "grid": [1, 1, 1], "block": [32, 1, 1], "smem": 0,
             "args": ["input", "weight", "output"]}]
    cands = [{"kernel": f"k{i}", "config": {}, "model_choice": i == 0, "predicted_us": 1.0, "cubin": "x",
              "steps": step, "workspace": {}, "weight_layout": "CRSN", "spills": None} for i in range(3)]
    cands[2]["spills"] = "spills 8 bytes"
    plan = [{"layer": "conv4", "layers": ["conv4"], "label": "l", "tag": "t", "batch": 2, "level": 0.7,
             "stage1_survivors": 10, "candidates": cands}]
    res = calibrate.time_exhaustive(env, net, sd, plan, None, 0, 2, 1, {"cubin": "e"}, log=lambda *a: None)
    r = res[0]
    assert r["timed"] == 2 and r["model_kernel"] == "k0" and r["best_kernel"] in ("k0", "k1")
    assert r["model_over_best"] >= 1.0 and r["model_rank"] in (1, 2)
    assert r["candidates"][2]["measured_us"] is None and "cubin" not in r["candidates"][0]
    md = bench.summary_markdown([{"kind": "calibrate", "network": "tinybench", "batches": [2], "rows": [],
                                  "exhaustive": res}])
    assert "Model-chosen vs exhaustive-best" in md and "| l | 2 | 0.70 | 10 | 2 |" in md
