"""--explain (codegen/plan/explain.py): how the stages went for one shape and level."""

from snn.codegen.plan.explain import explain_layer, format_explain

from plan_examples import H100, SHAPE


def test_explain_counts_shrink_stage_by_stage():
    info = explain_layer(SHAPE, H100, 2, 0.5, "snn", top=4)
    c = info["counts"]
    assert c["enumerated"] >= c["launchable"] >= c["stage1_occupancy"] > c["stage2_data_movement"] == c["stage3_timed"] >= 1
    assert len(info["top"]) == 4 and info["chosen"] == info["top"][0]
    assert [r["predicted_us"] for r in info["top"]] == sorted(r["predicted_us"] for r in info["top"])
    text = format_explain(info, ["a", "b"])
    assert "stage 1 occupancy" in text and info["chosen"]["tag"] in text
