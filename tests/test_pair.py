"""Two 1x1 convs in one launch: the kernel's configs and rendering (codegen/pair.py), the pairs a network has
(spec.Network.conv_pairs), the build offering them, and a captured pass that runs them (runtime/pairs.py, with the
TorchBackend's emulation; the kernel itself is checked against float64 on the GPU, tests/gpu/test_kernels.py)."""
import re
from pathlib import Path

import pytest

from snn.codegen import pair
from snn.codegen.dense import SMEM_LIMIT
from snn.codegen.emit import CONV_ARGS, IN_ARGS, ZERO_ARGS
from snn.codegen.spec import ConvShape, load_spec, parse_spec

from buildfakes import build_small_spec
from test_precision import needs_nvcc

ROOT = Path(__file__).resolve().parents[1]


def one_by_one(c, n, hw):
    return ConvShape(c, n, hw, hw, 1, 1, (1, 1), (0, 0))


L3 = (one_by_one(256, 1024, 14), one_by_one(1024, 256, 14))     # ResNet-152's 14x14 block boundary
L1 = (one_by_one(64, 256, 56), one_by_one(256, 64, 56))


def test_pairs_need_two_stride_one_1x1_convs_the_second_reading_the_first():
    assert pair.eligible(*L3) and pair.eligible(*L1)
    assert not pair.eligible(L3[0], one_by_one(512, 256, 14))                  # the second reads another width
    assert not pair.eligible(ConvShape(256, 1024, 14, 14, 3, 3, (1, 1), (1, 1)), L3[1])   # a 3x3
    assert not pair.eligible(L3[0], ConvShape(1024, 256, 14, 14, 1, 1, (2, 2), (0, 0)))   # stride 2
    assert not pair.eligible(L3[0], one_by_one(1024, 96, 14))                  # N2 not whole float4 runs of 16 threads
    with pytest.raises(ValueError, match="2..16 blocks of 32"):
        pair.render(*L3, 1, pair.PairConfig(16, 32))                           # 32 blocks a cluster
    with pytest.raises(ValueError, match="shared memory"):
        pair.render(*L3, 1, pair.PairConfig(64, 128, 128, 1, 4))               # too large even with W2 streamed
    with pytest.raises(ValueError, match="streamed W2 share needs one slice"):
        pair.render(*L3, 1, pair.PairConfig(64, 128))


def test_candidates_at_batch_one_on_gpus_with_clusters():
    cands = pair.candidates(*L3, 1)
    assert cands and {c.tag() for c in cands} <= {pair.PairConfig(*t).tag() for t in pair.CANDIDATES}
    assert {"m32n64t128s1p2", "m32n64t128s1p2w", "m32n64t128s1p2wx32"} <= {c.tag() for c in cands}
    # a 64-channel second conv cannot spread over 32 threads of 4 channels: that candidate is left out there
    assert {c.tx2 for c in pair.candidates(*L1, 1)} == {pair.TX}
    assert pair.candidates(*L3, 2) == [] and pair.candidates(*L3, 1, clusters=False) == []
    for c in cands:
        assert pair.smem_bytes(*L3, c) <= SMEM_LIMIT


def test_28_pixel_tiles_where_the_layouts_divide_two_rows_of_a_14_wide_map():
    """A 14x14 map is 7 whole 28-pixel tiles (6.1 of 32): offered where both convs' thread rows divide 28, the copy
    rows that do not (28 over 16 a pass) guarded rather than copied past the tile."""
    tags = {c.tag() for c in pair.candidates(*L3, 1)}
    assert {"m28n64t256s1p2wx64c64", "m28n64t256s1p2x64k4c64"} <= tags
    assert pair.grid(L3[0], 1, pair.PairConfig(28, 64, 256, 1, 2, False, 64, 4, 64)) == [7, 1, 16]
    src = pair.render(*L3, 1, pair.PairConfig(28, 64, 256, 1, 2, False, 64, 4, 64))[1]
    assert "#define BM 28" in src and "if (ain[i]) snn_cp16(" in src
    with pytest.raises(ValueError, match="y channels over 32 threads"):   # 8 thread rows do not divide 28
        pair.render(*L3, 1, pair.PairConfig(28, 64, 256, 1, 2, False, 32, 4, 64))
    with pytest.raises(ValueError, match="bm a multiple of 8"):           # nor the first conv's 8
        pair.render(*L3, 1, pair.PairConfig(28, 64, 256, 1, 2, True, 64, 4, 64))
    # 64 threads along N need 256 y channels: not offered for layer 2's 128
    l2 = (one_by_one(128, 512, 28), one_by_one(512, 128, 28))
    assert all(c.tx2 != 4 * pair.TX for c in pair.candidates(*l2, 1))
    assert "m28n128t128s1p2x32k2" in {c.tag() for c in pair.candidates(*l2, 1)}


def test_a_w2_share_that_does_not_fit_is_streamed():
    """ResNet's 7x7 pairs hold 128 x channels a block, whose 128 x 512 W2 rows (256 KB) do not fit: those candidates
    stream them through a ring of bulk copies, and only where no whole-share candidate fits."""
    l4 = (one_by_one(512, 2048, 7), one_by_one(2048, 512, 7))
    cands = pair.candidates(*l4, 1)
    assert {c.tag() for c in cands} == {pair.PairConfig(*t).tag() for t in pair.STREAMED}
    for c in cands:
        ring = pair.w2_ring(*l4, c)
        assert 2 <= ring <= pair.W2R_MAX and pair.smem_bytes(*l4, c) <= SMEM_LIMIT
        src = pair.render(*l4, 1, c)[1]
        assert f"#define W2R {ring}" in src and "w2_bar[W2R]" in src
    whole = pair.PairConfig(*pair.CANDIDATES[0])
    assert pair.w2_ring(*L3, whole) == 0 and "W2R" not in pair.render(*L3, 1, whole)[1]
    assert not {c.tag() for c in pair.candidates(*L3, 1)} & {pair.PairConfig(*t).tag() for t in pair.STREAMED}


def test_slices_add_their_partial_y_tiles_before_the_cluster_sum():
    one, two = pair.PairConfig(32, 64, 128, 1, 2), pair.PairConfig(32, 64, 128, 2, 2)
    src = pair.render(*L3, 1, two)[1]
    # one tile pushed a block, whatever its slices: the received partials do not grow with them
    assert pair.smem_bytes(*L3, two) == pair.smem_bytes(*L3, one)
    assert src.index("red2 + (slice * BM") < src.index("snn_ksum_push4(recv_s") < src.index("snn_ksum_wait(bar_s)")
    assert "KS * SLICES" not in src and "red2" not in pair.render(*L3, 1, one)[1]
    with pytest.raises(ValueError, match="do not fit over the stages"):
        pair.render(*L3, 1, pair.PairConfig(32, 64, 128, 4, 2))


def test_render_a_portable_cluster_compiled_in_and_a_larger_one_given_at_launch():
    big = pair.emitted(*L3, 1, pair.PairConfig(32, 64, 128, 1, 2))   # 1024 / 64: 16 blocks a cluster
    small = pair.emitted(*L3, 1, pair.PairConfig(16, 128, 128, 2))   # 8
    for k in (big, small):
        step = k.steps[0]
        assert step["args"] == CONV_ARGS + IN_ARGS + ZERO_ARGS + pair.SECOND_ARGS and step["pdl"] and k.epilogue
        assert f"#define C1 256\n#define N1 1024\n#define N2 256\n#define M 196\n" in k.source
    assert big.steps[0]["cluster"] == 16 and big.steps[0]["grid"] == [7, 1, 16] and "__cluster_dims__" not in big.source
    assert "cluster" not in small.steps[0] and small.steps[0]["grid"] == [13, 1, 8]
    assert "__cluster_dims__(1, 1, 8)" in small.source
    assert big.name == "dpair_r1s1_str1_pad0_c256n1024_h14w14_n256_m32n64t128s1p2_b1"
    assert big.steps[0]["block"] == [128, 1, 1] and small.steps[0]["block"] == [256, 1, 1]


def test_the_first_convs_k_split_over_the_warps_and_the_seconds_32_threads_along_n():
    cfg = pair.PairConfig(32, 64, 128, 1, 2, True, 32)
    k = pair.emitted(*L3, 1, cfg)
    assert cfg.tag() == "m32n64t128s1p2wx32" and k.name.endswith("_m32n64t128s1p2wx32_b1")
    # four warps, each the whole 32 x 64 x tile over 8 of a chunk's 32 channels; the second conv 8 pixels x 8
    # channels a thread
    assert "#define KG1 4 " in k.source and "#define TX1 8 " in k.source and "#define TX 32 " in k.source
    assert (cfg.kg1, cfg.tx1) == (4, 8) and (pair.PairConfig(32, 64).kg1, pair.PairConfig(32, 64).tx1) == (2, 16)
    # the four partial x tiles (4 x 32 x 68 floats) outgrow two stages (2 x (32 x 36 + 32 x 64)): the shift goes past them
    assert pair.stage_floats(cfg) == 4 * 32 * 68 and "#define OFF_SH 8704 " in k.source
    assert pair.smem_bytes(*L3, cfg) == pair.smem_bytes(*L3, pair.PairConfig(32, 64, 128, 1, 2)) + 4 * (8704 - 6400)
    plain = pair.emitted(*L3, 1, pair.PairConfig(32, 64, 128, 1, 3))
    # three stages (3 x 3200 floats) hold the one group's partial tile: the shift follows them
    assert "#define OFF_SH 9600 " in plain.source and "#define KG1 1 " in plain.source
    with pytest.raises(ValueError, match="groups cannot split"):    # 32 x 128 over a warp: 128 accumulators
        pair.render(*L3, 1, pair.PairConfig(32, 128, 128, 2, 2, True))
    with pytest.raises(ValueError, match="64 y channels over 32 threads"):
        pair.render(*L1, 1, pair.PairConfig(32, 64, 128, 1, 2, True, 32))


def test_the_first_convs_k_groups_of_several_warps():
    cfg = pair.PairConfig(32, 64, 128, 2, 2, True, 32, 4)
    k = pair.emitted(*L3, 1, cfg)
    assert cfg.tag() == "m32n64t128s2p2wx32k4" and k.steps[0]["block"] == [256, 1, 1]
    # 4 groups of 64 threads (two warps), each the whole 32 x 64 x tile: 4 pixels x 8 channels a thread, not 8 x 8
    assert cfg.kg1 == 4 and pair.PairConfig(32, 64, 128, 2, 2, True, 32).kg1 == 8
    assert "#define KG1 4 " in k.source and "#define TX1 8 " in k.source and "#define THREADS 256" in k.source
    assert pair.stage_floats(cfg) == 4 * 32 * 68          # four partial x tiles, as with one slice
    with pytest.raises(ValueError, match="groups of 16 threads"):   # 16 groups of 256 threads: 16 threads a group
        pair.render(*L3, 1, pair.PairConfig(32, 64, 128, 2, 2, True, 32, 16))
    with pytest.raises(ValueError, match="groups cannot split"):    # 4 groups of a warp: 32 x 128 / 32 accumulators
        pair.render(*L3, 1, pair.PairConfig(32, 128, 128, 1, 2, True, 16, 4))
    pair.check(*L3, pair.PairConfig(32, 128, 128, 1, 2, True, 16, 2))   # 2 groups of two warps: 64 accumulators


def test_64_channel_chunks():
    cfg = pair.PairConfig(32, 64, 256, 1, 2, True, 32, 4, 64)
    k = pair.emitted(*L3, 1, cfg)
    assert cfg.tag() == "m32n64t256s1p2wx32k4c64" and cfg.tag() in {c.tag() for c in pair.candidates(*L3, 1)}
    assert "#define BK 64\n" in k.source and "#define KG1 4 " in k.source     # 4 chunks of 256, 16 channels a group
    assert pair.stage_floats(cfg) == 2 * 32 * 68 + 2 * 64 * 64                 # two stages of 64-channel chunks
    with pytest.raises(ValueError, match="chunks of 32 or 64 channels that divide C = 96"):
        pair.render(one_by_one(96, 256, 14), one_by_one(256, 128, 14), 1, pair.PairConfig(32, 64, bk=64))
    with pytest.raises(ValueError, match="chunks of 32 or 64"):
        pair.render(*L3, 1, pair.PairConfig(32, 64, bk=128))


def test_the_second_convs_weights_are_requested_inside_the_first_convs_loop():
    src = pair.emitted(*L3, 1, pair.PairConfig(32, 64, 128, 1, 2)).source
    loop, copy = src.index("for (int it = 0; it < NK1; ++it)"), src.index("cp.async.bulk.shared::cluster.global")
    assert src.count("cp.async.bulk.shared::cluster.global") == 1 and loop < copy < src.index("// x: the groups'")
    assert "it == NK1 / 2 && tid == 0" in src[loop:copy + 1]


def test_resnet_pairs_are_each_blocks_last_conv_and_the_next_blocks_first():
    net = load_spec(ROOT / "network_specs" / "resnet50.yaml")
    assert len(net.conv_pairs) == 47   # 16 blocks: conv1 -> conv2 -> conv3 in each, then the next block's conv1
    pairs = [(a.name, b.name) for a, b in net.conv_pairs if pair.eligible(a.shape, b.shape)]
    assert len(pairs) == 15
    for a, b in pairs:
        la, ia = re.match(r"layer(\d)\.(\d+)\.conv3", a).groups()
        lb, ib = re.match(r"layer(\d)\.(\d+)\.conv1", b).groups()
        assert (lb, ib) in ((la, str(int(ia) + 1)), (str(int(la) + 1), "0"))
    dn = load_spec(ROOT / "network_specs" / "densenet121.yaml")   # conv1 -> conv2 (3x3) only: no pair kernel
    assert dn.conv_pairs and not any(pair.eligible(a.shape, b.shape) for a, b in dn.conv_pairs)


@needs_nvcc
def test_build_offers_pair_kernels_in_the_first_layers_entry(tmp_path, monkeypatch):
    spec, r = build_small_spec(tmp_path, monkeypatch, BLOCKS, [1, 2])
    net = load_spec(spec)
    assert [(a.name, b.name) for a, b in net.conv_pairs if pair.eligible(a.shape, b.shape)] == [("a.conv3", "b.conv1")]
    m = r.manifest
    layers = {lay["name"]: lay for lay in m["layers"]}
    offered = layers["a.conv3"]["batches"]["1"]["pair"]
    first, second = net.convs[3].shape, net.convs[4].shape
    assert offered == {"with": "b.conv1", "kernels": [c.name(first, second, 1) for c in pair.candidates(first, second, 1)]}
    assert "pair" not in layers["a.conv3"]["batches"]["2"] and "pair" not in layers["b.conv1"]["batches"]["1"]
    for name in offered["kernels"]:
        k = m["kernels"][name]
        assert k["config"]["family"] == "pair" and k["second"]["N"] == 64 and k["epilogue"] and k["cubin"]
    from snn.runtime import manifest
    from test_runtime_cpu import H100_CC
    cache = manifest.load(r.manifest_path, net, str(spec), 1, H100_CC)   # the loader accepts what the build wrote
    assert cache.layer_entry("a.conv3", 1)["pair"] == offered


# two bottleneck blocks at 8x8: a.conv3 -> b.conv1 is a pair (1x1 64 -> 256 -> 64)
BLOCKS = """
name: blocks
input: {name: image, shape: [3, 8, 8]}
nodes:
  - {name: stem, op: conv, input: image, in_channels: 3, out_channels: 256, kernel: 3, padding: 1, param: stem}
  - {name: stem.bn, op: batchnorm, input: stem, channels: 256, param: stem.bn}
  - {name: stem.relu, op: relu, input: stem.bn}
""" + "".join(f"""  - {{name: {b}.conv1, op: conv, input: {src}, in_channels: 256, out_channels: 64, kernel: 1, param: {b}.conv1}}
  - {{name: {b}.bn1, op: batchnorm, input: {b}.conv1, channels: 64, param: {b}.bn1}}
  - {{name: {b}.relu1, op: relu, input: {b}.bn1}}
  - {{name: {b}.conv2, op: conv, input: {b}.relu1, in_channels: 64, out_channels: 64, kernel: 3, padding: 1, param: {b}.conv2}}
  - {{name: {b}.bn2, op: batchnorm, input: {b}.conv2, channels: 64, param: {b}.bn2}}
  - {{name: {b}.relu2, op: relu, input: {b}.bn2}}
  - {{name: {b}.conv3, op: conv, input: {b}.relu2, in_channels: 64, out_channels: 256, kernel: 1, param: {b}.conv3}}
  - {{name: {b}.bn3, op: batchnorm, input: {b}.conv3, channels: 256, param: {b}.bn3}}
  - {{name: {b}.add, op: add, inputs: [{b}.bn3, {src}]}}
  - {{name: {b}.relu3, op: relu, input: {b}.add}}
""" for b, src in (("a", "stem.relu"), ("b", "a.relu3"))) + """  - {name: gap, op: global_avgpool, input: b.relu3}
  - {name: flat, op: flatten, input: gap}
  - {name: fc, op: linear, input: flat, in_features: 256, out_features: 5, param: fc}
"""


def _static_cache(net, batch, pair_kernels=True, split_3x3=False):
    """Every layer static on one fused kernel (one launch, its epilogue in it: "epilogue", no accumulator), taking its
    producer's epilogue; split_3x3: the 3x3 convs add into the accumulator instead (their epilogue handed to conv3);
    with pair_kernels, a.conv3's entry offers a pair kernel with b.conv1."""
    from snn.runtime import manifest
    kernels, layers = {}, {}
    for c in net.convs:
        name = f"k_{c.name}"
        split = split_3x3 and c.shape.R == 3
        kernels[name] = {"cubin": "/fake.cubin", "weight_layout": "CRSN", "workspace": {}, "epilogue": not split,
                         "steps": [{"op": "launch", "function": "f", "grid": [1, 1, 1], "block": [32, 1, 1], "smem": 0,
                                    "args": ["input", "weight", "accumulator" if split else "output", "bias",
                                             "residual", "zeros", "relu", "in_shift", "in_zeros", "zero",
                                             "zero_total"]}]}
        entry = {"threshold": 0.4, "levels": {"0.40": {"kernel": name}}, "static_kernel": name}
        layers[c.name] = {"name": c.name, "batches": {str(batch): entry}}
    if pair_kernels:
        kernels["p_ab"] = {"cubin": "/fake.cubin", "weight_layout": "CRSN", "workspace": {}, "epilogue": True,
                           "steps": [{"op": "launch", "function": "p", "grid": [1, 1, 1], "block": [32, 1, 1],
                                      "smem": 0, "args": CONV_ARGS + IN_ARGS + ZERO_ARGS + pair.SECOND_ARGS}]}
        layers["a.conv3"]["batches"][str(batch)]["pair"] = {"with": "b.conv1", "kernels": ["p_ab"]}
    data = {"batches": [batch], "kernels": kernels, "layers": list(layers.values()), "epilogue": {}}
    return manifest.Cache(Path("fake/manifest.json"), data, "blocks.yaml", "fake", layers)


class _Timings:
    """runtime/pairs.Timings' choice without a GPU: the first pair kernel, or none."""

    def __init__(self, take=True):
        self.take, self.asked = take, []

    def choose(self, first, second, kernels, ka, kb, batch, handed):
        self.asked.append((first, second, ka, kb, handed))
        return kernels[0] if self.take else None


@pytest.mark.parametrize("split_3x3", [False, True])
def test_a_captured_pass_runs_the_pair_in_one_launch(split_3x3, monkeypatch):
    """a.conv3 and b.conv1 as one launch of the pair kernel where it measured faster (and with the 3x3 before it
    handing its epilogue to the pair: split_3x3); logits as the reference's, every conv's input sparsity as the
    eager pass counts it; not where it measured slower, nor with SNN_PAIRS=0."""
    torch = pytest.importorskip("torch")
    from snn.runtime import executor, weights
    from test_graph_torch import CpuCapture, Runner
    from test_runtime_torch import rel_err
    net = parse_spec(BLOCKS, "blocks.yaml")
    sd = weights.random_init(net, seed=7)
    x = torch.randn(1, 3, 8, 8)
    ref = executor.reference(net, sd, x.double())
    eager = executor.Executor(net, sd, executor.TorchBackend(), _static_cache(net, 1, split_3x3=split_3x3),
                              device="cpu", force="auto")
    eager.forward(x)
    counted = {t.name: t.sparsity for t in eager.last_trace if t.sparsity is not None}

    def capture(take=True):
        be = executor.TorchBackend()
        ex = executor.Executor(net, sd, be, _static_cache(net, 1, split_3x3=split_3x3), device="cpu", force="auto")
        runner = Runner(ex)
        runner.pair_timings = _Timings(take)
        cap = CpuCapture(runner, 1)
        cap.bodies = []
        y = ex.forward(x, capture=cap)
        cap.finish()
        return ex, cap, be, runner, y

    ex, cap, be, runner, y = capture()
    assert runner.pair_timings.asked == [("a.conv3", "b.conv1", "k_a.conv3", "k_b.conv1", split_3x3)]
    assert cap.pairs == {"a.conv3": ("b.conv1", "p_ab")}
    assert be.sparse_calls.count("p_ab") == 1 and "k_a.conv3" not in be.sparse_calls and "k_b.conv1" not in be.sparse_calls
    assert rel_err(y, ref) < 1e-5
    trace = {t.name: t for t in cap.trace(ex.last_trace)}
    assert trace["a.conv3"].kernel == trace["b.conv1"].kernel == "p_ab"
    assert {n: t.sparsity for n, t in trace.items() if t.sparsity is not None} == pytest.approx(counted)
    if split_3x3:
        assert cap.handoffs["a.conv2"] == "a.conv3" and not bool(cap.sums.buf.any())
    ex, cap, be, _, y = capture(take=False)
    assert cap.pairs == {} and "p_ab" not in be.sparse_calls and rel_err(y, ref) < 1e-5
    monkeypatch.setenv("SNN_PAIRS", "0")
    ex, cap, be, runner, y = capture()
    assert runner.pair_timings.asked == [] and "p_ab" not in be.sparse_calls and rel_err(y, ref) < 1e-5
