"""The bundle's max-pool kernel (codegen/templates/maxpool.cu.j2) through CudaBackend.maxpool against torch's
max_pool2d in every precision: padding, ceil_mode windows that hang over the edge, unequal kernel / stride /
padding pairs, a batch, negative values and a NaN (it must win, as in torch); the output poisoned first. In FP32 also
with its producer's epilogue (shift + ReLU on each value read) and the pooled zeros counted; and the FP32 average pool
beside it (CudaBackend.avgpool), plain and with a pre-activation's batchnorm + ReLU, against torch's."""
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cuda.bindings.driver")

from snn.codegen.cache import CubinCache  # noqa: E402
from snn.codegen.compile import Compiler  # noqa: E402
from snn.codegen.emit import (MAXPOOL_EPILOGUE, MAXPOOL_THREADS, MAXPOOL_VECTOR, avgpool_function,  # noqa: E402
                              maxpool_function, render_maxpool)
from snn.codegen.spec import pool_out  # noqa: E402
from snn.runtime.cuda import Device, torch_dtype  # noqa: E402
from snn.runtime.kernels import CudaBackend  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")]
CASES = [  # batch, channels, H, W, kernel, stride, padding, ceil_mode
    (1, 64, 112, 112, (3, 3), (2, 2), (1, 1), False),   # ResNet's stem
    (3, 24, 15, 13, (3, 3), (2, 2), (1, 1), True),
    (2, 16, 9, 9, (2, 2), (2, 2), (0, 0), True),        # VGG's, on an odd size
    (2, 40, 7, 10, (3, 2), (2, 1), (1, 0), False),
]


class _Bundle:
    """What CudaBackend reads of a loaded bundle (runtime/manifest.Cache)."""
    def __init__(self, precision, cubin):
        self.precision, self.epilogue = precision, {"cubin": "", "function": "unused"}
        self.maxpool = {"cubin": cubin, "function": maxpool_function(precision), "block": [MAXPOOL_THREADS],
                        "vector": MAXPOOL_VECTOR[precision], "epilogue": MAXPOOL_EPILOGUE[precision], "pdl": True,
                        **({"avg_function": avgpool_function(precision)} if avgpool_function(precision) else {})}


@pytest.fixture(scope="module")
def backends(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    sources = dict(render_maxpool(p) for p in MAXPOOL_VECTOR)
    records = Compiler(CubinCache(tmp_path_factory.mktemp("cubins"))).compile(sources, "sm_90").records
    dev = Device()
    return {p: CudaBackend(dev, _Bundle(p, records[maxpool_function(p)]["cubin"])) for p in MAXPOOL_VECTOR}


@pytest.mark.parametrize("precision", list(MAXPOOL_VECTOR))
@pytest.mark.parametrize("case", range(len(CASES)))
def test_maxpool_kernel_equals_torch(backends, precision, case):
    b, c, h, w, k, s, p, ceil = CASES[case]
    dt = torch_dtype(torch, precision)
    g = torch.Generator("cuda").manual_seed(case)
    x = torch.randn(b, c, h, w, device="cuda", generator=g).to(dt).contiguous(memory_format=torch.channels_last)
    x[b - 1, c - 1, h // 2, w // 2] = float("nan")
    out_hw = tuple(pool_out((h, w)[i], k[i], s[i], p[i], ceil) for i in (0, 1))
    # poison: the allocator hands the output this freed block of the same size
    torch.full((b * c * out_hw[0] * out_hw[1],), float("nan"), device="cuda", dtype=dt)
    y = backends[precision].maxpool(x, k, s, p, out_hw)
    ref = torch.nn.functional.max_pool2d(x.float(), k, s, p, ceil_mode=ceil)
    assert y is not None and y.shape == ref.shape and y.is_contiguous(memory_format=torch.channels_last)
    assert torch.isnan(y).sum() == torch.isnan(ref).sum() > 0
    torch.testing.assert_close(y.float(), ref, rtol=0, atol=0, equal_nan=True)


def test_maxpool_kernel_declines_what_it_cannot_take(backends):
    x = torch.randn(1, 6, 8, 8, device="cuda").contiguous(memory_format=torch.channels_last)   # 6 % 4 != 0
    assert backends["fp32"].maxpool(x, (2, 2), (2, 2), (0, 0), (4, 4)) is None
    assert backends["bf16"].maxpool(x.float(), (2, 2), (2, 2), (0, 0), (4, 4)) is None           # not its type


@pytest.mark.parametrize("case", range(len(CASES)))
def test_maxpool_kernel_applies_its_producers_epilogue_and_counts(backends, case):
    """relu(x + shift[c]) on every value read, then the max: torch's pool of snn_epilogue's output, bit for bit, and
    the pooled zeros added to the counter's slot (not over it); a shift alone, without the ReLU, too."""
    b, c, h, w, k, s, p, ceil = CASES[case]
    g = torch.Generator("cuda").manual_seed(10 + case)
    x = torch.randn(b, c, h, w, device="cuda", generator=g).contiguous(memory_format=torch.channels_last)
    shift = torch.randn(c, device="cuda", generator=g) * 0.5
    out_hw = tuple(pool_out((h, w)[i], k[i], s[i], p[i], ceil) for i in (0, 1))
    for relu in (True, False):
        counters = torch.full((3,), 7, dtype=torch.int64, device="cuda")
        torch.full((b * c * out_hw[0] * out_hw[1],), float("nan"), device="cuda")   # poison
        y = backends["fp32"].maxpool(x, k, s, p, out_hw, shift, relu, counters, 1)
        pre = x + shift.view(1, c, 1, 1)
        ref = torch.nn.functional.max_pool2d(pre.relu() if relu else pre, k, s, p, ceil_mode=ceil)
        torch.testing.assert_close(y, ref, rtol=0, atol=0)
        zeros = int((ref == 0).sum())
        assert zeros > 0 or not relu
        assert counters.tolist() == [7, 7 + zeros, 7]
    for prec in ("bf16", "fp16"):   # no epilogue there: declined, the executor runs it apart
        xs = x.to(torch_dtype(torch, prec))
        assert backends[prec].maxpool(xs, k, s, p, out_hw, shift.to(xs.dtype), True, None, None) is None


AVG_CASES = [  # batch, channels, H, W, kernel, stride
    (1, 1792, 14, 14, (2, 2), (2, 2)),    # DenseNet-201's third transition
    (2, 24, 9, 8, (3, 2), (2, 2)),        # odd sizes: the last row and column left out, as torch's floor mode does
    (3, 8, 6, 6, (3, 3), (1, 1)),         # overlapping windows
]


@pytest.mark.parametrize("case", range(len(AVG_CASES)))
def test_avgpool_kernel_equals_torch_with_and_without_a_pre_activation(backends, case):
    """relu(x * scale[c] + shift[c]) on every value read, then the window's mean: torch's pool of the same
    pre-activation to FP32 rounding, zeros exactly where torch's are (a window of zeros), counted into the slot;
    without one, torch's average pool of x."""
    b, c, h, w, k, s = AVG_CASES[case]
    g = torch.Generator("cuda").manual_seed(20 + case)
    x = torch.randn(b, c, h, w, device="cuda", generator=g).contiguous(memory_format=torch.channels_last)
    scale = torch.rand(c, device="cuda", generator=g) + 0.5
    shift = torch.randn(c, device="cuda", generator=g) - 1.0   # most values below zero: windows of zeros
    out_hw = tuple(pool_out((h, w)[i], k[i], s[i], 0, False) for i in (0, 1))
    F = torch.nn.functional
    counters = torch.full((3,), 5, dtype=torch.int64, device="cuda")
    torch.full((b * c * out_hw[0] * out_hw[1],), float("nan"), device="cuda")   # poison
    y = backends["fp32"].avgpool(x, k, s, out_hw, scale, shift, True, counters, 2)
    ref = F.avg_pool2d((x.double() * scale.double().view(1, c, 1, 1) + shift.double().view(1, c, 1, 1)).relu(), k, s)
    assert y is not None and y.shape == ref.shape and y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y.double(), ref, rtol=1e-6, atol=1e-6)
    zeros = int((ref == 0).sum())
    assert 0 < zeros < ref.numel() and torch.equal(y == 0, ref == 0)
    assert counters.tolist() == [5, 5, 5 + zeros]
    torch.full((b * c * out_hw[0] * out_hw[1],), float("nan"), device="cuda")
    plain = backends["fp32"].avgpool(x, k, s, out_hw)
    torch.testing.assert_close(plain, F.avg_pool2d(x, k, s), rtol=1e-6, atol=1e-6)
    for prec in ("bf16", "fp16"):   # no average-pool kernel there: declined, torch pools
        assert backends[prec].avgpool(x.to(torch_dtype(torch, prec)), k, s, out_hw) is None
