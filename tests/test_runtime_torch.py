"""The torch side of the runtime on the CPU: executor vs a node-by-node reference, dispatch through a
fake cache with the pure-torch emulation of the sparse steps, weights mapping, the CUDA backend's
launches. The lowering itself: test_lower.py. Skips without torch."""
import ctypes
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from snn.codegen.spec import load_spec, parse_spec  # noqa: E402
from snn.runtime import executor, manifest, weights  # noqa: E402
from snn.runtime.errors import RunError  # noqa: E402
from snn.runtime.kernels import CudaBackend, stores_slice  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# Every pattern the executor compiles, small: conv-bn-relu, maxpool into two convs, a residual block
# with a downsample, conv with its own bias, pre-activation bn-relu on a concat, transition avgpool,
# norm5-style bn-relu into global pooling, and a classifier with a relu between linears.
TINY = """
name: tiny
input: {name: image, shape: [3, 20, 20]}
nodes:
  - {name: conv1, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, stride: 1, padding: 1, param: conv1}
  - {name: bn1, op: batchnorm, input: conv1, channels: 8, param: bn1}
  - {name: relu1, op: relu, input: bn1}
  - {name: pool1, op: maxpool, input: relu1, kernel: 3, stride: 2, padding: 1}
  - {name: b.conv1, op: conv, input: pool1, in_channels: 8, out_channels: 8, kernel: 3, padding: 1, param: b.conv1}
  - {name: b.bn1, op: batchnorm, input: b.conv1, channels: 8, param: b.bn1}
  - {name: b.relu1, op: relu, input: b.bn1}
  - {name: b.conv2, op: conv, input: b.relu1, in_channels: 8, out_channels: 16, kernel: 1, param: b.conv2}
  - {name: b.bn2, op: batchnorm, input: b.conv2, channels: 16, param: b.bn2}
  - {name: b.down, op: conv, input: pool1, in_channels: 8, out_channels: 16, kernel: 1, param: b.down}
  - {name: b.downbn, op: batchnorm, input: b.down, channels: 16, param: b.downbn}
  - {name: b.add, op: add, inputs: [b.bn2, b.downbn]}
  - {name: b.relu2, op: relu, input: b.add}
  - {name: c.conv, op: conv, input: b.relu2, in_channels: 16, out_channels: 8, kernel: 3, padding: 1, bias: true, param: c.conv}
  - {name: c.relu, op: relu, input: c.conv}
  - {name: cat, op: concat, inputs: [b.relu2, c.relu]}
  - {name: d.norm, op: batchnorm, input: cat, channels: 24, param: d.norm}
  - {name: d.relu, op: relu, input: d.norm}
  - {name: d.conv, op: conv, input: d.relu, in_channels: 24, out_channels: 12, kernel: 3, stride: 2, padding: 1, param: d.conv}
  - {name: d.pool, op: avgpool, input: d.conv, kernel: 2, stride: 2}
  - {name: e.conv, op: conv, input: cat, in_channels: 24, out_channels: 12, kernel: 1, param: e.conv}
  - {name: e.pool, op: maxpool, input: e.conv, kernel: 4, stride: 4}
  - {name: join, op: concat, inputs: [d.pool, e.pool]}
  - {name: norm5, op: batchnorm, input: join, channels: 24, param: norm5}
  - {name: relu5, op: relu, input: norm5}
  - {name: gap, op: global_avgpool, input: relu5}
  - {name: flat, op: flatten, input: gap}
  - {name: fc1, op: linear, input: flat, in_features: 24, out_features: 10, param: fc1}
  - {name: fc1.relu, op: relu, input: fc1}
  - {name: fc2, op: linear, input: fc1.relu, in_features: 10, out_features: 5, param: fc2}
"""


@pytest.fixture(scope="module")
def tiny():
    return parse_spec(TINY, "tiny.yaml")


def fake_cache(net, threshold=0.5, layout="CRSN", levels=(0.4, 0.6, 0.8), batch=2, split=False, out_ld=False):
    """A manifest.Cache over every conv, with steps the TorchBackend emulation understands. split: kernels that add
    into the accumulator (their epilogue left to a launch after them); out_ld: kernels that take the output's pixel
    pitch (emit.OUT_ARGS)."""
    kernels, layers = {}, {}
    for c in net.convs:
        entry = {"threshold": threshold, "levels": {}}
        for l in levels:
            name = f"sconv_{c.name}_l{int(l * 100)}"
            args = ["input", "ws_vals", "weight", "accumulator" if split else "output"] + (["out_ld"] if out_ld else [])
            kernels[name] = {"cubin": "/fake.cubin", "weight_layout": layout, "workspace": {"ws_vals": 64},
                             "steps": ([] if split else [{"op": "memset", "buffer": "output"}])
                             + [{"op": "launch", "function": "f", "grid": [1, 1, 1], "block": [32, 1, 1],
                                 "smem": 0, "args": args}]}
            entry["levels"][f"{l:.2f}"] = {"kernel": name}
        layers[c.name] = {"name": c.name, "batches": {str(batch): entry}}
    data = {"batches": [batch], "kernels": kernels, "layers": list(layers.values()), "epilogue": {}}
    return manifest.Cache(Path("fake/manifest.json"), data, "tiny.yaml", "fake", layers)


def rel_err(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


@pytest.mark.parametrize("size", [1, (1, 1), (2, 3)])
def test_a_pool_to_one_pixel_is_a_matmul_with_one_over_the_pixels(tiny, size):
    """Global average pooling (FP32) as a matmul of the channels-last map's pixels with a row of 1 / pixels, made
    once per map size; its values are adaptive pooling's. Other output sizes and 16 bits stay adaptive pooling."""
    ex = executor.Executor(tiny, weights.random_init(tiny, seed=1), executor.TorchBackend(), None, device="cpu")
    F = torch.nn.functional
    x = torch.randn(2, 16, 7, 5).contiguous(memory_format=torch.channels_last)
    for xs in (x, x.contiguous()):
        y = ex._adaptive_avgpool(xs, size)
        want = F.adaptive_avg_pool2d(x.double(), size)
        assert y.shape == want.shape and torch.allclose(y.double(), want, rtol=1e-6, atol=1e-7)
    assert list(ex._pool_weights) == ([35] if size != (2, 3) else [])
    h = x.to(torch.bfloat16)
    assert torch.equal(ex._adaptive_avgpool(h, size), F.adaptive_avg_pool2d(h, size))


def test_executor_dense_matches_reference(tiny):
    sd = weights.random_init(tiny, seed=1)
    ex = executor.Executor(tiny, sd, executor.TorchBackend(), None, device="cpu")
    x = torch.randn(2, 3, 20, 20)
    y = ex.forward(x)
    ref = executor.reference(tiny, sd, x.double())
    assert y.shape == (2, 5)
    assert rel_err(y, ref) < 1e-5
    assert ex.ops is ex.program.ops and ex.eligible is ex.program.eligible  # the lowering (test_lower.py)


def test_a_trace_handed_over_as_a_function_is_made_on_first_read_only(tiny):
    """A graph replay hands its trace over unread (runtime/graph.py): made once, when read; a forward pass
    made afterwards replaces it."""
    ex = executor.Executor(tiny, weights.random_init(tiny, seed=2), executor.TorchBackend(), None, device="cpu",
                           trace=True)
    calls = []
    made = [executor.LayerTrace(0, "conv1", 0.5, "sparse", "k", None)]
    ex.last_trace = lambda: calls.append(1) or made
    assert not calls
    assert ex.last_trace == made and ex.last_trace == made and calls == [1]
    ex.forward(torch.randn(1, 3, 20, 20))
    assert len(ex.last_trace) == len(tiny.convs) and calls == [1]


def test_executor_measures_the_sparsity_of_each_conv_input(tiny):
    sd = weights.random_init(tiny, seed=2)
    ex = executor.Executor(tiny, sd, executor.TorchBackend(), None, device="cpu", trace=True)
    x = torch.randn(2, 3, 20, 20)
    ex.forward(x)
    env = executor.reference(tiny, sd, x.double(), keep_all=True)
    by_name = {t.name: t for t in ex.last_trace}
    assert len(ex.last_trace) == len(tiny.convs)
    for c in tiny.convs:
        t = by_name[c.name]
        if c.name == "conv1":
            assert t.sparsity is None
            continue
        inp = env[c.input]
        if c.name == "e.conv":  # reads the concat directly
            inp = env["cat"]
        want = (inp == 0).sum().item() / inp.numel()
        assert t.sparsity == pytest.approx(want, abs=2e-3), c.name
        assert t.path == "dense" and t.ms is not None
    assert 0.2 < by_name["b.conv2"].sparsity < 0.8


@pytest.mark.parametrize("layout", ["CRSN", "NRSC", "RSCN"])
def test_forced_sparse_runs_every_eligible_layer_and_matches(tiny, layout):
    sd = weights.random_init(tiny, seed=3)
    be = executor.TorchBackend(compute_dtype=torch.float64)
    cache = fake_cache(tiny, layout=layout)
    ex = executor.Executor(tiny, sd, be, cache, device="cpu", force="sparse", trace=True)
    x = torch.randn(2, 3, 20, 20)
    y = ex.forward(x)
    ref = executor.reference(tiny, sd, x.double())
    assert rel_err(y, ref) < 1e-5
    sparse = [t for t in ex.last_trace if t.path == "sparse"]
    assert {t.name for t in sparse} == ex.eligible
    assert len(be.sparse_calls) == len(ex.eligible)


def test_auto_dispatch_follows_threshold(tiny):
    sd = weights.random_init(tiny, seed=4)
    x = torch.randn(2, 3, 20, 20)
    for threshold, want_sparse in ((0.0, True), (1.01, False)):
        ex = executor.Executor(tiny, sd, executor.TorchBackend(), fake_cache(tiny, threshold=threshold),
                               device="cpu", force="auto")
        ex.forward(x)
        for t in ex.last_trace:
            if t.name not in ex.eligible:
                continue
            if want_sparse and t.sparsity >= 0.4:
                lv = max(l for l in (0.4, 0.6, 0.8) if l <= t.sparsity)
                assert t.kernel == f"sconv_{t.name}_l{int(lv * 100)}"
            else:
                assert t.path == "dense" and t.kernel is None


def test_dense_mode_does_not_count(tiny):
    sd = weights.random_init(tiny, seed=5)
    ex = executor.Executor(tiny, sd, executor.TorchBackend(), fake_cache(tiny), device="cpu", force="dense")
    ex.forward(torch.randn(2, 3, 20, 20))
    assert all(t.sparsity is None and t.path == "dense" for t in ex.last_trace)


@pytest.mark.parametrize("spec", ["resnet50", "vgg16"])
def test_real_specs_dense_and_sparse_match_reference(spec):
    net = load_spec(ROOT / "network_specs" / f"{spec}.yaml")
    sd = weights.random_init(net, seed=0)
    x = torch.randn(1, 3, 224, 224)
    ref = executor.reference(net, sd, x.double())
    assert torch.isfinite(ref).all() and 1e-3 < ref.std().item() < 1e3   # random init keeps activations sane
    ex = executor.Executor(net, sd, executor.TorchBackend(torch.float64), fake_cache(net, batch=1),
                           device="cpu", force="sparse")
    y = ex.forward(x)
    assert rel_err(y, ref) < 1e-5
    assert sum(t.path == "sparse" for t in ex.last_trace) == len(net.convs) - 1


# --- weights --------------------------------------------------------------------------------------

def test_state_dict_mapping_and_errors(tiny, tmp_path):
    sd = weights.random_init(tiny, seed=0)
    assert set(sd) == set(weights.expected(tiny))
    got = weights.from_state_dict(tiny, {"module." + k: v for k, v in sd.items()}, "x.pth")
    assert set(got) == set(sd)
    bad = dict(sd)
    del bad["b.conv1.weight"]
    bad["fc2.weight"] = torch.zeros(3, 10)
    with pytest.raises(RunError) as e:
        weights.from_state_dict(tiny, bad, "x.pth")
    msg = str(e.value)
    assert "missing 'b.conv1.weight' (8x8x3x3)" in msg
    assert "'fc2.weight' is 3x10, the spec needs 5x10" in msg
    assert "\n" not in msg
    path = tmp_path / "w.pth"
    torch.save({"state_dict": sd}, path)
    assert set(weights.load_file(tiny, path)) == set(sd)
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(RunError, match="junk.pth: cannot load"):
        weights.load_file(tiny, tmp_path / "junk.pth")
    with pytest.raises(RunError, match="no such weights file"):
        weights.load_file(tiny, tmp_path / "none.pth")


def test_random_init_is_seeded(tiny):
    a, b, c = (weights.random_init(tiny, s) for s in (7, 7, 8))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["conv1.weight"], c["conv1.weight"])
    w = weights.random_init(load_spec(ROOT / "network_specs" / "resnet50.yaml"), 0)["layer3.0.conv2.weight"]
    assert w.std().item() == pytest.approx(math.sqrt(2 / (256 * 9)), rel=0.05)


# --- the CUDA backend's step runner, with a recording launcher instead of a GPU --------------------

class RecordingDevice:
    def __init__(self):
        self.calls, self.pdl = [], []

    def launch(self, cubin, name, grid, block, smem, args, pdl=False, cluster=0):
        self.calls.append((cubin, name, list(grid), list(block), smem, args))
        self.pdl.append(pdl)


def test_cuda_backend_runs_steps_in_order_with_pointer_args(tiny):
    dev = RecordingDevice()
    cache = fake_cache(tiny)
    cache.data["epilogue"] = {"cubin": "/e.cubin", "function": "snn_epilogue"}
    be = CudaBackend(dev, cache)
    kname = next(iter(cache.data["kernels"]))
    k = cache.data["kernels"][kname]
    inp, w, out = torch.ones(2, 8, 4, 4), torch.ones(8, 3, 3, 8), torch.full((2, 8, 4, 4), 7.0)
    ws = {"ws_vals": torch.empty(64, dtype=torch.uint8)}
    be.sparse_conv(kname, k, inp, w, out, ws, None)
    assert torch.all(out == 0)   # memset ran
    (cubin, fn, grid, block, smem, args), = dev.calls
    assert (cubin, fn, grid, block, smem) == ("/fake.cubin", "f", [1, 1, 1], [32, 1, 1], 0)
    assert [v for v, _ in args] == [inp.data_ptr(), ws["ws_vals"].data_ptr(), w.data_ptr(), out.data_ptr()]
    assert all(t is ctypes.c_void_p for _, t in args)
    bad = dict(k, steps=[{"op": "launch", "function": "f", "grid": [1], "block": [1], "args": ["nope"]}])
    with pytest.raises(RunError, match="argument 'nope' is no known buffer"):
        be.sparse_conv(kname, bad, inp, w, out, ws, None)


def test_cuda_backend_split_adds_into_the_accumulator_and_the_epilogue_clears_it(tiny):
    """A launch naming `accumulator` gets the backend's one zeroed buffer (no memset step); one epilogue launch
    then reads it into the output with the conv's epilogue and clear = 1 (a split with an empty epilogue adds
    into its output, zeroed first). The buffer only grows, and an outgrown one stays alive (a captured graph may
    still add into it)."""
    from snn.codegen import emit
    from snn.runtime.kernels import ACCUMULATOR
    assert ACCUMULATOR == emit.ACCUMULATOR
    dev = RecordingDevice()
    cache = fake_cache(tiny)
    cache.data["epilogue"] = {"cubin": "/e.cubin", "function": "snn_epilogue"}
    be = CudaBackend(dev, cache)
    k = {"cubin": "/k.cubin", "epilogue": False, "steps": [{"op": "launch", "function": "f", "grid": [1, 1, 1],
         "block": [32, 1, 1], "args": ["input", "weight", "accumulator", "bias", "residual", "zeros", "relu"]}]}
    inp, w = torch.ones(2, 8, 4, 4), torch.ones(8, 3, 3, 8)
    out = torch.full((2, 4, 4, 8), 7.0).permute(0, 3, 1, 2)   # NHWC memory, NCHW-shaped
    counters, b = torch.zeros(3, dtype=torch.int64), torch.ones(8)
    be.sparse_conv("k", k, inp, w, out, {}, None, executor.Epilogue(bias=b, relu=True, counters=counters, slot=1))
    (_, fn, _, _, _, kargs), (_, efn, egrid, _, _, eargs) = dev.calls
    acc = be.prepare_accumulator(0)
    assert acc.numel() >= out.numel() and torch.all(acc == 0)
    # the split does not fuse the epilogue: null / 0 for its arguments
    assert fn == "f" and [v for v, _ in kargs] == [inp.data_ptr(), w.data_ptr(), acc.data_ptr(), 0, 0, 0, 0]
    assert torch.all(out == 7.0)   # no memset of the output: the epilogue writes all of it
    assert efn == "snn_epilogue" and egrid == [math.ceil(out.numel() / 256), 1, 1]
    assert [v for v, _ in eargs] == [acc.data_ptr(), be._const(1.0, 8).data_ptr(), b.data_ptr(), 0,
                                     out.data_ptr(), counters.data_ptr() + 8, out.numel(), 8, 1, 1]
    for e in (None, executor.Epilogue()):   # nothing to apply: it adds into out, zeroed first; no epilogue launch
        n = len(dev.calls)
        be.sparse_conv("k", k, inp, w, out, {}, None, e)
        assert torch.all(out == 0) and len(dev.calls) == n + 1 and dev.calls[-1][5][2][0] == out.data_ptr()
    assert be.prepare_accumulator(out.numel() * 3, "cpu").numel() == out.numel() * 3
    assert be._retired == [acc] and be.prepare_accumulator(5) is not acc


def test_cuda_backend_writes_a_concat_slice_at_its_pitch(tiny):
    """A kernel taking out_ld (emit.OUT_ARGS) gets the output's pixel pitch as an int: the buffer's width for a
    channel slice of it, N for a dense output. A split with nothing to apply adds into the slice with no fill when
    it is said zeroed. A slice is refused, in one line, to a kernel without out_ld, and where an epilogue launch
    (which writes densely) or a residual (indexed at the output's offsets) would follow."""
    dev = RecordingDevice()
    cache = fake_cache(tiny)
    cache.data["epilogue"] = {"cubin": "/e.cubin", "function": "snn_epilogue"}
    be = CudaBackend(dev, cache)
    args = ["input", "weight", "accumulator", "bias", "residual", "zeros", "relu", "out_ld"]
    split = {"cubin": "/k.cubin", "epilogue": False, "steps": [{"op": "launch", "function": "f", "grid": [1, 1, 1],
             "block": [32, 1, 1], "args": args}]}
    fused = {"cubin": "/k.cubin", "epilogue": True, "steps": [dict(split["steps"][0], args=[
        "output" if a == "accumulator" else a for a in args])]}
    inp, w = torch.ones(2, 8, 4, 4), torch.ones(8, 3, 3, 8)
    buf = torch.full((2, 20, 4, 4), 7.0).contiguous(memory_format=torch.channels_last)
    sl = buf[:, 8:16]
    be.sparse_conv("k", split, inp, w, sl, {}, None, None, zeroed=True)
    kargs = dev.calls[-1][5]
    assert kargs[2][0] == sl.data_ptr() and kargs[-1] == (20, ctypes.c_int)
    assert torch.all(buf == 7.0)   # zeroed: no fill, of the slice or anything else
    be.sparse_conv("k", split, inp, w, sl, {}, None, executor.Epilogue())
    assert torch.all(sl == 0) and torch.all(buf[:, :8] == 7.0) and torch.all(buf[:, 16:] == 7.0)
    counters = torch.zeros(2, dtype=torch.int64)
    be.sparse_conv("k", fused, inp, w, sl, {}, None, executor.Epilogue(bias=torch.ones(8), relu=True,
                                                                         counters=counters, slot=0))
    assert dev.calls[-1][5][-1] == (20, ctypes.c_int) and dev.calls[-1][1] == "f"   # fused: one launch
    dense = torch.zeros(2, 8, 4, 4).contiguous(memory_format=torch.channels_last)
    be.sparse_conv("k", fused, inp, w, dense, {}, None, None)
    assert dev.calls[-1][5][-1] == (8, ctypes.c_int)
    # a dense output viewed NHWC-shaped (as tests/gpu/test_manifest_kernels passes it): N from the manifest entry
    be.sparse_conv("k", dict(fused, shape={"N": 8}), inp, w, torch.zeros(2, 5, 5, 8), {}, None, None)
    assert dev.calls[-1][5][-1] == (8, ctypes.c_int)
    # float4 stores (the dense kernel's): a slice whose pitch or first channel is not a multiple of 4 is refused in
    # one line, and the executor then gives the kernel a new tensor (kernels.stores_slice with the slice)
    vec = dict(fused, config={"family": "dense"})
    wide18 = torch.zeros(2, 18, 4, 4).contiguous(memory_format=torch.channels_last)
    for bad, ld in ((buf[:, 6:14], 20), (wide18[:, 8:16], 18)):
        with pytest.raises(RunError, match=f"its 4-channel stores would be misaligned at pitch {ld}"):
            be.sparse_conv("k", vec, inp, w, bad, {}, None, None)
        assert not stores_slice(vec, None, bad) and stores_slice(fused, None, bad)   # fused: scalar stores
    be.sparse_conv("k", vec, inp, w, sl, {}, None, None)
    assert stores_slice(vec, None, sl) and dev.calls[-1][5][-1] == (20, ctypes.c_int)
    n = len(dev.calls)
    no_ld = {"cubin": "/k.cubin", "epilogue": True, "steps": [dict(fused["steps"][0], args=fused["steps"][0]["args"][:-1])]}
    for k, epi, why in ((no_ld, None, "no out_ld argument"),
                        (split, executor.Epilogue(bias=torch.ones(8), relu=True), "an epilogue launch writes it densely"),
                        (fused, executor.Epilogue(residual=torch.ones(2, 8, 4, 4)),
                         "its residual is read at the output's offsets")):
        with pytest.raises(RunError, match=f"kernel 'k' cannot write the channel slice of a wider tensor \\({why}\\)"):
            be.sparse_conv("k", k, inp, w, sl, {}, None, epi)
        with pytest.raises(RunError, match="cannot write the channel slice"):
            executor.TorchBackend().sparse_conv("k", k, inp, w, sl, {}, None, epi)
    assert len(dev.calls) == n


def test_cuda_backend_stages_a_pre_activation_read_at_its_pitch(tiny):
    """A kernel taking in_bn's arguments (emit.IN_BN_ARGS) gets the batchnorm's scale and its input's pixel pitch: the
    buffer's width for its first channels, C for a dense input (null scale without a pre-activation). A wider input
    is refused, in one line, to a kernel without in_ld, or at a pitch that is no whole number of 16-byte vectors;
    a scale to a kernel without in_scale."""
    dev = RecordingDevice()
    cache = fake_cache(tiny)
    cache.data["epilogue"] = {"cubin": "/e.cubin", "function": "snn_epilogue"}
    be = CudaBackend(dev, cache)
    args = ["input", "weight", "output", "bias", "residual", "zeros", "relu", "in_shift", "in_zeros", "in_scale", "in_ld"]
    k = {"cubin": "/k.cubin", "epilogue": True, "steps": [{"op": "launch", "function": "f", "grid": [1, 1, 1],
         "block": [32, 1, 1], "args": args}]}
    buf = torch.ones(2, 20, 4, 4).contiguous(memory_format=torch.channels_last)
    w, out = torch.ones(8, 1, 1, 8), torch.zeros(2, 8, 4, 4).contiguous(memory_format=torch.channels_last)
    counters = torch.zeros(3, dtype=torch.int64)
    scale, shift = torch.ones(12), torch.zeros(12)
    pre = executor.InputEpilogue(shift, counters, 2, scale=scale)
    be.sparse_conv("k", k, buf[:, :12], w, out, {}, None, None, pre)
    kargs = dev.calls[-1][5]
    assert kargs[0][0] == buf.data_ptr() and kargs[-2:] == [(scale.data_ptr(), ctypes.c_void_p), (20, ctypes.c_int)]
    assert kargs[-3] == (counters.data_ptr() + 16, ctypes.c_void_p) and kargs[-4] == (shift.data_ptr(), ctypes.c_void_p)
    be.sparse_conv("k", k, buf[:, :12].contiguous(memory_format=torch.channels_last), w, out, {}, None, None)
    assert dev.calls[-1][5][-2:] == [(0, ctypes.c_void_p), (12, ctypes.c_int)]
    n = len(dev.calls)
    no_bn = dict(k, steps=[dict(k["steps"][0], args=args[:-2])])
    odd = torch.ones(2, 22, 4, 4).contiguous(memory_format=torch.channels_last)[:, :12]
    for kk, inp, in_epi, msg in ((no_bn, buf[:, :12], None, "reads a dense NHWC input \\(no in_ld argument\\)"),
                                 (k, odd, None, "a multiple of 4 \\(got 22\\)"),
                                 (no_bn, buf[:, :12].contiguous(memory_format=torch.channels_last), pre,
                                  "no in_scale argument")):
        with pytest.raises(RunError, match=f"kernel 'k'.*{msg}"):
            be.sparse_conv("k", kk, inp, w, out, {}, None, None, in_epi)
    assert len(dev.calls) == n


def test_cuda_backend_launches_programmatically_only_what_the_manifest_marks(tiny):
    """A kernel whose manifest step (or epilogue entry) says "pdl" waits for its predecessor itself and may be
    launched as a programmatic dependent; one without the mark (a bundle built before the wait) may not."""
    dev = RecordingDevice()
    cache = fake_cache(tiny)
    cache.data["epilogue"] = {"cubin": "/e.cubin", "function": "snn_epilogue", "pdl": True}
    be = CudaBackend(dev, cache)
    step = {"op": "launch", "function": "f", "grid": [1, 1, 1], "block": [32, 1, 1],
            "args": ["input", "weight", "accumulator", "bias", "residual", "zeros", "relu"]}
    inp, w = torch.ones(2, 8, 4, 4), torch.ones(8, 3, 3, 8)
    out = torch.zeros(2, 4, 4, 8).permute(0, 3, 1, 2)
    epi = executor.Epilogue(bias=torch.ones(8), relu=True)
    be.sparse_conv("k", {"cubin": "/k.cubin", "epilogue": False, "steps": [dict(step, pdl=True)]}, inp, w, out, {},
                   None, epi)
    assert dev.pdl == [True, True]   # the split kernel, then its epilogue
    cache.data["epilogue"] = {"cubin": "/e.cubin", "function": "snn_epilogue"}
    old = CudaBackend(dev, cache)
    old.sparse_conv("k", {"cubin": "/k.cubin", "epilogue": False, "steps": [step]}, inp, w, out, {}, None, epi)
    assert dev.pdl[2:] == [False, False]


def test_cuda_backend_epilogue_signature(tiny):
    dev = RecordingDevice()
    cache = fake_cache(tiny)
    cache.data["epilogue"] = {"cubin": "/e.cubin", "function": "snn_epilogue"}
    be = CudaBackend(dev, cache)
    x = torch.randn(2, 8, 5, 5).contiguous(memory_format=torch.channels_last)
    s, t, r = torch.ones(8), torch.zeros(8), torch.randn(2, 8, 5, 5)
    counters = torch.zeros(4, dtype=torch.int64)
    be.epilogue(x, s, t, r, x, counters, 3, True)
    (cubin, fn, grid, block, smem, args), = dev.calls
    assert (cubin, fn, block, smem) == ("/e.cubin", "snn_epilogue", [256, 1, 1], 0)
    assert grid == [math.ceil(400 / 256), 1, 1]
    vals = [v for v, _ in args]
    assert vals == [x.data_ptr(), s.data_ptr(), t.data_ptr(), r.data_ptr(), x.data_ptr(),
                    counters.data_ptr() + 24, 400, 8, 1, 0]
    assert [ty for _, ty in args][-4:] == [ctypes.c_longlong, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    be.epilogue(x, s, t, None, x, None, None, False)
    vals = [v for v, _ in dev.calls[-1][5]]
    assert vals[3] == 0 and vals[5] == 0 and vals[-1] == 0


def test_calibrated_random_weights_normalise_and_depend_on_the_image(tiny):
    sd, names, warning = weights.load(tiny, None, seed=3)
    assert "labels mean nothing" in warning
    seen = {}

    def check(node, x):  # on the calibration images every BN now sees its own batch statistics
        var, mean = torch.var_mean(x.double(), dim=(0, 2, 3), unbiased=False)
        seen[node.name] = (torch.allclose(mean.float(), sd[f"{node.param}.running_mean"], atol=1e-4) and
                           torch.allclose(var.float(), sd[f"{node.param}.running_var"], rtol=1e-3, atol=1e-6))

    executor.reference(tiny, sd, weights.synthetic_images(4, tiny.input_shape, seed=3), torch.float32,
                       on_batchnorm=check)
    assert seen and all(seen.values())
    y = executor.reference(tiny, sd, weights.synthetic_images(4, tiny.input_shape, seed=9).double())
    assert torch.isfinite(y).all() and y.std(0).mean() > 1e-3   # logits differ between images
    again, _, _ = weights.load(tiny, None, seed=3)
    assert all(torch.equal(sd[k], again[k]) for k in sd)


def test_session_run_batches_pads_and_skips(tiny, tmp_path):
    """Session.run on the CPU: prefetching, a short batch padded to a built bucket, bad files skipped."""
    Image = pytest.importorskip("PIL.Image")
    import numpy as np
    from snn.runtime import images, infer
    tiny224 = parse_spec(TINY.replace("shape: [3, 20, 20]", "shape: [3, 224, 224]"), "tiny.yaml")
    rng = np.random.default_rng(0)
    for i in range(5):
        Image.fromarray(rng.integers(0, 255, (240, 300, 3), dtype=np.uint8)).save(tmp_path / f"im{i}.png")
    (tmp_path / "im2.png").write_bytes(b"broken")
    (tmp_path / "x.txt").write_text("no")
    paths, skipped = images.discover(tmp_path)
    sd = weights.random_init(tiny224, 0)
    cache = fake_cache(tiny224, batch=2)
    cache.data["batches"] = [1, 3]   # 2 images run as a padded batch of 3
    for layer in cache.layers.values():
        layer["batches"]["3"] = layer["batches"]["2"]
    s = object.__new__(infer.Session)
    s.net, s.cache, s.batch, s.force, s.warning = tiny224, cache, 3, "auto", None
    s.class_names = [f"c{i}" for i in range(5)]
    s.torch_device = "cpu"
    s.executor = executor.Executor(tiny224, sd, executor.TorchBackend(), cache, "cpu", "sparse", trace=True)
    seen_batches, progress = [], []
    orig = s.executor.forward
    s.executor.forward = lambda x: (seen_batches.append(x.shape[0]), orig(x))[1]
    r = s.run(paths, skipped, top=3, progress=progress.append)
    assert [Path(p.path).name for p in r.predictions] == ["im0.png", "im1.png", "im3.png", "im4.png"]
    assert sorted(Path(k.path).name for k in r.skipped) == ["im2.png", "x.txt"]
    assert seen_batches == [3, 3] and progress == [3, 2]   # im0, im1 (+ broken im2) | im3, im4
    ref = executor.reference(tiny224, sd, torch.stack([torch.from_numpy(images.preprocess(tmp_path / f"im{i}.png"))
                                                        for i in (0, 1, 3, 4)]).double())
    for p, row in zip(r.predictions, ref):
        assert [i for i, _, _ in p.top] == row.topk(3).indices.tolist()
        assert p.top[0][1] == f"c{p.top[0][0]}"
        assert abs(sum(q for _, _, q in p.top) - torch.softmax(row, 0).topk(3).values.sum().item()) < 1e-5
    assert r.conv_runs == 2 * len(tiny224.convs) and r.sparse_runs == 2 * (len(tiny224.convs) - 1)
    out = tmp_path / "r.json"
    infer.write_output(r, str(out), 3)
    import json
    doc = json.loads(out.read_text())
    assert doc["summary"]["images"] == 4 and doc["summary"]["skipped"] == 2
    infer.write_output(r, str(tmp_path / "r.csv"), 3)
    rows = (tmp_path / "r.csv").read_text().splitlines()
    assert rows[0].startswith("path,label1,index1,prob1,label2") and len(rows) == 5
    assert "4 images" in infer.format_summary(r) and "2 file(s) skipped" in infer.format_summary(r)
    assert len(infer.format_trace(r)) == 1 + len(tiny224.convs)


def test_sixteen_bit_executor_fuses_each_conv_into_one_cudnn_call(tiny, monkeypatch):
    """bf16: every weight, bias and activation in bf16; a conv followed by ReLU is one cudnn_convolution_relu call,
    one followed by a residual add and ReLU one cudnn_convolution_add_relu (here stand-ins of the CUDA-only ops);
    the logits match float64 within bf16's rounding; 16 bits refuse the sparse path."""
    F = torch.nn.functional
    calls = []

    def conv_relu(x, w, b, s, p, d, g):
        assert x.dtype == w.dtype == b.dtype == torch.bfloat16
        calls.append(("relu", tuple(w.shape)))
        return torch.relu(F.conv2d(x, w, b, s, p, d, g))

    def conv_add_relu(x, w, z, alpha, b, s, p, d, g):
        assert z.dtype == torch.bfloat16 and alpha == 1.0
        calls.append(("add_relu", tuple(w.shape)))
        return torch.relu(F.conv2d(x, w, b, s, p, d, g) + z)

    monkeypatch.setattr(torch, "cudnn_convolution_relu", conv_relu, raising=False)
    monkeypatch.setattr(torch, "cudnn_convolution_add_relu", conv_add_relu, raising=False)
    sd = weights.random_init(tiny, seed=1)
    ex = executor.Executor(tiny, sd, executor.TorchBackend(), None, device="cpu", force="dense", precision="bf16")
    x = torch.randn(2, 3, 20, 20)
    y = ex.forward(x)
    ref = executor.reference(tiny, sd, x.double())
    assert y.dtype == torch.bfloat16 and rel_err(y.float(), ref) < 0.05
    # conv1, b.conv1, c.conv: conv + bias + ReLU; b.conv2: + the residual b.downbn; b.down, d.conv, e.conv: plain
    assert sorted(calls) == [("add_relu", (16, 8, 1, 1)), ("relu", (8, 3, 3, 3)), ("relu", (8, 8, 3, 3)),
                             ("relu", (8, 16, 3, 3))]
    for force in ("auto", "sparse"):
        with pytest.raises(RunError, match="sparse path needs fp32"):
            executor.Executor(tiny, sd, executor.TorchBackend(), None, device="cpu", force=force, precision="fp16")
    with pytest.raises(RunError, match="precision must be one of"):
        executor.Executor(tiny, sd, executor.TorchBackend(), None, device="cpu", force="dense", precision="fp8")


GROUPED = """\
name: grouped
input: {name: image, shape: [3, 12, 12]}
nodes:
  - {name: stem, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, padding: 1}
  - {name: r0, op: relu, input: stem}
  - {name: g, op: conv, input: r0, in_channels: 8, out_channels: 8, kernel: 3, padding: 1, groups: 4}
  - {name: bn, op: batchnorm, input: g, channels: 8}
  - {name: r1, op: relu, input: bn}
  - {name: gap, op: global_avgpool, input: r1}
  - {name: flat, op: flatten, input: gap}
  - {name: fc, op: linear, input: flat, in_features: 8, out_features: 4}
"""


def test_grouped_convs_run_dense_with_their_groups():
    net = parse_spec(GROUPED, "grouped.yaml")
    assert [(c.name, c.groups, c.sparse) for c in net.convs] == [("stem", 1, False), ("g", 4, False)]
    sd = weights.random_init(net, seed=2)
    ex = executor.Executor(net, sd, executor.TorchBackend(), None, device="cpu")
    x = torch.randn(2, 3, 12, 12)
    assert rel_err(ex.forward(x), executor.reference(net, sd, x.double())) < 1e-5


def test_cuda_backend_epilogue_reads_a_channel_prefix_in_place(tiny):
    """The first C channels of a wider NHWC buffer (a concat chain's value): read where they are, at the buffer's
    pixel pitch, by an epilogue that takes one (manifest "in_ld"); through a dense copy by one that does not. An
    in-place epilogue on such a view cannot be: it writes densely."""
    from snn.runtime.kernels import pixel_pitch
    dev = RecordingDevice()
    cache = fake_cache(tiny)
    cache.data["epilogue"] = {"cubin": "/e.cubin", "function": "snn_epilogue", "zero_range": True, "in_ld": True}
    be = CudaBackend(dev, cache)
    buf = torch.randn(2, 20, 5, 5).contiguous(memory_format=torch.channels_last)
    view, out = buf[:, :12], torch.empty(2, 12, 5, 5).contiguous(memory_format=torch.channels_last)
    assert pixel_pitch(view) == 20 and pixel_pitch(out) == 12 and pixel_pitch(torch.randn(2, 12, 5, 5)) is None
    s, t = torch.ones(12), torch.zeros(12)
    be.epilogue(view, s, t, None, out, None, None, True)
    vals = [v for v, _ in dev.calls[-1][5]]
    assert vals[0] == buf.data_ptr() and vals[6:8] == [2 * 12 * 25, 12] and vals[-1] == 20
    be.epilogue(out, s, t, None, out, None, None, True)
    assert [v for v, _ in dev.calls[-1][5]][-1] == 12
    with pytest.raises(RunError, match="in-place epilogue needs a dense NHWC tensor"):
        be.epilogue(view, s, t, None, view, None, None, True)
    cache.data["epilogue"] = {"cubin": "/e.cubin", "function": "snn_epilogue", "zero_range": True}
    old = CudaBackend(dev, cache)
    old.epilogue(view, s, t, None, out, None, None, True)
    args = dev.calls[-1][5]
    assert args[0][0] != buf.data_ptr() and len(args) == 12   # a dense copy; no pitch argument


def test_cuda_backend_passes_the_hand_off_arguments(tiny):
    """A hand-off consumer's launch: in_shift / in_zeros, in_res / in_out (dense NHWC only) and the range to zero
    (whole float4s, its length as a 64-bit integer) in the manifest's order; a kernel without the arguments
    refuses them; the range goes to the kernel, so no epilogue launch clears it."""
    dev = RecordingDevice()
    cache = fake_cache(tiny)
    cache.data["epilogue"] = {"cubin": "/e.cubin", "function": "snn_epilogue", "zero_range": True}
    be = CudaBackend(dev, cache)
    args = ["input", "weight", "accumulator", "bias", "residual", "zeros", "relu", "in_shift", "in_zeros", "in_res",
            "in_out", "zero", "zero_total"]
    k = {"cubin": "/k.cubin", "epilogue": False,
         "steps": [{"op": "launch", "function": "f", "grid": [1, 1, 1], "block": [32, 1, 1], "args": args}]}
    inp, w = torch.ones(2, 8, 4, 4), torch.ones(8, 1, 1, 8)
    into = torch.zeros(2, 4, 4, 8).permute(0, 3, 1, 2)
    res = torch.randn(2, 4, 4, 8).permute(0, 3, 1, 2)
    stored = torch.empty(2, 4, 4, 8).permute(0, 3, 1, 2)
    zero = torch.ones(64)
    in_epi = executor.InputEpilogue(torch.ones(8), torch.zeros(2, dtype=torch.int64), 1, res, stored)
    assert be.sparse_conv("k", k, inp, w, None, {}, None, None, in_epi, into=into, zero=zero)
    (_, _, _, _, _, passed), = dev.calls
    ptr = {a: v for a, (v, _) in zip(args, passed)}
    assert ptr["in_res"] == res.data_ptr() and ptr["in_out"] == stored.data_ptr()
    assert ptr["accumulator"] == into.data_ptr()
    assert ptr["zero"] == zero.data_ptr() and passed[-1] == (64, ctypes.c_longlong)
    with pytest.raises(RunError, match="float4"):
        be.sparse_conv("k", k, inp, w, None, {}, None, None, in_epi, into=into, zero=torch.ones(66)[1:])
    with pytest.raises(RunError, match="dense NHWC"):
        be.sparse_conv("k", k, inp, w, None, {}, None, None,
                       executor.InputEpilogue(torch.ones(8), None, None, res[:, :4]), into=into)
    no_res = dict(k, steps=[dict(k["steps"][0], args=args[:9])])
    with pytest.raises(RunError, match="in_res"):
        be.sparse_conv("k", no_res, inp, w, None, {}, None, None, in_epi, into=into)
