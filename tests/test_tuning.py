"""Tuning: measurements keyed by kernel checksum, and what the runtime derives from them at load
(thresholds, static kernels, the measured choice among candidates). No torch, no GPU."""
from pathlib import Path

import pytest

from snn.codegen.spec import load_spec
from snn.runtime import calibrate, tuning

ROOT = Path(__file__).resolve().parents[1]
# every kernel name the tests use, with a made-up cubin checksum (the key of its measurements)
KERNELS = {f"{k}{lv}": {"sha256": f"sha-{k}{lv}"} for k in ("k", "a", "b", "c") for lv in (0.5, 0.6, 0.7, 0.9)}


def key(data, tag, b, lv, kernel):
    return tuning.kernel_key(data, tag, b, lv, kernel)


def test_apply_to_manifest_writes_measured_times_and_threshold():
    net = load_spec(ROOT / "network_specs/vgg19.yaml")
    convs = {c.name: c for c in net.convs}
    names = ["features.12", "features.14"]  # same shape: one measurement serves both
    data = {"kernels": KERNELS, "layers": [{"name": n, "batches": {"1": {"threshold": 0.5, "threshold_source": "default", "levels": {
        f"{l:.2f}": {"kernel": f"k{l}", "predicted_us": 1.0, "measured_us": None} for l in (0.5, 0.7, 0.9)}}}}
        for n in names]}
    tag = convs["features.12"].shape.tag()
    meas = {key(data, tag, 1, 0.5, "k0.5"): {"sparse_us": 32.0, "dense_us": 30.0},
            key(data, tag, 1, 0.7, "k0.7"): {"sparse_us": 20.0, "dense_us": 30.0},
            key(data, tag, 1, 0.9, "k0.9"): {"sparse_us": 15.0, "dense_us": 30.0}}
    rows = tuning.apply(data, meas, net)
    assert [(r["layer"], r["threshold"], r["never"]) for r in rows] == [("features.12", 0.7, False),
                                                                        ("features.14", 0.7, False)]
    e = data["layers"][1]["batches"]["1"]
    assert e["threshold_source"] == "calibrated" and e["levels"]["0.90"]["measured_us"] == 15.0
    assert e["levels"]["0.50"]["dense_us"] == 30.0
    # another kernel name (a rebuild) is not covered by the old measurement
    data["layers"][0]["batches"]["1"]["levels"]["0.90"]["kernel"] = "k_new"
    data["kernels"] = {**KERNELS, "k_new": {"sha256": "new"}}
    data["layers"][0]["batches"]["1"]["threshold"] = 0.5
    meas[key(data, tag, 1, 0.9, "k0.9")]["sparse_us"] = 50.0
    rows = tuning.apply(data, meas, net)
    first, second = data["layers"][0]["batches"]["1"], data["layers"][1]["batches"]["1"]
    assert first["levels"]["0.90"]["measured_us"] is None     # stale number dropped
    assert first["threshold"] == 0.7                           # from the levels still measured
    assert second["threshold"] == 1.0 and second["calibration"]["never"]  # loses at 0.9: never
    assert [r["never"] for r in rows] == [False, True]
    assert not any(r["static"] for r in rows) and "static_kernel" not in second


def test_apply_to_manifest_keeps_the_fastest_correct_candidate():
    net = load_spec(ROOT / "network_specs/vgg19.yaml")
    tag = next(c for c in net.convs if c.name == "features.12").shape.tag()

    def level(lv):
        return {"kernel": f"a{lv}", "predicted_us": 10.0, "measured_us": None, "candidates": [
            {"kernel": f"{k}{lv}", "predicted_us": p} for k, p in (("a", 10.0), ("b", 11.0), ("c", 12.0))]}
    data = {"kernels": KERNELS, "layers": [{"name": "features.12", "batches": {"1": {"threshold": 0.5, "levels": {
        f"{lv:.2f}": level(lv) for lv in (0.5, 0.7, 0.9)}}}}]}

    def m(us, dense=None, err=1e-7):
        return {"sparse_us": us, "dense_us": dense, "rel_err_vs_cudnn_fp32": err}
    meas = {key(data, tag, 1, 0.5, "a0.5"): m(40.0, 30.0), key(data, tag, 1, 0.5, "b0.5"): m(28.0),
            key(data, tag, 1, 0.5, "c0.5"): m(29.0),
            key(data, tag, 1, 0.7, "a0.7"): m(20.0, 30.0), key(data, tag, 1, 0.7, "b0.7"): m(25.0),
            key(data, tag, 1, 0.7, "c0.7"): m(5.0, err=0.3),   # fast and wrong: never chosen
            key(data, tag, 1, 0.9, "a0.9"): m(15.0, 30.0), key(data, tag, 1, 0.9, "c0.9"): m(12.0),  # b0.9 not measured
            key(data, tag, 1, 0.6, "a0.6"): m(15.0, 30.0), key(data, tag, 1, 0.6, "b0.6"): m(14.8)}  # within the margin
    data["layers"][0]["batches"]["1"]["levels"]["0.60"] = level(0.6)
    row = tuning.apply(data, meas, net)[0]
    e = data["layers"][0]["batches"]["1"]
    lv = e["levels"]
    assert [lv[k]["kernel"] for k in ("0.50", "0.60", "0.70", "0.90")] == ["b0.5", "a0.6", "a0.7", "c0.9"]
    assert 14.8 > 15.0 * (1 - tuning.TUNE_MARGIN)
    assert (lv["0.50"]["measured_us"], lv["0.50"]["dense_us"], lv["0.50"]["predicted_us"]) == (28.0, 30.0, 11.0)
    assert [c["measured_us"] for c in lv["0.90"]["candidates"]] == [15.0, None, 12.0]
    assert e["threshold"] == 0.5  # the chosen kernel wins at 0.5, where the model's pick lost
    assert row["tuned_levels"] == 2 and row["tuned_gain"] == pytest.approx((40 / 28 * 15 / 12) ** (1 / 4))
    assert "2 (" in calibrate.format_rows({"rows": [row]})[1]
    # --no-tune: the model's picks again, and the threshold from their times
    row = tuning.apply(data, meas, net, tune=False)[0]
    assert [lv[k]["kernel"] for k in ("0.50", "0.70", "0.90")] == ["a0.5", "a0.7", "a0.9"]
    assert lv["0.50"]["predicted_us"] == 10.0 and e["threshold"] == 0.6
    # a level none of whose candidates was measured keeps the model's pick, unmeasured
    data["layers"][0]["batches"]["1"]["levels"]["0.90"]["kernel"] = "c0.9"
    del meas[key(data, tag, 1, 0.9, "a0.9")], meas[key(data, tag, 1, 0.9, "c0.9")]
    tuning.apply(data, meas, net)
    assert (lv["0.90"]["kernel"], lv["0.90"]["measured_us"]) == ("a0.9", None)


def test_a_3xtf32_tile_is_kept_only_where_it_beats_the_fp32_kernels_by_the_margin():
    """FP32's rounding at a near-tie: a 3xTF32 candidate (config "mma") replaces the FP32 kernels only where it
    measured TUNE_MARGIN faster than the fastest of them, which is itself chosen as usual."""
    net = load_spec(ROOT / "network_specs/vgg19.yaml")
    tag = next(c for c in net.convs if c.name == "features.12").shape.tag()
    kernels = dict(KERNELS, **{f"x{lv}": {"sha256": f"sha-x{lv}", "config": {"family": "dense", "mma": True}}
                               for lv in (0.5, 0.7, 0.9)})

    def level(lv):
        return {"kernel": f"a{lv}", "predicted_us": 10.0, "measured_us": None, "candidates": [
            {"kernel": f"{k}{lv}", "predicted_us": p} for k, p in (("a", 10.0), ("b", 11.0), ("x", 12.0))]}
    data = {"kernels": kernels, "layers": [{"name": "features.12", "batches": {"1": {"threshold": 0.5, "levels": {
        f"{lv:.2f}": level(lv) for lv in (0.5, 0.7, 0.9)}}}}]}

    def m(us):
        return {"sparse_us": us, "dense_us": 30.0, "rel_err_vs_cudnn_fp32": 1e-7}
    meas = {key(data, tag, 1, 0.5, "a0.5"): m(20.0), key(data, tag, 1, 0.5, "x0.5"): m(19.8),   # a near-tie
            key(data, tag, 1, 0.7, "a0.7"): m(20.0), key(data, tag, 1, 0.7, "x0.7"): m(15.0),   # a clear win
            key(data, tag, 1, 0.9, "a0.9"): m(20.0), key(data, tag, 1, 0.9, "b0.9"): m(16.0),
            key(data, tag, 1, 0.9, "x0.9"): m(15.9)}   # faster than the pick, level with the other FP32 kernel
    tuning.apply(data, meas, net)
    lv = data["layers"][0]["batches"]["1"]["levels"]
    assert [lv[k]["kernel"] for k in ("0.50", "0.70", "0.90")] == ["a0.5", "x0.7", "b0.9"]
    assert 19.8 > 20.0 * (1 - tuning.TUNE_MARGIN) and 15.9 > 16.0 * (1 - tuning.TUNE_MARGIN)
    # without the config, the same times choose by speed alone
    for lvl in (0.5, 0.9):
        del kernels[f"x{lvl}"]["config"]
    tuning.apply(data, meas, net)
    assert [lv[k]["kernel"] for k in ("0.50", "0.90")] == ["a0.5", "x0.9"]


def test_static_kernel_only_where_deciding_cannot_pay():
    net = load_spec(ROOT / "network_specs/vgg19.yaml")
    tag = next(c for c in net.convs if c.name == "features.12").shape.tag()

    def run(times, levels=(0.5, 0.7, 0.9)):
        data = {"kernels": KERNELS, "layers": [{"name": "features.12", "batches": {"1": {"threshold": 0.5, "levels": {
            f"{l:.2f}": {"kernel": f"k{l}"} for l in levels}}}}]}
        meas = {key(data, tag, 1, l, f"k{l}"): {"sparse_us": s, "dense_us": 30.0}
                for l, s in times.items()}
        row = tuning.apply(data, meas, net)[0]
        return row["static"], data["layers"][0]["batches"]["1"]

    # flat in sparsity (batch 1): 20 us on a dense input too, within the decision's cost of cuDNN's 30
    static, e = run({0.5: 20.0, 0.7: 19.0, 0.9: 18.0})
    assert static and e["static_kernel"] == "k0.5" and e["threshold"] == 0.5 and e["calibration"]["static"]
    # steep in density: a line through (0.5, 25) (0.3, 15) (0.1, 5) reaches 50 us on a dense input
    static, e = run({0.5: 25.0, 0.7: 15.0, 0.9: 5.0})
    assert not static and "static_kernel" not in e and e["threshold"] == 0.5
    static, e = run({0.5: 31.0, 0.7: 15.0, 0.9: 5.0})  # loses at a measured level: a real decision
    assert not static and e["threshold"] == 0.7
    static, e = run({0.7: 15.0, 0.9: 14.0})            # the lowest built level (0.5) not measured
    assert not static
    static, e = run({0.5: 20.0, 0.9: 19.0})            # a subset of levels that holds the lowest one
    assert static and e["static_kernel"] == "k0.5"
    # wins only at 0.9, by 2 us: less than a decision costs, so no decision: dense, like never
    static, e = run({0.5: 45.0, 0.7: 35.0, 0.9: 28.0})
    assert not static and e["threshold"] == 1.0 and e["calibration"]["never"] and e["calibration"]["decision_unpaid"]
    static, e = run({0.5: 45.0, 0.7: 35.0, 0.9: 15.0})  # by 15 us at 0.9: worth deciding
    assert not static and e["threshold"] == 0.9 and not e["calibration"]["decision_unpaid"]


def test_tuning_read_reports_damage_in_one_line(tmp_path):
    p = tmp_path / "tuning.json"
    m = {"network": "vgg19", "arch": "sm_90", "gpu": "h100"}
    assert tuning.read(p, m)["measurements"] == {}  # none yet: empty
    p.write_text("{broken")
    with pytest.raises(tuning.TuningError, match=r"tuning.json: not a tuning file .*run `snn-run calibrate` again"):
        tuning.read(p, m)
    tuning.write(p, {**tuning.empty(m), "measurements": {"a": 1}})
    assert tuning.read(p, m)["measurements"] == {"a": 1}
    with pytest.raises(tuning.TuningError, match="measured for arch 'sm_90', the bundle is 'sm_80'"):
        tuning.read(p, {**m, "arch": "sm_80"})


def test_the_same_kernel_name_with_another_cubin_is_measured_again():
    data = {"kernels": {"k": {"sha256": "aa"}}}
    before = tuning.kernel_key(data, "t", 1, 0.5, "k")
    data["kernels"]["k"]["sha256"] = "bb"
    assert tuning.kernel_key(data, "t", 1, 0.5, "k") != before
    assert tuning.validity(data, {before: {}}) == (0, 1)
