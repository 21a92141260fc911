"""Planning (codegen/plan/planner.py): levels, the choice per level, whole networks, alternatives for
calibrate, and the speed of planning."""
import dataclasses
import time

import pytest

from snn.codegen.config import KernelConfig
from snn.codegen.errors import UserError
from snn.codegen.gpu import load_gpu
from snn.codegen.plan import clear_caches, parse_levels, plan_network, plan_shape, planner, stages
from snn.codegen.plan.explain import explain_layer
from snn.codegen.plan.planner import CANDIDATE_WINDOW, REUSE_TOLERANCE, run_stages
from snn.codegen.plan.space import configs, row_tiles
from snn.codegen.plan.tables import space_table
from snn.codegen.spec import ConvShape, load_spec

from plan_examples import H100, LEVELS, ROOT, SPECS


def test_levels_default_sweep_is_the_papers():
    assert LEVELS == (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
    assert parse_levels("0.5,0.7") == (0.5, 0.7) and parse_levels("0.6") == (0.6,)
    assert parse_levels("0.1:0.3:0.1") == (0.1, 0.2, 0.3)  # stop included despite float steps
    assert parse_levels([0.449999, 0.9]) == (0.45, 0.9)


@pytest.mark.parametrize("text, expected", [
    ("abc", "expected start:stop:step"), ("0.4:0.9", "expected start:stop:step"),
    ("0.9:0.4:0.1", "start <= stop"), ("0.4:0.9:0", "step > 0"), ("0.4:1.0:0.1", "outside [0, 1)"),
    ("-0.1", "outside [0, 1)"),
])
def test_levels_errors(text, expected):
    with pytest.raises(UserError, match=expected.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        parse_levels(text)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_predicted_time_falls_with_sparsity_for_every_layer(spec):
    net = load_spec(spec)
    runs = [("h100", 1, "snn"), ("h100", 8, "snn"), ("h100", 1, "paper"), ("h100", 8, "paper"),
            ("v100", 4, "snn"), ("a100", 4, "snn"), ("rtx2080ti", 4, "snn"), ("h200", 32, "snn")]
    for gpu, batch, model in runs:
        plan = plan_network(net, load_gpu(gpu), batch, LEVELS, model)
        assert len(plan.layers) == len(net.sparse_convs) == len(net.convs) - 1  # the stem runs dense
        for lp in plan.layers:
            t = [lp.choices[lv].predicted_us for lv in LEVELS]
            assert all(b < a for a, b in zip(t, t[1:])), (gpu, batch, model, lp.layer.name, t)


def test_identical_shapes_are_planned_once(monkeypatch):
    net = load_spec(ROOT / "network_specs" / "resnet152.yaml")
    calls = []
    real = plan_shape
    monkeypatch.setattr(planner, "plan_shape", lambda shape, *a, **k: calls.append(shape) or real(shape, *a, **k))
    plan = plan_network(net, H100, 1, "0.5,0.8")
    assert len(calls) == len(set(calls)) == len({c.shape for c in net.sparse_convs}) == 22  # the stem: dense
    same = [lp for lp in plan.layers if lp.layer.shape == plan.layers[-2].layer.shape]
    assert len(same) > 1 and all(lp.choices is same[0].choices for lp in same)
    assert set(plan.layers[0].choices) == {0.5, 0.8}


def test_pre_activated_layers_get_kernels_that_stage_the_batchnorm():
    """DenseNet's conv1 (its input a batchnorm + ReLU of a concat: spec.ConvLayer.bn_input) is planned with in_bn
    kernels (not clusters), predicted alike; a ResNet's convs (batchnorms folded into the conv before), DenseNet's
    conv2 and its transition convs (after their pool, which applies the batchnorm + ReLU) are not."""
    net = load_spec("densenet121")
    bn = {c.name for c in net.convs if c.bn_input}
    assert bn == {c.name for c in net.convs if c.name.endswith(".conv1")}
    assert len(bn) == 58
    assert not any(c.bn_input for c in load_spec("resnet50").convs)
    plan = plan_network(net, H100, 8, (0.5, 0.8))
    for lp in plan.layers:
        for ch in lp.choices.values():
            assert all(cfg.in_bn == (lp.layer.bn_input and not cfg.cluster) for cfg, _ in ch.candidates()), lp.layer.name
    conv1 = next(lp for lp in plan.layers if lp.layer.bn_input)
    plain = plan_shape(conv1.layer.shape, H100, 8, (0.5, 0.8))
    for level, ch in conv1.choices.items():
        assert ch.predicted_us == plain[level].predicted_us
        assert ch.config == dataclasses.replace(plain[level].config, in_bn=not plain[level].config.cluster)


def test_layers_only_concats_read_get_kernels_that_store_at_a_pitch():
    """DenseNet's conv2 (read only by its block's concats) is planned with out_ld kernels (KernelConfig.out_ld:
    the same tiles, their names ending _ld), predicted alike; every other conv, and every ResNet conv, is not."""
    net = load_spec("densenet121")
    into = {c.name for c in net.convs if c.into_concat}
    assert into == {c.name for c in net.convs if c.name.endswith(".conv2")} and len(into) == 58
    assert not any(c.into_concat for c in load_spec("resnet50").convs)
    plan = plan_network(net, H100, 1, (0.5, 0.8))
    for lp in plan.layers:
        for ch in lp.choices.values():
            assert all(cfg.out_ld == lp.layer.into_concat for cfg, _ in ch.candidates()), lp.layer.name
    conv2 = next(lp for lp in plan.layers if lp.layer.into_concat)
    plain = plan_shape(conv2.layer.shape, H100, 1, (0.5, 0.8))
    for level, ch in conv2.choices.items():
        assert ch.config == dataclasses.replace(plain[level].config, out_ld=True)
        assert ch.predicted_us == plain[level].predicted_us
        assert conv2.to_dict(1)["levels"][f"{level:.2f}"]["kernel"].endswith("_ld_b1")


def test_plan_subset_of_layers_and_errors():
    net = load_spec(ROOT / "network_specs" / "resnet50.yaml")
    plan = plan_network(net, H100, 1, "0.6", layers=["layer2.0.conv2", "layer1.0.conv1"])
    assert [lp.layer.name for lp in plan.layers] == ["layer2.0.conv2", "layer1.0.conv1"]
    with pytest.raises(UserError, match="conv layer 'conv1' always runs dense: its input 'image' is no ReLU output"):
        plan_network(net, H100, 1, "0.6", layers=["conv1"])
    with pytest.raises(UserError, match="no conv layer named 'layer9.conv1'"):
        plan_network(net, H100, 1, "0.6", layers=["layer9.conv1"])
    with pytest.raises(UserError, match="unknown cost model"):
        plan_network(net, H100, 1, "0.6", model="roofline")
    with pytest.raises(UserError, match="batch must be a positive integer"):
        plan_network(net, H100, 0, "0.6")


def test_plan_json_round_trip():
    net = load_spec(ROOT / "network_specs" / "vgg16.yaml")
    d = plan_network(net, H100, 2, "0.5,0.9").to_dict()
    assert d["gpu"] == "h100" and d["arch"] == "sm_90" and d["batch"] == 2 and d["levels"] == [0.5, 0.9]
    layer = d["layers"][3]
    entry = layer["levels"]["0.90"]
    cfg = KernelConfig.from_dict(entry["config"])
    assert layer["name"] == net.sparse_convs[3].name
    assert entry["kernel"] == cfg.name(net.sparse_convs[3].shape, 2)
    assert d["total_predicted_us"]["0.90"] < d["total_predicted_us"]["0.50"]


def test_planning_resnet152_is_fast():
    net = load_spec(ROOT / "network_specs" / "resnet152.yaml")
    clear_caches()
    t0 = time.perf_counter()
    plan = plan_network(net, H100, 1, LEVELS)
    dt = time.perf_counter() - t0
    print(f"\nplanning ResNet-152 (154 sparse convs, 22 shapes) x 11 levels on h100, cold caches: {dt * 1000:.0f} ms")
    assert len(plan.layers) == 154 and dt < 5.0  # target < 1 s; generous margin against a loaded CI box


def test_plan_keeps_a_lower_levels_config_only_within_tolerance():
    net = load_spec(ROOT / "network_specs" / "resnet50.yaml")
    plan = plan_network(net, H100, 1, LEVELS)
    reused = 0
    for shape in dict.fromkeys(c.shape for c in net.sparse_convs):
        choices = next(lp.choices for lp in plan.layers if lp.layer.shape == shape)
        seen = []
        for lv in LEVELS:
            info = explain_layer(shape, H100, 1, lv, "snn", top=1, chosen=choices[lv].config)
            best = info["top"][0]["predicted_us"]
            assert info["chosen"]["predicted_us"] == pytest.approx(choices[lv].predicted_us)
            assert choices[lv].predicted_us <= best * (1 + REUSE_TOLERANCE) + 1e-9
            if not info["top"][0]["chosen"]:
                assert choices[lv].config in seen  # only an earlier level's config is ever kept
                reused += 1
            seen.append(choices[lv].config)
    assert reused > 0  # the rule does something on a real network


def test_a_lower_levels_pick_stays_a_candidate_when_stage2_drops_it():
    """64->64 @56 at batch 1: stage 2's cut moves with the density and drops the 0.7 pick at 0.75; the plan keeps
    it there (it is still the fastest prediction) instead of switching to a config predicted slower."""
    shape = ConvShape(64, 64, 56, 56, 3, 3, (1, 1), (1, 1))
    plan = plan_shape(shape, H100, 1, [0.7, 0.75])
    assert plan[0.75].config == plan[0.7].config and plan[0.75].predicted_us < plan[0.7].predicted_us
    assert plan[0.7].config not in stages(shape, H100, 1, 0.75)["stage2"]
    info = explain_layer(shape, H100, 1, 0.75, chosen=plan[0.75].config)
    assert info["chosen"]["tag"] == plan[0.7].config.tag()
    assert info["counts"]["stage2_data_movement"] == len(stages(shape, H100, 1, 0.75)["stage2"])


def test_row_tiles_are_batch_one_alternatives_of_stride_one_3x3s():
    s14 = ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1))
    assert [c.tag() for c in row_tiles(s14, 1)] == ["th1tw7tc8_t32n2_w7x2", "th1tw7tc8_t32n4_w7x2", "th1tw7tc8_t32n2_w7x1"]
    assert [c.tag() for c in row_tiles(ConvShape(512, 512, 7, 7, 3, 3, (1, 1), (1, 1)), 1)] == ["th1tw7tc8_t32n2_w7x1"]
    assert row_tiles(s14, 8) == []                                                          # batch 1 only
    assert row_tiles(ConvShape(256, 256, 14, 14, 1, 1, (1, 1), (0, 0)), 1) == []            # 1x1
    assert row_tiles(ConvShape(256, 256, 28, 28, 3, 3, (2, 2), (1, 1)), 1) == []            # stride 2
    assert row_tiles(ConvShape(128, 32, 14, 14, 3, 3, (1, 1), (1, 1)), 1) == []             # 32 channels: nt 2 pads N
    # priced by the model, after the pick, at every level; they are not in the space the model ranks
    ch = plan_shape(s14, H100, 1, [0.5, 0.7])
    for choice in ch.values():
        alts = {a.config: a.predicted_us for a in choice.alternatives}
        assert set(alts) == set(row_tiles(s14, 1)) and choice.config not in alts and all(t > 0 for t in alts.values())
    assert not set(row_tiles(s14, 1)) & set(configs(space_table(s14), range(len(space_table(s14)["th"]))))
    assert plan_shape(s14, H100, 1, [0.7], model="paper")[0.7].alternatives == ()             # the "snn" model's


def test_candidates_are_the_pick_then_one_of_each_other_family_then_the_next_fastest():
    shape = ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1))

    def fam(c):
        return c.warp_tiled, c.nt
    for batch in (1, 32):
        one = plan_shape(shape, H100, batch, [0.7], candidates=1)[0.7]
        pick = plan_shape(shape, H100, batch, [0.7], candidates=4)[0.7]
        rows = set(row_tiles(shape, batch))   # at batch 1 the row tiles ride along whatever `candidates` (below)
        assert (pick.config, pick.predicted_us) == (one.config, one.predicted_us)
        assert {a.config for a in one.alternatives} == rows and bool(rows) == (batch == 1)
        cands = [ct for ct in pick.candidates() if ct[0] not in rows]
        assert len(cands) == 4 and cands[0] == (pick.config, pick.predicted_us) and len({c for c, _ in cands}) == 4
        # stage 3's ranking at this level, with its predictions
        r = run_stages(shape, H100, batch, 0.7, "snn")
        ranked = [(c, float(r["s3"]["predicted_us"][j])) for c, j in
                  zip(configs(space_table(shape), r["idx2"][r["order"]], H100.clusters), r["order"])]
        inside = [(c, t) for c, t in ranked if c != pick.config and t <= pick.predicted_us * CANDIDATE_WINDOW]
        assert all(ct in inside for ct in cands[1:])
        fams = [fam(pick.config)]
        for c, _ in cands[1:]:
            if fam(c) in fams:
                break
            fams.append(fam(c))
        missing = {fam(c) for c, _ in inside} - set(fams)
        assert not missing or len(fams) == 4   # a family within the window is left out only when all slots differ
        assert len(fams) >= 2                  # both families are measured on these layers
        # after the families, the next fastest in stage 3's order
        rest = [ct for ct in inside if ct not in cands[:len(fams)]]
        assert cands[len(fams):] == rest[:4 - len(fams)]
    d = plan_network(load_spec(ROOT / "network_specs/resnet50.yaml"), H100, 1, "0.7", candidates=2).to_dict()
    lv = d["layers"][0]["levels"]["0.70"]
    assert len(lv["alternatives"]) == 1 and lv["alternatives"][0]["kernel"] != lv["kernel"]
    with pytest.raises(UserError, match="candidates"):
        plan_shape(shape, H100, 1, [0.7], candidates=0)


def test_cluster_splits_are_an_sm90_option(tmp_path):
    """`--clusters` (GPU.clusters): the plan's channel splits of <= 8 blocks become cluster sums; off by default,
    and refused where the GPU has no clusters."""
    shape = ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1))
    assert not any(c.cluster for c in stages(shape, H100, 1, 0.7)["stage3"])
    with_cl = stages(shape, dataclasses.replace(H100, clusters=True), 1, 0.7)["stage3"]
    assert any(c.cluster for c in with_cl)
    assert all(c.cluster == (1 < -(-shape.C // c.tc) <= 8) for c in with_cl if c.cluster or -(-shape.C // c.tc) == 1)
    from snn.codegen.build import build_spec
    with pytest.raises(UserError, match="--clusters: a100 .* no thread-block clusters"):
        build_spec(ROOT / "network_specs" / "resnet50.yaml", "a100", clusters=True, out=tmp_path)
