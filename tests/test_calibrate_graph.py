"""calibrate's in-graph step without a GPU: which shapes and candidates it tries, what it keeps against a
made-up network time, and how its verdicts reach the manifest at load (runtime/calibrate_graph.py, tuning.py)."""
from pathlib import Path

from snn.codegen.spec import load_spec
from snn.runtime import calibrate_graph as cg, tuning

ROOT = Path(__file__).resolve().parents[1]


def network_time(costs: dict, base: float = 10.0, noise=None, pairs=None):
    """measure(): base ms plus costs[(layer, kernel)] for each override, plus pairs(overrides); noise(n) added
    to the n-th call."""
    calls = []

    def measure(overrides):
        calls.append(dict(overrides))
        extra = (noise(len(calls)) if noise else 0.0) + (pairs(overrides) if pairs else 0.0)
        return base + sum(costs.get((layer, k), 0.0) for layer, k in overrides.items()) + extra
    return measure, calls


def test_keeps_a_faster_candidate_and_builds_on_it():
    costs = {("a1", "fast"): -0.2, ("a2", "fast"): -0.2, ("a1", "slow"): 0.3, ("a2", "slow"): 0.3,
             ("b1", "x"): -0.01}  # 0.1 %: under the margin
    measure, calls = network_time(costs)
    v = cg.refine([("A", ["a1", "a2"], ["slow", "fast"]), ("B", ["b1"], ["x"])], measure, joint=1)
    assert v["A"]["kernel"] == "fast" and v["A"]["ms"] == {"calibrated": 10.0, "slow": 10.6, "fast": 9.6}
    assert v["B"]["kernel"] is None and v["B"]["ms"]["x"] == 9.59
    # B was tried on top of A's verdict
    with_b = [c for c in calls if "b1" in c]
    assert with_b and all(c.get("a1") == "fast" and c.get("a2") == "fast" for c in with_b)


def test_a_win_that_does_not_hold_when_measured_again_is_not_kept():
    # the candidate's first trial (call 2) is lucky by 0.5 ms; measured again it is 0.1 % slower
    measure, calls = network_time({("a1", "k"): 0.01}, noise=lambda n: -0.5 if n == 2 else 0.0)
    v = cg.refine([("A", ["a1"], ["k"])], measure)
    assert v["A"]["kernel"] is None and len(calls) == 4   # calibrated, k, k again, calibrated again


def test_the_largest_shapes_are_tried_together():
    # a1's "p" and b1's "q" each cost nothing next to the other's calibrated kernel, and save 1 ms together
    # (ResNet-152's 1x1 convs on either side of layer3's 3x3 ones at batch 8); C's "r" saves 0.01 ms: noise
    def pairs(o):
        return -1.0 if o.get("a1") == "p" and o.get("b1") == "q" else 0.0
    groups = [("A", ["a1"], ["p", "s"]), ("B", ["b1"], ["q"]), ("C", ["c1"], ["r"])]
    measure, calls = network_time({("a1", "s"): 0.5, ("c1", "r"): -0.01}, pairs=pairs)
    v = cg.refine(groups, measure, joint=1)
    assert [v[k]["kernel"] for k in "ABC"] == [None, None, None]   # one shape at a time cannot see it
    measure, calls = network_time({("a1", "s"): 0.5, ("c1", "r"): -0.01}, pairs=pairs)
    v = cg.refine(groups, measure)
    assert [v[k]["kernel"] for k in "ABC"] == ["p", "q", None]
    assert v["A"]["ms"] == {"calibrated": 10.0, "p": 9.0, "s": 10.5} and v["A"]["joint"] == ["B"]
    assert len(calls) == 6 + 2 + 2   # 3 x 2 combinations, the winner confirmed, then C alone


def manifest_and_measurements(net):
    """vgg19's features.12 and features.14 (one shape): level 0.5 with a sparse pick and two dense candidates."""
    kernels = {"s": {"sha256": "s1", "config": {}}, "d1": {"sha256": "d1", "config": {"family": "dense"}},
               "d2": {"sha256": "d2", "config": {"family": "dense"}}, "d3": {"sha256": "d3", "config": {"family": "dense"}}}
    level = {"kernel": "s", "predicted_us": 1.0, "candidates": [{"kernel": k, "predicted_us": 1.0}
                                                                for k in ("s", "d1", "d2", "d3")]}
    data = {"kernels": kernels, "layers": [{"name": n, "batches": {"1": {"threshold": 0.5, "levels": {"0.50": dict(
        level, candidates=list(level["candidates"]))}}}} for n in ("features.12", "features.14")]}
    tag = next(c for c in net.convs if c.name == "features.12").shape.tag()
    m = {k: {"sparse_us": us, "dense_us": 30.0, "rel_err_vs_cudnn_fp32": err}
         for k, us, err in (("s", 20.0, 1e-7), ("d1", 22.0, 1e-7), ("d2", 25.0, 1e-7), ("d3", 5.0, 0.5))}
    meas = {tuning.kernel_key(data, tag, 1, 0.5, k): v for k, v in m.items()}
    return data, meas, tag


class FakeCache:
    def __init__(self, data):
        self.data = data
        self.layers = {layer["name"]: layer for layer in data["layers"]}

    def layer_entry(self, name, b):
        return self.layers.get(name, {}).get("batches", {}).get(str(b))

    def kernel(self, name):
        return self.data["kernels"][name]


def test_tries_the_correct_dense_candidates_of_shared_shapes():
    net = load_spec(ROOT / "network_specs/vgg19.yaml")
    data, meas, tag = manifest_and_measurements(net)
    groups = cg.groups_to_try(net, FakeCache(data), 1, meas)
    # the sparse pick is not a trial, d3 is wrong (rel_err 0.5), a measurement missing means no trial
    assert groups == [(tuning.graph_key(tag, 1), ["features.12", "features.14"], ["d1", "d2"])]
    assert cg.groups_to_try(net, FakeCache(data), 1, meas, min_layers=3) == []
    del meas[tuning.kernel_key(data, tag, 1, 0.5, "d2")]
    assert cg.groups_to_try(net, FakeCache(data), 1, meas)[0][2] == ["d1"]


def test_apply_makes_the_kept_kernel_static_while_it_is_unchanged():
    net = load_spec(ROOT / "network_specs/vgg19.yaml")
    data, meas, tag = manifest_and_measurements(net)
    graph = {tuning.graph_key(tag, 1): {"kernel": "d2", "sha256": "d2", "ms": {}}}
    rows = tuning.apply(data, meas, net, graph=graph)
    entries = [layer["batches"]["1"] for layer in data["layers"]]
    assert [e.get("static_kernel") for e in entries] == ["d2", "d2"]
    assert [r["in_graph"] for r in rows] == ["d2", "d2"] and entries[0]["calibration"]["in_graph"] == "d2"
    data["kernels"]["d2"]["sha256"] = "rebuilt"   # the kernel changed since: its verdict no longer holds
    rows = tuning.apply(data, meas, net, graph=graph)
    assert [r["in_graph"] for r in rows] == [None, None]
    assert all(e.get("static_kernel") != "d2" for e in entries)
    assert not tuning.graph_valid(data, graph)
    # a verdict of "the calibrated choice" changes nothing
    data["kernels"]["d2"]["sha256"] = "d2"
    tuning.apply(data, meas, net, graph={tuning.graph_key(tag, 1): {"kernel": None, "sha256": None, "ms": {}}})
    assert all(e.get("static_kernel") != "d2" for e in entries)
