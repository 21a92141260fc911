"""runtime/lower.py on the CPU: the spec -> Program lowering (BN folding, ReLU fusion into epilogues,
eligibility, zero-counter slots, liveness) and the weight layouts. Skips without torch."""
import pytest

torch = pytest.importorskip("torch")

from snn.codegen.spec import parse_spec  # noqa: E402
from snn.runtime import executor, lower, weights  # noqa: E402
from snn.runtime.errors import RunError  # noqa: E402
from snn.runtime.kernels import pixel_pitch  # noqa: E402
from test_runtime_torch import TINY, rel_err  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return parse_spec(TINY, "tiny.yaml")


def test_tiny_lowers_every_fusion_pattern(tiny):
    prog = lower.lower(tiny, weights.random_init(tiny, seed=1), "cpu")
    ops = {(op.kind, op.name): op for op in prog.ops}
    # conv1 reads the image: never eligible; every conv after a relu (through maxpool/concat) is
    assert prog.eligible == {c.name for c in tiny.convs} - {"conv1"}
    assert prog.eligible == {c.name for c in tiny.sparse_convs}  # the set the plan and the build make kernels for
    kinds = [op.kind for op in prog.ops]
    assert "relu" in kinds                       # fc1.relu: plain torch
    assert "batchnorm" not in kinds and "bn" not in kinds
    # cat (read by e.conv) gets a counting pass; pool1 (maxpool of a relu) counts its own zeros (below)
    assert [op.name for op in prog.ops if op.kind == "count"] == ["cat"]
    # conv -> bn -> relu -> maxpool, the conv on cuDNN (not eligible): the epilogue (folded bias, ReLU) moves into
    # the pool, which also counts the zeros pool1's readers are measured by; the relu's value is the conv's own
    conv1, pool1 = ops[("conv", "conv1")], ops[("maxpool", "pool1")]
    assert conv1.attrs["bias"] is None and "epilogue" not in conv1.attrs and ops[("alias", "relu1")].inputs == ("conv1",)
    epi = pool1.attrs["epilogue"]
    assert epi["relu"] and epi["shift"] is not None and epi["slot"] == prog.slots["pool1"]
    assert "relu1" not in prog.slots and pool1.inputs == ("relu1",)
    assert ("epilogue", "relu1") not in ops and ("epilogue", "c.relu") not in ops  # a conv's own bias too (c.conv)
    # the residual block: fused into the conv produced last (b.conv2; the spec's node order runs b.down first),
    # which adds b.down's value; b.down keeps its folded bias (its kernel adds it)
    names = [op.name for op in prog.ops]
    assert names.index("b.down") < names.index("b.conv2")
    main = ops[("conv", "b.conv2")]
    assert ops[("alias", "b.relu2")].inputs == ("b.conv2",) and main.inputs == ("b.relu1", "b.down")
    assert main.attrs["epilogue"]["residual"] == "b.down" and main.attrs["bias"] is None
    assert main.attrs["epilogue"]["slot"] == prog.slots["b.relu2"]  # read by c.conv: its kernel counts the zeros
    assert ops[("conv", "b.down")].attrs["bias"] is not None and "epilogue" not in ops[("conv", "b.down")].attrs
    assert sum(1 for op in prog.ops if op.kind == "epilogue") == 2  # d.relu and relu5: batchnorms of no conv
    # pre-activation bn -> relu on a concat: a new tensor (the concat lives on), with the bn's scale
    pre = ops[("epilogue", "d.relu")]
    assert pre.inputs == ("cat",) and not pre.attrs["inplace"] and pre.attrs["scale"] is not None
    # convs sharing an input share its counter; every slot is counted exactly once
    assert prog.slots["pool1"] == prog.slots[ops[("conv", "b.down")].inputs[0]]
    counted = [op.attrs["slot"] for op in prog.ops if op.kind in ("count", "epilogue") and "slot" in op.attrs]
    counted += [op.attrs["epilogue"]["slot"] for op in prog.ops if op.kind in ("conv", "maxpool")
                and "epilogue" in op.attrs and op.attrs["epilogue"]["slot"] is not None]
    assert sorted(counted) == sorted(prog.slots.values()) == list(range(len(prog.slots)))
    assert prog.conv_op("e.conv").inputs == ("cat",)


def test_without_pool_epilogues_the_conv_keeps_its_epilogue_and_the_pool_is_counted(tiny):
    """16 bits (pool_epilogues=False): cuDNN fuses the stem's shift + ReLU into the conv's call; the pool is plain
    and a count op follows it."""
    prog = lower.lower(tiny, weights.random_init(tiny, seed=1), "cpu", pool_epilogues=False)
    ops = {(op.kind, op.name): op for op in prog.ops}
    assert [op.name for op in prog.ops if op.kind == "count"] == ["pool1", "cat"]
    epi = ops[("conv", "conv1")].attrs["epilogue"]
    assert epi["relu"] and epi["shift"] is not None and epi["residual"] is None and epi["slot"] is None
    assert "epilogue" not in ops[("maxpool", "pool1")].attrs


def test_a_pool_epilogue_runs_where_the_pool_kernel_cannot_take_it(tiny):
    """The executor's fallbacks for a pool with its producer's epilogue: a backend without a pool kernel (torch's
    pool, the epilogue launched before it, the zeros counted after), and one whose pool kernel takes no epilogue
    (a bundle's from before it took one); both give the logits and the counts of the lowering without the move."""
    F, cl = torch.nn.functional, torch.channels_last

    class PlainPool(executor.TorchBackend):
        pooled = 0

        def maxpool(self, inp, kernel, stride, padding, out_hw, *epilogue):
            if epilogue:
                return None
            self.pooled += 1
            y = F.max_pool2d(inp, kernel, stride, padding, ceil_mode=True)
            return y[:, :, :out_hw[0], :out_hw[1]].contiguous(memory_format=cl)

    sd = weights.random_init(tiny, seed=4)
    x = torch.randn(2, 3, 20, 20)
    ref = executor.Executor(tiny, sd, executor.TorchBackend(), None, device="cpu", force="dense", trace=True)
    ref.program = lower.lower(tiny, sd, "cpu", pool_epilogues=False)
    y_ref = ref.forward(x)
    plain = PlainPool()
    for be in (executor.TorchBackend(), plain):
        ex = executor.Executor(tiny, sd, be, None, device="cpu", force="dense", trace=True)
        assert "epilogue" in ex.program.ops[[op.name for op in ex.program.ops].index("pool1")].attrs
        assert torch.equal(ex.forward(x), y_ref)
        assert {t.name: t.sparsity for t in ex.last_trace} == {t.name: t.sparsity for t in ref.last_trace}
    assert plain.pooled == 2   # both of tiny's pools, the first after the epilogue's own launch


def test_folded_conv_equals_conv_then_batchnorm(tiny):
    sd = weights.random_init(tiny, seed=2)
    prog = lower.lower(tiny, sd, "cpu")
    x = torch.randn(2, 3, 20, 20, dtype=torch.float64)
    env = executor.reference(tiny, sd, x, keep_all=True)
    conv = prog.conv_op("conv1")
    shift = next(op for op in prog.ops if op.name == "pool1").attrs["epilogue"]["shift"]   # moved into its pool
    y = torch.nn.functional.conv2d(x, conv.attrs["weight"].double(), shift.double(), 1, 1)
    assert rel_err(y, env["bn1"]) < 1e-6
    assert conv.attrs["weight"].dtype == torch.float32
    assert conv.attrs["weight"].is_contiguous(memory_format=torch.channels_last)


def test_values_are_freed_after_their_last_reader(tiny):
    prog = lower.lower(tiny, weights.random_init(tiny, seed=3), "cpu")
    live = {prog.input_name}
    freed = set()
    for op, free in zip(prog.ops, prog.free_after):
        assert all(v in live for v in op.inputs), op.name     # nothing read after it was freed
        live.add(op.name)
        for v in free:
            live.discard(v)
            freed.add(v)
    assert prog.output in live and prog.output not in freed
    assert live == {prog.output}                              # everything else was freed


def test_layout_round_trip():
    w = torch.randn(4, 3, 2, 5)
    for layout in ("NCRS", "CRSN", "RSCN", "NRSC"):
        v = lower.to_layout(w, layout)
        assert v.is_contiguous()
        assert v.shape == tuple(w.shape["NCRS".index(ch)] for ch in layout)
        assert torch.equal(lower.from_layout(v, layout), w)
    with pytest.raises(RunError, match="not a permutation"):
        lower.to_layout(w, "NCHW")


# A dense block of three layers and its transition: each layer's concat extends the one before
def dense_yaml(growth: int = 6) -> str:
    total = 8 + 3 * growth
    layers = "".join(f"""  - {{name: l{i}.cat, op: concat, inputs: [pool0{''.join(f', l{j}.conv2' for j in range(1, i))}]}}
  - {{name: l{i}.norm1, op: batchnorm, input: l{i}.cat, channels: {8 + growth * (i - 1)}, param: l{i}.norm1}}
  - {{name: l{i}.relu1, op: relu, input: l{i}.norm1}}
  - {{name: l{i}.conv1, op: conv, input: l{i}.relu1, in_channels: {8 + growth * (i - 1)}, out_channels: 16, kernel: 1, param: l{i}.conv1}}
  - {{name: l{i}.norm2, op: batchnorm, input: l{i}.conv1, channels: 16, param: l{i}.norm2}}
  - {{name: l{i}.relu2, op: relu, input: l{i}.norm2}}
  - {{name: l{i}.conv2, op: conv, input: l{i}.relu2, in_channels: 16, out_channels: {growth}, kernel: 3, padding: 1, param: l{i}.conv2}}
""" for i in (1, 2, 3)).replace("  - {name: l1.cat, op: concat, inputs: [pool0]}\n", "").replace("input: l1.cat,", "input: pool0,")
    return """
name: dense
input: {name: image, shape: [3, 12, 12]}
nodes:
  - {name: conv0, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, padding: 1, param: conv0}
  - {name: norm0, op: batchnorm, input: conv0, channels: 8, param: norm0}
  - {name: relu0, op: relu, input: norm0}
  - {name: pool0, op: maxpool, input: relu0, kernel: 2, stride: 2}
""" + layers + f"""  - {{name: block.cat, op: concat, inputs: [pool0, l1.conv2, l2.conv2, l3.conv2]}}
  - {{name: t.norm, op: batchnorm, input: block.cat, channels: {total}, param: t.norm}}
  - {{name: t.relu, op: relu, input: t.norm}}
  - {{name: t.conv, op: conv, input: t.relu, in_channels: {total}, out_channels: 8, kernel: 1, param: t.conv}}
  - {{name: t.pool, op: avgpool, input: t.conv, kernel: 2, stride: 2}}
  - {{name: gap, op: global_avgpool, input: t.pool}}
  - {{name: flat, op: flatten, input: gap}}
  - {{name: fc, op: linear, input: flat, in_features: 8, out_features: 5, param: fc}}
"""


DENSE = dense_yaml()


def test_a_dense_block_shares_one_buffer():
    """The block's concats form one chain: the first copies its two inputs, each later one only the layer it
    adds, into the channels after the ones before; every value is the buffer's first channels; a layer's output
    is freed once copied (not kept for every later concat)."""
    net = parse_spec(DENSE, "dense.yaml")
    prog = lower.lower(net, weights.random_init(net, seed=4), "cpu")
    cats = {op.name: op for op in prog.ops if op.kind == "concat"}
    assert list(cats) == ["l2.cat", "l3.cat", "block.cat"]
    assert {op.attrs["buffer"] for op in cats.values()} == {"l2.cat"}
    assert all(op.attrs["total"] == 26 for op in cats.values())
    assert [(op.inputs, op.attrs["offsets"], op.attrs["channels"]) for op in cats.values()] == [
        (("pool0", "l1.conv2"), [0, 8], 14), (("l2.conv2",), [14], 20), (("l3.conv2",), [20], 26)]
    freed_at = {v: i for i, free in enumerate(prog.free_after) for v in free}
    at = {op.name: i for i, op in enumerate(prog.ops)}
    assert freed_at["l1.conv2"] == at["l2.cat"] and freed_at["l2.conv2"] == at["l3.cat"]


class SliceRecorder(executor.TorchBackend):
    """The emulation, recording each sparse conv's output pitch (pixel_pitch) and whether it was said zeroed."""

    def __init__(self, *a):
        super().__init__(*a)
        self.outs: dict[str, tuple] = {}

    def sparse_conv(self, name, kentry, inp, weight, out, workspace, shape, epi=None, in_epi=None, into=None,
                    zero=None, zeroed=False):
        self.outs[name.rsplit("_l", 1)[0].removeprefix("sconv_")] = (pixel_pitch(out), zeroed)
        return super().sparse_conv(name, kentry, inp, weight, out, workspace, shape, epi, in_epi, into, zero, zeroed)


def test_a_dense_blocks_conv2_writes_into_its_concat_slice():
    """Each layer's conv2 (read by nothing but the chain) is marked to write its channels of the block's buffer; a
    conv with any other reader, or a value no conv produced (pool0), is not."""
    net = parse_spec(DENSE, "dense.yaml")
    prog = lower.lower(net, weights.random_init(net, seed=4), "cpu")
    marked = {op.name: op.attrs["concat"] for op in prog.ops if op.kind == "conv" and "concat" in op.attrs}
    assert marked == {f"l{i}.conv2": {"buffer": "l2.cat", "total": 26, "offset": 8 + 6 * (i - 1)} for i in (1, 2, 3)}
    # a second reader (l1.conv2 also read by a relu) keeps it out
    net2 = parse_spec(DENSE.replace("  - {name: block.cat,", "  - {name: extra, op: relu, input: l1.conv2}\n"
                                    "  - {name: block.cat,"), "dense.yaml")
    prog2 = lower.lower(net2, weights.random_init(net2, seed=4), "cpu")
    assert {op.name for op in prog2.ops if op.kind == "conv" and "concat" in op.attrs} == {"l2.conv2", "l3.conv2"}


@pytest.mark.parametrize("force,kernels", [("dense", None), ("sparse", "plain"), ("sparse", "split"),
                                           ("sparse", "split+out_ld"), ("sparse", "out_ld")])
def test_a_dense_block_matches_the_reference(force, kernels):
    """Through the shared buffer (the pre-activation BN + ReLU reading its channel prefix in place), dense and
    with every eligible conv through the sparse emulation, against float64. Kernels that take out_ld write each
    conv2 into its slice of the buffer (a split adding into it, zeroed when the buffer was made: the emulation
    adds there too, so a buffer not zeroed would show); others write a new tensor the concat copies in."""
    from test_runtime_torch import fake_cache
    net = parse_spec(DENSE, "dense.yaml")
    sd = weights.random_init(net, seed=5)
    x = torch.randn(2, 3, 12, 12)
    cache = (fake_cache(net, batch=2, split="split" in kernels, out_ld="out_ld" in kernels)
             if force == "sparse" else None)
    be = SliceRecorder(torch.float64)
    ex = executor.Executor(net, sd, be, cache, device="cpu", force=force, trace=True)
    for _ in range(2):   # a second pass gets a new buffer, zeroed again
        y = ex.forward(x)
        assert rel_err(y, executor.reference(net, sd, x.double())) < 1e-5
    if force == "sparse":
        into = "out_ld" in kernels
        for i in (1, 2, 3):
            assert be.outs[f"l{i}.conv2"] == ((26, True) if into else (6, False)), i
        assert be.outs["l1.conv1"] == (16, False)
    ref = executor.reference(net, sd, x.double(), keep_all=True)
    for t in ex.last_trace:  # each conv's input zeros counted through the views
        if t.sparsity is not None:
            inp = ref[net.node(t.name).inputs[0]]
            assert t.sparsity == pytest.approx((inp == 0).sum().item() / inp.numel(), abs=2e-3), t.name


def test_densenet_blocks_are_one_chain_each():
    from snn.codegen.spec import load_spec
    net = load_spec("densenet121")
    prog = lower.lower(net, weights.random_init(net, seed=0), "cpu")
    cats = [op for op in prog.ops if op.kind == "concat"]
    assert len(cats) == sum(1 for n in net.nodes if n.op == "concat") == 58
    assert len({op.attrs["buffer"] for op in cats}) == 4                     # one buffer per dense block
    assert [op.attrs["total"] for op in cats if op.name.endswith("denseblock4.cat")] == [1024]
    assert max(len(op.inputs) for op in cats if op.attrs["offsets"][0] > 0) == 1   # each later one adds a layer


def test_a_transitions_norm_and_relu_run_in_its_pool():
    """spec.pools_first puts the transition's pool before its conv; lower._into_avgpools then moves the pre-activation
    (batchnorm scale and shift, ReLU) into the pool, which also counts the zeros its conv's dispatch reads: no
    epilogue launch, no count op. Without pool epilogues (16 bits) the epilogue and the count op stay."""
    net = parse_spec(DENSE, "dense.yaml")
    sd = weights.random_init(net, seed=4)
    prog = lower.lower(net, sd, "cpu")
    ops = {(op.kind, op.name): op for op in prog.ops}
    pool = ops[("avgpool", "t.pool")]
    assert ("epilogue", "t.relu") not in ops and pool.inputs == ("block.cat",)
    ep = pool.attrs["epilogue"]
    scale, shift = lower.bn_scale_shift(sd, "t.norm", 1e-5)
    assert ep["relu"] and torch.equal(ep["scale"], scale.float()) and torch.equal(ep["shift"], shift.float())
    assert ep["slot"] == prog.slots["t.pool"] and prog.conv_op("t.conv").inputs == ("t.pool",)
    assert not any(op.kind == "count" and op.name == "t.pool" for op in prog.ops)
    plain = lower.lower(net, sd, "cpu", pool_epilogues=False)
    kinds = {(op.kind, op.name) for op in plain.ops}
    assert {("epilogue", "t.relu"), ("count", "t.pool")} <= kinds
    assert "epilogue" not in next(op for op in plain.ops if op.name == "t.pool").attrs


def test_a_transition_after_its_pool_gives_the_values_of_the_spec_as_written():
    """float64: the conv on the pooled map (the order the executor runs) against torch's conv then pool on the same
    pre-activation, as the spec file has them."""
    net = parse_spec(DENSE, "dense.yaml")
    sd = {k: v.double() for k, v in weights.random_init(net, seed=7).items()}
    x = torch.randn(2, 3, 12, 12, dtype=torch.float64)
    ref = executor.reference(net, sd, x, keep_all=True)
    F = torch.nn.functional
    as_written = F.avg_pool2d(F.conv2d(ref["t.relu"], sd["t.conv.weight"]), 2)
    assert ref["t.conv"].shape == as_written.shape == (2, 8, 3, 3)
    torch.testing.assert_close(ref["t.conv"], as_written, rtol=1e-12, atol=1e-12)


def test_cuda_backend_avgpool_arguments():
    """CudaBackend.avgpool launches the manifest's "avg_function" from the pool cubin: sizes, the pre-activation's
    scale and shift, relu and the counter's slot; and declines (None) where the bundle has none or the channels are
    not whole float4s."""
    from test_runtime_torch import RecordingDevice, fake_cache
    from snn.runtime.kernels import CudaBackend
    net = parse_spec(DENSE, "dense.yaml")
    cache = fake_cache(net)
    cache.data["epilogue"] = {"cubin": "/e.cubin", "function": "snn_epilogue"}
    dev = RecordingDevice()
    be = CudaBackend(dev, cache)
    x = torch.randn(2, 8, 6, 6).contiguous(memory_format=torch.channels_last)
    s, t, counters = torch.ones(8), torch.zeros(8), torch.zeros(4, dtype=torch.int64)
    assert be.avgpool(x, (2, 2), (2, 2), (3, 3), s, t, True, counters, 2) is None   # no pool entry
    cache.data["maxpool"] = {"cubin": "/p.cubin", "function": "snn_maxpool", "block": [256], "vector": 4,
                             "pdl": True, "avg_function": "snn_avgpool"}
    y = be.avgpool(x, (2, 2), (2, 2), (3, 3), s, t, True, counters, 2)
    assert y.shape == (2, 8, 3, 3) and y.is_contiguous(memory_format=torch.channels_last)
    (cubin, fn, grid, block, smem, args), = dev.calls
    assert (cubin, fn, grid, block, dev.pdl) == ("/p.cubin", "snn_avgpool", [1, 1, 1], [256, 1, 1], [True])
    assert [v for v, _ in args] == [x.data_ptr(), y.data_ptr(), 18, 8, 6, 6, 3, 3, 2, 2, 2, 2,
                                    s.data_ptr(), t.data_ptr(), 1, counters.data_ptr() + 16]
    assert be.avgpool(x[:, :6], (2, 2), (2, 2), (3, 3)) is None
