"""calibrate without a GPU or torch: the manifest update from measurements (thresholds, candidate kernels,
static kernels) and the progress file."""
import json
from pathlib import Path

import pytest

from snn.codegen.spec import load_spec
from snn.runtime import calibrate

ROOT = Path(__file__).resolve().parents[1]


def test_apply_to_manifest_writes_measured_times_and_threshold():
    net = load_spec(ROOT / "network_specs/vgg19.yaml")
    convs = {c.name: c for c in net.convs}
    names = ["features.12", "features.14"]  # same shape: one measurement serves both
    data = {"layers": [{"name": n, "batches": {"1": {"threshold": 0.5, "threshold_source": "default", "levels": {
        f"{l:.2f}": {"kernel": f"k{l}", "predicted_us": 1.0, "measured_us": None} for l in (0.5, 0.7, 0.9)}}}}
        for n in names]}
    tag = convs["features.12"].shape.tag()
    meas = {calibrate.measurement_key(tag, 1, 0.5, "k0.5"): {"sparse_us": 32.0, "dense_us": 30.0},
            calibrate.measurement_key(tag, 1, 0.7, "k0.7"): {"sparse_us": 20.0, "dense_us": 30.0},
            calibrate.measurement_key(tag, 1, 0.9, "k0.9"): {"sparse_us": 15.0, "dense_us": 30.0}}
    rows = calibrate.apply_to_manifest(data, meas, net)
    assert [(r["layer"], r["threshold"], r["never"]) for r in rows] == [("features.12", 0.7, False),
                                                                        ("features.14", 0.7, False)]
    e = data["layers"][1]["batches"]["1"]
    assert e["threshold_source"] == "calibrated" and e["levels"]["0.90"]["measured_us"] == 15.0
    assert e["levels"]["0.50"]["dense_us"] == 30.0
    # another kernel name (a rebuild) is not covered by the old measurement
    data["layers"][0]["batches"]["1"]["levels"]["0.90"]["kernel"] = "k_new"
    data["layers"][0]["batches"]["1"]["threshold"] = 0.5
    meas[calibrate.measurement_key(tag, 1, 0.9, "k0.9")]["sparse_us"] = 50.0
    rows = calibrate.apply_to_manifest(data, meas, net)
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
    data = {"layers": [{"name": "features.12", "batches": {"1": {"threshold": 0.5, "levels": {
        f"{lv:.2f}": level(lv) for lv in (0.5, 0.7, 0.9)}}}}]}

    def m(us, dense=None, err=1e-7):
        return {"sparse_us": us, "dense_us": dense, "rel_err_vs_cudnn_fp32": err}
    key = calibrate.measurement_key
    meas = {key(tag, 1, 0.5, "a0.5"): m(40.0, 30.0), key(tag, 1, 0.5, "b0.5"): m(28.0),
            key(tag, 1, 0.5, "c0.5"): m(29.0),
            key(tag, 1, 0.7, "a0.7"): m(20.0, 30.0), key(tag, 1, 0.7, "b0.7"): m(25.0),
            key(tag, 1, 0.7, "c0.7"): m(5.0, err=0.3),   # fast and wrong: never chosen
            key(tag, 1, 0.9, "a0.9"): m(15.0, 30.0), key(tag, 1, 0.9, "c0.9"): m(12.0),  # b0.9 not measured
            key(tag, 1, 0.6, "a0.6"): m(15.0, 30.0), key(tag, 1, 0.6, "b0.6"): m(14.8)}  # within the margin
    data["layers"][0]["batches"]["1"]["levels"]["0.60"] = level(0.6)
    row = calibrate.apply_to_manifest(data, meas, net)[0]
    e = data["layers"][0]["batches"]["1"]
    lv = e["levels"]
    assert [lv[k]["kernel"] for k in ("0.50", "0.60", "0.70", "0.90")] == ["b0.5", "a0.6", "a0.7", "c0.9"]
    assert 14.8 > 15.0 * (1 - calibrate.TUNE_MARGIN)
    assert (lv["0.50"]["measured_us"], lv["0.50"]["dense_us"], lv["0.50"]["predicted_us"]) == (28.0, 30.0, 11.0)
    assert [c["measured_us"] for c in lv["0.90"]["candidates"]] == [15.0, None, 12.0]
    assert e["threshold"] == 0.5  # the chosen kernel wins at 0.5, where the model's pick lost
    assert row["tuned_levels"] == 2 and row["tuned_gain"] == pytest.approx((40 / 28 * 15 / 12) ** (1 / 4))
    assert "2 (" in calibrate.format_rows({"rows": [row]})[1]
    # --no-tune: the model's picks again, and the threshold from their times
    row = calibrate.apply_to_manifest(data, meas, net, tune=False)[0]
    assert [lv[k]["kernel"] for k in ("0.50", "0.70", "0.90")] == ["a0.5", "a0.7", "a0.9"]
    assert lv["0.50"]["predicted_us"] == 10.0 and e["threshold"] == 0.6
    # a level none of whose candidates was measured keeps the model's pick, unmeasured
    data["layers"][0]["batches"]["1"]["levels"]["0.90"]["kernel"] = "c0.9"
    del meas[key(tag, 1, 0.9, "a0.9")], meas[key(tag, 1, 0.9, "c0.9")]
    calibrate.apply_to_manifest(data, meas, net)
    assert (lv["0.90"]["kernel"], lv["0.90"]["measured_us"]) == ("a0.9", None)


def test_static_kernel_only_where_deciding_cannot_pay():
    net = load_spec(ROOT / "network_specs/vgg19.yaml")
    tag = next(c for c in net.convs if c.name == "features.12").shape.tag()

    def run(times, levels=(0.5, 0.7, 0.9)):
        data = {"layers": [{"name": "features.12", "batches": {"1": {"threshold": 0.5, "levels": {
            f"{l:.2f}": {"kernel": f"k{l}"} for l in levels}}}}]}
        meas = {calibrate.measurement_key(tag, 1, l, f"k{l}"): {"sparse_us": s, "dense_us": 30.0}
                for l, s in times.items()}
        row = calibrate.apply_to_manifest(data, meas, net)[0]
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


def test_sidecar_read_tolerates_damage(tmp_path):
    p = tmp_path / "calibration.json"
    assert calibrate.read_sidecar(p)["measurements"] == {}
    p.write_text("{broken")
    assert calibrate.read_sidecar(p)["measurements"] == {}
    p.write_text(json.dumps({"measurements": {"a": 1}}))
    assert calibrate.read_sidecar(p)["measurements"] == {"a": 1}
