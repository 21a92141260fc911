"""snn.build then snn.load on a real GPU: the engine's logits match the spec run in float64, on the
graph path and eagerly, with the sparse kernels forced on and with the zero counter deciding; a batch
larger than the engine's runs in chunks and a short one is padded; x on a side stream works."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import snn  # noqa: E402
from snn.codegen.spec import load_spec  # noqa: E402
from snn.runtime import executor, weights  # noqa: E402
from snn.runtime.errors import RunError  # noqa: E402

pytestmark = pytest.mark.gpu
SPEC = """\
name: apinet
input: {name: image, shape: [3, 20, 20]}
nodes:
  - {name: stem, op: conv, input: image, in_channels: 3, out_channels: 16, kernel: 3, padding: 1}
  - {name: r0, op: relu, input: stem}
  - {name: mp, op: maxpool, input: r0, kernel: 3, stride: 2, padding: 1, ceil_mode: true}
  - {name: c1, op: conv, input: mp, in_channels: 16, out_channels: 24, kernel: 3, padding: 1}
  - {name: r1, op: relu, input: c1}
  - {name: c2, op: conv, input: r1, in_channels: 24, out_channels: 24, kernel: 5, stride: 2, padding: 2}
  - {name: r2, op: relu, input: c2}
  - {name: pool, op: adaptive_avgpool, input: r2, output_size: 1}
  - {name: flat, op: flatten, input: pool}
  - {name: fc, op: linear, input: flat, in_features: 24, out_features: 10}
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    d = tmp_path_factory.mktemp("api")
    spec = d / "apinet.yaml"
    spec.write_text(SPEC)
    return snn.build(str(spec), gpu="auto", batch=[1, 2], out=d / "gen").manifest_path.parent


@pytest.mark.parametrize("graph", [True, False])
@pytest.mark.parametrize("force", ["auto", "sparse"])
def test_engine_matches_float64(bundle, graph, force):
    torch.backends.cudnn.allow_tf32 = False
    engine = snn.load(bundle, batch=2, graph=graph, force=force)
    net = load_spec(bundle / "spec.yaml")
    sd, _, _ = weights.load(net, None, 0, device="cuda")  # the same seeded weights the engine made
    x = torch.randn(3, 3, 20, 20, device="cuda", generator=torch.Generator("cuda").manual_seed(1)).relu()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # on whatever stream the caller runs
        y = engine(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    ref = executor.reference(net, {k: v.double().cpu() for k, v in sd.items()}, x.double().cpu())
    assert y.shape == (3, 10) and torch.isfinite(y).all()
    err = (torch.linalg.vector_norm(y.double().cpu() - ref) / torch.linalg.vector_norm(ref)).item()
    assert err < 1e-4, err
    if force == "sparse":
        assert any(t.path == "sparse" for t in engine.last_trace)


RESNET_BLOCK = """\
name: blocknet
input: {name: image, shape: [3, 16, 16]}
nodes:
  - {name: stem, op: conv, input: image, in_channels: 3, out_channels: 32, kernel: 3, padding: 1}
  - {name: bn0, op: batchnorm, input: stem, channels: 32}
  - {name: r0, op: relu, input: bn0}
  - {name: mp, op: maxpool, input: r0, kernel: 3, stride: 2, padding: 1}
  - {name: c1, op: conv, input: mp, in_channels: 32, out_channels: 32, kernel: 3, padding: 1}
  - {name: bn1, op: batchnorm, input: c1, channels: 32}
  - {name: r1, op: relu, input: bn1}
  - {name: c2, op: conv, input: r1, in_channels: 32, out_channels: 32, kernel: 1}
  - {name: bn2, op: batchnorm, input: c2, channels: 32}
  - {name: add, op: add, inputs: [bn2, mp]}
  - {name: r2, op: relu, input: add}
  - {name: pool, op: adaptive_avgpool, input: r2, output_size: 1}
  - {name: flat, op: flatten, input: pool}
  - {name: fc, op: linear, input: flat, in_features: 32, out_features: 10}
"""


# DenseNet's layer: a pre-activation batchnorm + ReLU of the block's concat (the 16-bit epilogue kernel, reading
# the chain buffer's first channels in place, 40 apart), conv1 + BN + ReLU fused in cuDNN, conv2 into the
# buffer; the prefixes of 16, 24 and 40 channels take the kernel's vector path, the one of 30 its scalar path
DENSE_BLOCK = """\
name: densenet
input: {name: image, shape: [3, 16, 16]}
nodes:
  - {name: stem, op: conv, input: image, in_channels: 3, out_channels: 16, kernel: 3, padding: 1}
  - {name: l1.norm1, op: batchnorm, input: stem, channels: 16}
  - {name: l1.relu1, op: relu, input: l1.norm1}
  - {name: l1.conv1, op: conv, input: l1.relu1, in_channels: 16, out_channels: 32, kernel: 1}
  - {name: l1.norm2, op: batchnorm, input: l1.conv1, channels: 32}
  - {name: l1.relu2, op: relu, input: l1.norm2}
  - {name: l1.conv2, op: conv, input: l1.relu2, in_channels: 32, out_channels: 8, kernel: 3, padding: 1}
  - {name: l2.cat, op: concat, inputs: [stem, l1.conv2]}
  - {name: l2.norm1, op: batchnorm, input: l2.cat, channels: 24}
  - {name: l2.relu1, op: relu, input: l2.norm1}
  - {name: l2.conv1, op: conv, input: l2.relu1, in_channels: 24, out_channels: 32, kernel: 1}
  - {name: l2.norm2, op: batchnorm, input: l2.conv1, channels: 32}
  - {name: l2.relu2, op: relu, input: l2.norm2}
  - {name: l2.conv2, op: conv, input: l2.relu2, in_channels: 32, out_channels: 6, kernel: 3, padding: 1}
  - {name: l3.cat, op: concat, inputs: [stem, l1.conv2, l2.conv2]}
  - {name: l3.norm1, op: batchnorm, input: l3.cat, channels: 30}
  - {name: l3.relu1, op: relu, input: l3.norm1}
  - {name: l3.conv1, op: conv, input: l3.relu1, in_channels: 30, out_channels: 32, kernel: 1}
  - {name: l3.norm2, op: batchnorm, input: l3.conv1, channels: 32}
  - {name: l3.relu2, op: relu, input: l3.norm2}
  - {name: l3.conv2, op: conv, input: l3.relu2, in_channels: 32, out_channels: 10, kernel: 3, padding: 1}
  - {name: out.cat, op: concat, inputs: [stem, l1.conv2, l2.conv2, l3.conv2]}
  - {name: norm5, op: batchnorm, input: out.cat, channels: 40}
  - {name: relu5, op: relu, input: norm5}
  - {name: pool, op: adaptive_avgpool, input: relu5, output_size: 1}
  - {name: flat, op: flatten, input: pool}
  - {name: fc, op: linear, input: flat, in_features: 40, out_features: 10}
"""


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("graph", [True, False])
@pytest.mark.parametrize("text", [RESNET_BLOCK, DENSE_BLOCK], ids=["resnet", "densenet"])
def test_sixteen_bit_engine_is_as_close_to_float64_as_torch_in_that_precision(tmp_path, precision, graph, text):
    """A bf16 / fp16 bundle: the tensor-core kernels (forced onto every layer that has them) or cuDNN's fused conv +
    bias (+ residual) + ReLU on every conv, DenseNet's pre-activations in the bundle's epilogue kernel; the logits' error against float64 within 1.5x that of the
    same spec run by torch in the same precision, and finite."""
    spec = tmp_path / "net.yaml"
    spec.write_text(text)
    b = snn.build(str(spec), gpu="auto", batch=[4], out=tmp_path / "gen", precision=precision).manifest_path.parent
    engine = snn.load(b, batch=4, graph=graph)  # the bundle's precision
    tcc = engine.executor.tensorcore   # every layer with tensor-core kernels on its first one, whatever was faster
    forced = {conv: tcc.kernels(conv, 4)[0] for conv in engine.executor.convs if tcc.kernels(conv, 4)}
    tcc.choice.update({(conv, 4): k for conv, k in forced.items()})
    assert sorted(forced) == (["c1", "c2"] if text is RESNET_BLOCK else []), forced
    assert {m["layer"] for m in tcc.measured} == set(forced)
    net = load_spec(b / "spec.yaml")
    sd, _, _ = weights.load(net, None, 0, device="cuda")
    x = torch.randn(4, 3, 16, 16, device="cuda", generator=torch.Generator("cuda").manual_seed(2))
    launched, launch = [], engine.executor.backend.dev.launch

    def counted(cubin, name, *args, **kw):
        launched.append(name)
        return launch(cubin, name, *args, **kw)
    engine.executor.backend.dev.launch = counted   # the first call runs every launch (a graph: its warm-up passes too)
    y = engine(x)
    engine.executor.backend.dev.launch = launch
    # per pass, the pre-activations (the three layers' and norm5) in the bundle's epilogue kernel, nothing else of ours
    if text is DENSE_BLOCK:
        assert launched and set(launched) == {f"snn_epilogue_{precision}"} and len(launched) % 4 == 0, launched
        assert graph or len(launched) == 4
    else:   # the max pool on the bundle's kernel, c1 (3x3) and c2 (1x1, the residual added) on the tensor-core kernels
        assert set(launched) == set(forced.values()) | {f"snn_maxpool_{precision}"} and len(launched) % 3 == 0, launched
    if graph:
        y = engine(x.clone())   # a replay
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    assert y.dtype == dt and y.shape == (4, 10) and torch.isfinite(y).all()
    ref = executor.reference(net, {k: v.double().cpu() for k, v in sd.items()}, x.double().cpu())
    same = executor.reference(net, sd, x, dtype=dt)   # torch's own run of the spec in that precision
    err = lambda t: (torch.linalg.vector_norm(t.double().cpu() - ref) / torch.linalg.vector_norm(ref)).item()  # noqa: E731
    assert err(y) <= 1.5 * err(same) + 1e-3, (err(y), err(same))
    assert all(t.path == "dense" or t.path == "device" for t in engine.last_trace)
    with pytest.raises(RunError, match="sparse path needs fp32"):
        snn.load(b, batch=4, precision=precision, force="sparse")
    with pytest.raises(RunError, match=f"built for {precision}, the run asks for fp32; rebuild with: .* --precision fp32"):
        snn.load(b, batch=4, precision="fp32")
