"""The 16-bit tensor-core conv kernel (codegen/tensorcore.py) against float64 on the same 16-bit inputs: every
tile shape, K split in and out of a cluster, strides, padding, a batch whose pixels end inside a tile, the
residual and the ReLU; outputs poisoned first. Its error must stay within 1.5x cuDNN's on the same inputs."""
import ctypes
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cuda.bindings.driver")

from snn.codegen import tensorcore as tc  # noqa: E402
from snn.codegen.cache import CubinCache  # noqa: E402
from snn.codegen.compile import Compiler  # noqa: E402
from snn.codegen.spec import ConvShape  # noqa: E402
from snn.runtime.cuda import Device  # noqa: E402

NVCC = shutil.which("nvcc")
CASES = [  # shape, batch, config, residual, relu
    (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), 1, tc.TcConfig(64, 64, 8, 9), False, True),
    (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), 1, tc.TcConfig(32, 32, 3, 24), False, True),
    (ConvShape(64, 256, 7, 9, 1, 1, (1, 1), (0, 0)), 3, tc.TcConfig(32, 64, 1, 2), True, True),
    (ConvShape(128, 64, 15, 13, 3, 3, (2, 2), (1, 1)), 2, tc.TcConfig(64, 32, 5, 8), False, False),
    (ConvShape(512, 128, 7, 7, 1, 1, (1, 1), (0, 0)), 1, tc.TcConfig(64, 64, 8, 2), True, True),
    # 64-channel chunks: a pipeline shorter than the block's chunks, a cluster, ragged M, stride 2, residual
    (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), 1, tc.TcConfig(64, 64, 8, 3, 64), False, True),
    (ConvShape(128, 64, 15, 13, 3, 3, (2, 2), (1, 1)), 2, tc.TcConfig(32, 64, 3, 3, 64), False, False),
    (ConvShape(64, 256, 7, 9, 1, 1, (1, 1), (0, 0)), 3, tc.TcConfig(64, 32, 1, 3, 64), True, True),
]


@pytest.fixture(scope="module")
def dev():
    return Device()


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_tensorcore_kernel_matches_float64(dev, tmp_path, precision, case):
    shape, b, cfg, res, relu = CASES[case]
    fn, src = tc.render(shape, b, cfg, precision)
    cubin = Compiler(CubinCache(tmp_path)).compile({fn: src}, "sm_90").records[fn]["cubin"]
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    g = torch.Generator("cuda").manual_seed(case)
    cl = torch.channels_last
    x = torch.relu(torch.randn(b, shape.C, shape.H, shape.W, device="cuda", generator=g)).to(dt).contiguous(memory_format=cl)
    w = (torch.randn(shape.N, shape.C, shape.R, shape.S, device="cuda", generator=g)
         / (shape.C * shape.R * shape.S) ** 0.5).to(dt).contiguous(memory_format=cl)
    bias = torch.randn(shape.N, device="cuda", generator=g)
    r = torch.randn(b, shape.N, shape.P, shape.Q, device="cuda", generator=g).to(dt).contiguous(memory_format=cl) if res else None
    ref = torch.nn.functional.conv2d(x.double(), w.double(), bias.double(), shape.stride, shape.padding)
    ref = ref + r.double() if res else ref
    ref = torch.relu(ref) if relu else ref
    out = torch.full((b, shape.N, shape.P, shape.Q), float("nan"), device="cuda", dtype=dt).contiguous(memory_format=cl)
    args = [(x.data_ptr(), ctypes.c_void_p), (w.data_ptr(), ctypes.c_void_p), (out.data_ptr(), ctypes.c_void_p),
            (bias.data_ptr(), ctypes.c_void_p), (r.data_ptr() if res else 0, ctypes.c_void_p), (int(relu), ctypes.c_int)]
    dev.launch(cubin, fn, tc.grid(shape, b, cfg), [tc.THREADS], tc.smem_bytes(cfg), args)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()   # every output written
    # cuDNN in the same precision, same inputs (its bias rounded to 16 bits, as the engine passes it)
    same = torch.nn.functional.conv2d(x, w, bias.to(dt), shape.stride, shape.padding)
    same = same + r if res else same
    same = torch.relu(same) if relu else same
    scale = ref.abs().max().item()
    err, err_same = ((out.double() - ref).abs().max().item() / scale, (same.double() - ref).abs().max().item() / scale)
    assert err <= 1.5 * err_same + 2e-3 * (precision == "bf16") + 3e-4, (err, err_same)
