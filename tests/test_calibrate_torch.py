"""calibrate end to end on the CPU (`--cpu-dry-run`: torch emulation of the sparse steps, host timings that
mean nothing) over a tiny spec and a fake on-disk kernel cache. Skips without torch."""
import json

import pytest

torch = pytest.importorskip("torch")

from measurefakes import run, tiny_cache  # noqa: E402

from snn.codegen.spec import load_spec  # noqa: E402
from snn.runtime import calibrate, manifest, tuning  # noqa: E402
from snn.runtime.measure import inputs, summary, timing  # noqa: E402


@pytest.fixture()
def setup(tmp_path):
    return tiny_cache(tmp_path)


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


def test_calibrate_measures_a_dense_candidate_once_for_all_levels(setup):
    """A dense kernel (codegen/dense.py) takes as long whatever its input's zeros: measured at the first level that
    offers it, its measurement shared by the others; the sparse picks are still measured at every level."""
    spec, m, tmp = setup
    data = json.loads(m.read_text())
    for layer in data["layers"]:
        for lk, lv in layer["batches"]["2"]["levels"].items():
            alt = layer["name"] + "_dense"
            data["kernels"][alt] = dict(data["kernels"][lv["kernel"]], config={"family": "dense", "bm": 32})
            lv["candidates"] = [{"kernel": lv["kernel"], "predicted_us": 1.0}, {"kernel": alt, "predicted_us": 1.2}]
    m.write_text(json.dumps(data))
    args = ["calibrate", "--spec", str(spec), "--cache", str(tmp / "gen"), "--gpu", "fake", "--levels", "0.5,0.9"]
    assert "12 measurement(s) to make" in run(args)
    side = json.loads((m.parent / "tuning.json").read_text())["measurements"]
    assert len(side) == 12
    dense = {k: v for k, v in side.items() if "_dense" in k}
    assert len(dense) == 6 and sum(v["sparsity"] is None for v in dense.values()) == 3   # measured at one level each
    for layer in data["layers"]:
        pair = [v for k, v in dense.items() if layer["name"] + "_dense" in k]
        assert len(pair) == 2 and pair[0]["sparse_us"] == pair[1]["sparse_us"]
    sparse = [v for k, v in side.items() if "_dense" not in k]
    assert all(v["sparsity"] is not None for v in sparse) and len({v["sparse_us"] for v in sparse}) > 3


def test_time_exhaustive_compares_model_with_best(setup):
    """The timing half of --exhaustive on a hand-made sample (building needs nvcc: not here)."""
    spec, m, tmp = setup
    net = load_spec(spec)
    env = timing.Env(cpu_dry_run=True)
    sd, _ = inputs.load_weights(env, net, None, 0)
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
    md = summary.summary_markdown([{"kind": "calibrate", "network": "tinybench", "batches": [2], "rows": [],
                                  "exhaustive": res}])
    assert "Model-chosen vs exhaustive-best" in md and "| l | 2 | 0.70 | 10 | 2 |" in md
