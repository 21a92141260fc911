"""measure.summary, measure.plots and measure.report without a GPU or torch: the rows and the summary from small
fake results, the report of a folder and `snn-run bench report` (plots skipped without matplotlib)."""
import pytest
from click.testing import CliRunner

from snn import cli
from snn.runtime.errors import RunError
from snn.runtime.measure import baselines, common, layer, report, summary


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
    def bl(ms, p, kind, mj=None):
        return {"median_ms": ms, "precision": p, "kind": kind, "energy": {"mj_per_image": mj} if mj else None,
                "rel_err_vs_fp64": 1e-3 if p in ("fp16", "bf16") else 1e-7}
    run = {"baselines": {"torch_eager_fp32": bl(3.0, "fp32", "eager", 150.0), "torch_graph_fp32": bl(2.4, "fp32", "graph", 140.0),
                         "torch.compile_fp32": bl(2.6, "fp32", "compile"), "torch_graph_tf32": bl(1.0, "tf32", "graph"),
                         "torch.compile_bf16": bl(0.8, "bf16", "compile")},
           "snn": {"trained": {"median_ms": 2.0, "energy": {"mj_per_image": 100.0}, "sparse_layers": 1, "convs": 2,
                               "mean_conv_input_sparsity": 0.6, "rel_err_vs_fp64": 2e-7,
                               "layers": [{"name": "c1", "sparsity": 0.58, "path": "sparse"},
                                          {"name": "c2", "sparsity": 0.3, "path": "dense"}]},
                   "0.7": {"median_ms": 1.6, "sparse_layers": 2, "convs": 2, "mean_conv_input_sparsity": 0.7}},
           "strongest": {"same_precision": "torch_graph_fp32", "overall": "torch.compile_bf16"},
           "notes": {"torch.compile_fp16": "torch.compile unavailable: triton is not installed"},
           "dense_exec_fp32": {"median_ms": 4.0}, "baseline_model": "torchvision.models.fakenet"}
    per_conv = [{"conv": "c1", "target": 0.6, "realized": 0.59, "origin": "measured", "rule": 1,
                 "roles": ["3x3"], "stage": 1},
                {"conv": "c2", "target": 0.3, "realized": 0.31, "origin": "assumed", "rule": 2,
                 "roles": ["expand"], "stage": 1}]
    return {"schema": 1, "kind": "e2e", "network": "fakenet", "batches": [1], "runs": {"1": run},
            "weights": "random", "profiles": [{"name": "trained", "description": "trained-like", "per_conv": per_conv,
                                                "max_abs_realized_minus_target": 0.01},
                                               {"name": "0.7", "description": "uniform 0.7", "per_conv": []}],
            "baselines_on_profile": "trained", "profile_note": "sparsity SET by shifting biases",
            "environment": {"gpu": "Fake GPU"}}


def test_layer_rows_numbers():
    rows = summary.layer_rows(_fake_layers_doc())
    r50 = next(r for r in rows if r["level"] == 0.5)
    assert r50["geomean_fp32"] == pytest.approx((30 / 40 * 20 / 10) ** 0.5)
    assert r50["weighted_fp32"] == pytest.approx((3 * 30 + 20) / (3 * 40 + 10))
    assert r50["geomean_fp32_epilogue_both"] == pytest.approx(((32 / 42) * (22 / 12)) ** 0.5)
    assert r50["geomean_fp32_epilogue_ours"] == pytest.approx(((30 / 43) * (20 / 13)) ** 0.5)
    assert r50["wins_fp32"] == 1 and r50["wins_tf32"] == 0
    lows = summary.lowest_levels(_fake_layers_doc())
    assert lows[0]["batches"]["1"] == 0.9 and lows[1]["batches"]["1"] == 0.5


def test_useful_throughput_and_fixed_cost_rows():
    # 2 * 1e6 MACs, half of them on zeros, in 1 us: 1 TFLOP/s of useful work
    assert layer.useful_tflops(10**6, 0.5, 1.0) == pytest.approx(1.0)
    doc = _fake_layers_doc()
    assert summary.limit_rows(doc) == []                      # documents from before: no table
    for s, macs in zip(doc["shapes"], (2e9, 1e9)):
        for k, r in s["batches"]["1"]["levels"].items():
            r["useful_tflops"] = layer.useful_tflops(macs, float(k), r["sparse_us"])
    doc["fp32_peak_tflops"] = 50.0
    rows = summary.limit_rows(doc)
    assert [r["top_level"] for r in rows] == ["0.90", "0.90"] and rows[0]["top_level_us"] == 10
    assert rows[0]["useful_tflops"]["0.50"] == pytest.approx(2 * 2e9 * 0.5 / 40 / 1e6)
    assert rows[0]["share"]["0.50"] == pytest.approx(50 / 50.0)
    md = summary.summary_markdown([doc])
    assert "| 3x3 64->64 @56x56 | 1 | 50.00 (100%) | 40.00 (80%) | 10.0 |" in md
    assert "measured in the same run (50.0 TFLOP/s" in md


def test_e2e_rows_against_the_strongest_baselines():
    rows = summary.e2e_rows(_fake_e2e_doc())
    assert [(r["profile"], r["same_precision"], r["overall"]) for r in rows] == [
        ("trained", "torch_graph_fp32", "torch.compile_bf16"), ("0.7", "torch_graph_fp32", "torch.compile_bf16")]
    assert rows[0]["same_precision_speedup"] == pytest.approx(2.4 / 2.0)
    assert rows[0]["overall_speedup"] == pytest.approx(0.8 / 2.0)
    assert rows[0]["energy_ratio"] == pytest.approx(140.0 / 100.0)
    assert rows[1]["same_precision_speedup"] == pytest.approx(2.4 / 1.6) and rows[1]["energy_ratio"] is None


def test_strongest_picks_per_precision_and_overall():
    times = _fake_e2e_doc()["runs"]["1"]["baselines"]
    assert baselines.strongest(times, "fp32") == ("torch_graph_fp32", 2.4)
    assert baselines.strongest(times) == ("torch.compile_bf16", 0.8)
    assert baselines.strongest({}, "fp32") == (None, None)


def test_summary_headline_and_tables():
    md = summary.summary_markdown([_fake_layers_doc(), _fake_e2e_doc()])
    assert "Fake GPU" in md and "abc" in md
    assert "| 1 | 0.50 | 2 |" in md                      # per batch and level
    assert "| 3x3 64->64 @56x56 | 3 | 0.90 |" in md     # lowest winning level per shape
    assert "exhaustive" in md                           # Fig. 8 status is stated, not hidden
    head = md.split("## Headline")[1].split("##")[0]
    # e2e against the strongest baseline of snn's precision and the strongest overall, first profile
    assert ("| fakenet | 1 | 1.22 (0.35) | 3.46 (1.00) | trained | 1.20 (torch_graph_fp32) | 0.40 (torch.compile_bf16) "
            "| 1.40 | – |") in head
    e2e = md.split("## End to end")[1]
    assert "| 1 | trained | 2.000 | torch_graph_fp32 | 2.400 | 1.20× | torch.compile_bf16 | 0.800 | 0.40× |" in e2e
    assert "| 1 | 0.7 | 1.600 |" in e2e
    assert "triton is not installed" in e2e              # a baseline that could not run is said
    assert "| c1 | 3x3 | 1 | 0.60 | measured | 0.590 | 0.580 |" in e2e   # target, realized, GPU-measured
    assert "snn's executor" in e2e and "not a baseline" in e2e


def test_report_writes_summary_and_plots(tmp_path):
    common.write_json(_fake_layers_doc(), tmp_path / "layers_fakenet.json")
    common.write_json(_fake_e2e_doc(), tmp_path / "e2e_fakenet.json")
    (tmp_path / "other.json").write_text('{"not": "ours"}')
    md, pngs, note = report.report(tmp_path)
    assert md.read_text().startswith("# snn benchmark summary")
    from snn.runtime.measure import plots
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
        report.report(tmp_path)


def test_cli_report(tmp_path):
    common.write_json(_fake_layers_doc(), tmp_path / "layers_fakenet.json")
    r = CliRunner().invoke(cli.run_main, ["bench", "report", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "summary.md").is_file()
    r = CliRunner().invoke(cli.run_main, ["bench", "report", str(tmp_path / "nope")])
    assert r.exit_code != 0 and "Traceback" not in r.output


def test_e2e_markdown_lists_snn_in_16_bits():
    doc = _fake_e2e_doc()
    doc["runs"]["1"]["snn16"] = {"bf16": {"median_ms": 0.64, "strongest_same_precision": "torch.compile_bf16",
                                          "speedup_vs_same_precision": 1.25, "speedup_vs_strongest": 1.25,
                                          "rel_err_vs_fp64": 1.1e-3, "rel_err_over_eager": 1.1,
                                          "top5_identical_to_eager": 0.875, "tensorcore_convs": 104}}
    md = summary.summary_markdown([doc])
    assert ("| 1 | bf16 | 0.640 | torch.compile_bf16 | 1.25× | 1.25× | 1.1e-03 | 1.10 | 88% | 104 |") in md
