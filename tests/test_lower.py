"""runtime/lower.py on the CPU: the spec -> Program lowering (BN folding, ReLU fusion into epilogues,
eligibility, zero-counter slots, liveness) and the weight layouts. Skips without torch."""
import pytest

torch = pytest.importorskip("torch")

from snn.codegen.spec import parse_spec  # noqa: E402
from snn.runtime import executor, lower, weights  # noqa: E402
from snn.runtime.errors import RunError  # noqa: E402
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
    # pool1 (maxpool of a relu) and cat (read by e.conv) get a counting pass
    assert [op.name for op in prog.ops if op.kind == "count"] == ["pool1", "cat"]
    # conv -> bn -> relu: the epilogue (folded bias, ReLU, zero count) moves into the conv; the relu's value
    # is the conv's
    conv1 = ops[("conv", "conv1")]
    assert conv1.attrs["bias"] is None and ops[("alias", "relu1")].inputs == ("conv1",)
    epi = conv1.attrs["epilogue"]
    assert epi["relu"] and epi["shift"] is not None and epi["residual"] is None
    assert epi["slot"] is None and "relu1" not in prog.slots   # relu1 is measured after its maxpool (pool1)
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
    counted += [op.attrs["epilogue"]["slot"] for op in prog.ops if op.kind == "conv" and "epilogue" in op.attrs
                and op.attrs["epilogue"]["slot"] is not None]
    assert sorted(counted) == sorted(prog.slots.values()) == list(range(len(prog.slots)))
    assert prog.conv_op("e.conv").inputs == ("cat",)


def test_folded_conv_equals_conv_then_batchnorm(tiny):
    sd = weights.random_init(tiny, seed=2)
    prog = lower.lower(tiny, sd, "cpu")
    x = torch.randn(2, 3, 20, 20, dtype=torch.float64)
    env = executor.reference(tiny, sd, x, keep_all=True)
    conv = prog.conv_op("conv1")
    shift = conv.attrs["epilogue"]["shift"]
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
