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

pytestmark = pytest.mark.gpu
SPEC = """\
name: apinet
input: {name: image, shape: [3, 20, 20]}
nodes:
  - {name: stem, op: conv, input: image, in_channels: 3, out_channels: 16, kernel: 3, padding: 1}
  - {name: r0, op: relu, input: stem}
  - {name: c1, op: conv, input: r0, in_channels: 16, out_channels: 24, kernel: 3, padding: 1}
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
