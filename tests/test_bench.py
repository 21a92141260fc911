"""bench/calibrate/plots without a GPU or torch: parsing, the maths of levels and profiles, the summary,
the manifest update, and plots from a small fake result (skipped without matplotlib)."""
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from snn import cli
from snn.codegen.spec import load_spec
from snn.runtime import bench, calibrate
from snn.runtime.errors import RunError

ROOT = Path(__file__).resolve().parents[1]


def test_no_torch_imported_by_the_cpu_parts():
    assert "torch" not in sys.modules or sys.modules["torch"] is not None  # importing bench pulls no torch
    import importlib
    for m in ("snn.runtime.bench", "snn.runtime.calibrate", "snn.runtime.plots"):
        importlib.import_module(m)


def test_parse_batches_and_levels():
    assert bench.parse_batches("32,1,8,8") == [1, 8, 32]
    for bad in ("", "0", "a,1", "-1"):
        with pytest.raises(RunError, match="--batch"):
            bench.parse_batches(bad)
    assert bench.parse_levels("0.9,0.5,0.7") == [0.5, 0.7, 0.9]
    assert bench.parse_levels("0.4:0.5:0.05") == [0.4, 0.45, 0.5]
    with pytest.raises(RunError):
        bench.parse_levels("1.5")


def test_parse_profile():
    assert bench.parse_profile(None) is None
    assert bench.parse_profile("0.7") == [0.7]
    assert bench.parse_profile("0.5, 0.9") == [0.5, 0.9]
    for bad in ("", "x", "1.0", "-0.1", "0.5,,abc"):
        with pytest.raises(RunError, match="--sparsity-profile"):
            bench.parse_profile(bad)


def test_stage_targets_split_relus_into_consecutive_stages():
    assert bench.stage_targets(5, [0.7]) == [0.7] * 5
    assert bench.stage_targets(5, [0.5, 0.9]) == [0.5, 0.5, 0.5, 0.9, 0.9]
    t = bench.stage_targets(150, [0.4, 0.5, 0.6, 0.7])
    assert len(t) == 150 and t == sorted(t) and t.count(0.4) == 38 and t.count(0.7) == 37


def test_lowest_winning_level_needs_wins_all_the_way_up():
    # sparse wins at 0.5, loses at 0.6, wins from 0.7: the threshold is 0.7, not 0.5
    pairs = {0.5: (9, 10), 0.6: (11, 10), 0.7: (8, 10), 0.8: (6, 10), 0.9: (4, 10)}
    assert bench.lowest_winning_level(pairs) == 0.7
    assert bench.lowest_winning_level({0.5: (5, 10), 0.9: (2, 10)}) == 0.5
    assert bench.lowest_winning_level({0.5: (5, 10), 0.9: (20, 10)}) is None
    assert bench.lowest_winning_level({0.5: (10, 10)}) is None  # a tie is no win


def test_geomean_median_stats():
    assert bench.geomean([1, 4]) == pytest.approx(2.0)
    assert bench.geomean([None, 0, 2.0]) == pytest.approx(2.0)
    assert bench.geomean([]) is None
    s = bench.stats([3, 1, 2, 100])
    assert s["median_us"] == 2.5 and s["n"] == 4 and s["times_us"] == [3, 1, 2, 100]


def test_distinct_shapes_and_sampling_on_densenet():
    net = load_spec(ROOT / "network_specs/densenet201.yaml")
    groups = bench.distinct_shapes(net, [c.name for c in net.convs])
    assert sum(len(g["layers"]) for g in groups) == len(net.convs)
    assert len({g["shape"] for g in groups}) == len(groups)
    three = [g for g in groups if g["shape"].R == 3]
    picked = bench.sample_groups(groups, 20)
    assert len(picked) == 20
    assert all(g in picked for g in three)  # every 3x3 shape is kept
    assert [g for g in groups if g in picked] == picked  # network order kept
    assert bench.sample_groups(groups, None) == groups


def test_relu_sources_and_shift_targets():
    net = load_spec(ROOT / "network_specs/resnet152.yaml")
    src = bench.relu_sources(net)
    assert "conv1" not in src                       # the stem reads the image
    assert src["layer1.0.conv1"] == {"relu"}        # through the maxpool
    assert bench.shift_target(net, "layer1.0.relu1") == "layer1.0.bn1.bias"
    # conv3 + bn3 + identity -> relu: the bn of the main path (or the downsample's) moves the sum
    assert bench.shift_target(net, "layer1.0.relu3") in ("layer1.0.bn3.bias", "layer1.0.downsample.1.bias")
    vgg = load_spec(ROOT / "network_specs/vgg19.yaml")
    assert bench.shift_target(vgg, "features.1") == "features.0.bias"  # no BN: the conv's own bias
    dn = load_spec(ROOT / "network_specs/densenet201.yaml")
    s = bench.relu_sources(dn)
    assert all(len(v) == 1 for v in s.values())      # every DenseNet conv input is one pre-activation relu


def _fake_layers_doc(network="fakenet"):
    def rec(sparse, d32, t32):
        return {"kernel": "k", "sparse_us": sparse, "dense_fp32_us": d32, "dense_tf32_us": t32,
                "speedup_fp32": d32 / sparse, "speedup_tf32": t32 / sparse, "rel_err_vs_cudnn_fp32": 1e-7,
                "times": {"sparse": {"median_us": sparse}, "dense_fp32_nhwc": {"median_us": d32},
                          "dense_tf32_nhwc": {"median_us": t32}}}
    epi = {"epilogue": {"median_us": 2.0}, "epilogue_count": {"median_us": 3.0}}
    shapes = [
        {"label": "3x3 64->64 @56x56", "count": 3, "batches": {"1": {"epilogue": epi, "levels": {
            "0.50": rec(40, 30, 10), "0.90": rec(10, 30, 10)}}}},
        {"label": "1x1 256->64 @56x56", "count": 1, "batches": {"1": {"epilogue": epi, "levels": {
            "0.50": rec(10, 20, 5), "0.90": rec(5, 20, 5)}}}},
    ]
    return {"schema": 1, "kind": "layers", "network": network, "batches": [1], "levels": [0.5, 0.9],
            "weights": "random", "images": {"source": "photos", "distinct": 32}, "shapes": shapes,
            "environment": {"gpu": "Fake GPU", "driver": "1.0", "torch": "x", "cudnn": 1, "git_commit": "abc",
                            "utc": "now"}}


def _fake_e2e_doc():
    run = {"times_ms": {"snn": {"median_ms": 2.0}, "torchvision_fp32": {"median_ms": 3.0},
                        "torchvision_tf32": {"median_ms": 1.0}, "torchvision_fp32_graph": {"median_ms": 2.4},
                        "dense_exec_fp32": {"median_ms": 4.0}},
           "speedup_snn_over": {"torchvision_fp32": 1.5, "torchvision_tf32": 0.5, "torchvision_fp32_graph": 1.2,
                                "dense_exec_fp32": 2.0},
           "energy_ratio_over_snn": {"torchvision_fp32_graph": 1.4, "torchvision_fp32": 1.5},
           "energy": {"snn": {"mj_per_image": 100.0}, "torchvision_fp32": {"mj_per_image": 150.0},
                      "torchvision_tf32": None},
           "layers": [{"path": "sparse"}, {"path": "dense"}], "sparse_layers": 1, "mean_conv_input_sparsity": 0.7}
    return {"schema": 1, "kind": "e2e", "network": "fakenet", "batches": [1], "runs": {"1": run},
            "weights": "random", "sparsity_profile": [0.7], "sparsity_profile_note": "biases shifted",
            "environment": {"gpu": "Fake GPU"}}


def test_layer_rows_numbers():
    rows = bench.layer_rows(_fake_layers_doc())
    r50 = next(r for r in rows if r["level"] == 0.5)
    assert r50["geomean_fp32"] == pytest.approx((30 / 40 * 20 / 10) ** 0.5)
    assert r50["weighted_fp32"] == pytest.approx((3 * 30 + 20) / (3 * 40 + 10))
    assert r50["geomean_fp32_epilogue_both"] == pytest.approx(((32 / 42) * (22 / 12)) ** 0.5)
    assert r50["geomean_fp32_epilogue_ours"] == pytest.approx(((30 / 43) * (20 / 13)) ** 0.5)
    assert r50["wins_fp32"] == 1 and r50["wins_tf32"] == 0
    lows = bench.lowest_levels(_fake_layers_doc())
    assert lows[0]["batches"]["1"] == 0.9 and lows[1]["batches"]["1"] == 0.5


def test_useful_throughput_and_fixed_cost_rows():
    # 2 * 1e6 MACs, half of them on zeros, in 1 us: 1 TFLOP/s of useful work
    assert bench.useful_tflops(10**6, 0.5, 1.0) == pytest.approx(1.0)
    doc = _fake_layers_doc()
    assert bench.limit_rows(doc) == []                      # documents from before: no table
    for s, macs in zip(doc["shapes"], (2e9, 1e9)):
        for k, r in s["batches"]["1"]["levels"].items():
            r["useful_tflops"] = bench.useful_tflops(macs, float(k), r["sparse_us"])
    doc["fp32_peak_tflops"] = 50.0
    rows = bench.limit_rows(doc)
    assert [r["top_level"] for r in rows] == ["0.90", "0.90"] and rows[0]["top_level_us"] == 10
    assert rows[0]["useful_tflops"]["0.50"] == pytest.approx(2 * 2e9 * 0.5 / 40 / 1e6)
    assert rows[0]["share"]["0.50"] == pytest.approx(50 / 50.0)
    md = bench.summary_markdown([doc])
    assert "| 3x3 64->64 @56x56 | 1 | 50.00 (100%) | 40.00 (80%) | 10.0 |" in md
    assert "measured in the same run (50.0 TFLOP/s" in md


def test_summary_states_what_the_issue_asks():
    md = bench.summary_markdown([_fake_layers_doc(), _fake_e2e_doc()])
    assert "Fake GPU" in md and "abc" in md
    assert "| 1 | 0.50 | 2 |" in md                      # per batch and level
    assert "| 3x3 64->64 @56x56 | 3 | 0.90 |" in md     # lowest winning level per shape
    assert "exhaustive" in md                           # Fig. 8 status is stated, not hidden
    assert "Sparsity profile [0.7]" in md               # the profile is labelled
    assert "100.0 / 150.0" in md
    head = md.split("## Headline")[1].split("##")[0]
    # e2e against the strongest dense configuration of each precision, not the eager one
    assert ("| fakenet | 1 | 1.22 (0.35) | 3.46 (1.00) | 1.20 (torchvision_fp32_graph) | 0.50 (torchvision_tf32) "
            "| 1.40 | – |") in head
    assert bench.strongest_dense({"times_ms": {}}) == (None, None)


def test_report_writes_summary_and_plots(tmp_path):
    bench.write_json(_fake_layers_doc(), tmp_path / "layers_fakenet.json")
    bench.write_json(_fake_e2e_doc(), tmp_path / "e2e_fakenet.json")
    (tmp_path / "other.json").write_text('{"not": "ours"}')
    md, pngs, note = bench.report(tmp_path)
    assert md.read_text().startswith("# snn benchmark summary")
    from snn.runtime import plots
    if not plots.available():
        assert pngs == [] and "matplotlib" in note
        pytest.skip("matplotlib is not installed: plot rendering not tested")
    assert note is None
    names = sorted(p.name for p in pngs)
    assert names == ["e2e.png", "layers_fakenet.png", "layers_fakenet_mean.png"]
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_report_on_an_empty_folder_is_a_user_error(tmp_path):
    with pytest.raises(RunError, match="no bench or calibrate results"):
        bench.report(tmp_path)


@pytest.mark.parametrize("args, msg", [
    (["bench", "layers", "--spec", "network_specs/vgg19.yaml", "--batch", "0"], "--batch"),
    (["bench", "layers", "--spec", "network_specs/vgg19.yaml", "--levels", "2"], "level"),
    (["bench", "e2e", "--spec", "network_specs/vgg19.yaml", "--sparsity-profile", "1.2"], "--sparsity-profile"),
    (["calibrate", "--spec", "network_specs/vgg19.yaml", "--batch", "x"], "--batch"),
])
def test_cli_user_errors_are_one_line(args, msg):
    r = CliRunner().invoke(cli.run_main, args)
    assert r.exit_code == 1
    assert msg in r.output and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_cli_report(tmp_path):
    bench.write_json(_fake_layers_doc(), tmp_path / "layers_fakenet.json")
    r = CliRunner().invoke(cli.run_main, ["bench", "report", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "summary.md").is_file()
    r = CliRunner().invoke(cli.run_main, ["bench", "report", str(tmp_path / "nope")])
    assert r.exit_code != 0 and "Traceback" not in r.output


class _FakeEvent:
    clock = [0.0]

    def __init__(self, enable_timing=True):
        self.t = None

    def record(self):
        self.t = _FakeEvent.clock[0]

    def elapsed_time(self, other):
        return other.t - self.t


class _FakeTorch:
    """Enough of torch.cuda for event_times_us: each run advances a fake clock by its own duration (ms)."""

    def __init__(self):
        self.sleeps = []
        outer = self

        class cuda:
            Event = _FakeEvent

            @staticmethod
            def _sleep(cycles):
                outer.sleeps.append(cycles)

            @staticmethod
            def synchronize():
                pass
        self.cuda = cuda


def test_event_times_us_sleeps_ahead_of_the_host_and_flushes_every_run():
    torch, calls = _FakeTorch(), []
    durations = iter([0.01 * (i + 1) for i in range(200)])

    def run():  # the timed work: advances the device clock
        calls.append("run")
        _FakeEvent.clock[0] += next(durations)

    times, info = bench.event_times_us(torch, [run], lambda: calls.append("flush"), reps=70, sync=lambda: None)
    assert len(times) == 70
    # 3 untimed runs measure the host's enqueue cost, then every timed run follows its own flush
    assert calls[:6] == ["flush", "run"] * 3 and calls[6:] == ["flush", "run"] * 70
    assert times == pytest.approx([10.0 * (i + 4) for i in range(70)])  # µs, the runs after the three untimed
    # two chunks (64 + 6 runs), each behind a sleep covering 100 µs + 1.5 x its runs' host cost
    assert len(torch.sleeps) == 2 and torch.sleeps[0] > torch.sleeps[1] >= 100 * bench._CYCLES_PER_US
    assert info["host_enqueue_us"] >= 0 and info["sleep_us"] >= 100.0
