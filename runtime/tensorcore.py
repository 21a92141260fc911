"""16-bit convs on the bundle's tensor-core kernels (codegen/tensorcore.py) where they beat cuDNN's fused call.

At load, for each distinct (shape, residual, ReLU, batch) among the layers the bundle has tensor-core kernels for,
each of its kernels and cuDNN's fused call (Executor.cudnn_conv16) are timed on a random post-ReLU input with the
layer's own weights: ten back-to-back calls in a CUDA graph, as the network runs them (timing.graph_call_s). The
fastest is kept, cuDNN where no kernel beats it. SNN_TENSORCORE=0 keeps every conv on cuDNN.
"""
from __future__ import annotations

import ctypes
import os

from .executor import Epilogue

_VP, _I32 = ctypes.c_void_p, ctypes.c_int


def enabled() -> bool:
    return os.environ.get("SNN_TENSORCORE", "1") != "0"


def attach(executor, device, batches) -> "TensorCoreConvs | None":
    """The executor's 16-bit convs on the faster of cuDNN and the bundle's kernels, each measured now at each of
    `batches` (what snn.load does; None and every conv on cuDNN with SNN_TENSORCORE=0)."""
    if not enabled():
        return None
    tcc = TensorCoreConvs(executor, device)
    with executor.torch.inference_mode():
        for b in batches:
            tcc.choose(b)
    executor.tensorcore = tcc
    return tcc


def _bias(op):
    """What the conv adds per output channel: its fused epilogue's shift (BN folded), else its own bias, as
    Executor.epilogue_of reads them."""
    ep = op.attrs.get("epilogue")
    return ep["shift"] if ep is not None else op.attrs.get("bias")


class TensorCoreConvs:
    def __init__(self, executor, device):
        self.ex, self.dev, self.torch = executor, device, executor.torch
        self.choice: dict[tuple[str, int], str | None] = {}   # (conv, batch) -> kernel, None: cuDNN
        self.measured: list[dict] = []                         # per distinct layer and batch: every time
        self._weights: dict[str, tuple] = {}

    def kernels(self, conv: str, batch: int) -> list[str]:
        entry = self.ex.cache.layer_entry(conv, batch) if self.ex.cache is not None else None
        return list((entry or {}).get("tensorcore", []))

    def kernel(self, conv: str, batch: int) -> str | None:
        return self.choice.get((conv, batch))

    def _operands(self, op):
        """The layer's weights as the kernel reads them: [N][R][S][C] 16-bit, and its bias (shift) in FP32."""
        if op.name not in self._weights:
            torch = self.torch
            w = op.attrs["weight"].contiguous(memory_format=torch.channels_last)
            shift = _bias(op)
            self._weights[op.name] = (w, shift.float().contiguous() if shift is not None else None)
        return self._weights[op.name]

    def run(self, op, inp, epi: Epilogue, kernel: str):
        """The conv with its epilogue on `kernel`: a new channels_last tensor."""
        torch = self.torch
        conv = self.ex.convs[op.name]
        s = conv.shape
        w, bias = self._operands(op)
        out = torch.empty((inp.shape[0], s.N, s.P, s.Q), device=inp.device, dtype=inp.dtype,
                          memory_format=torch.channels_last)
        k = self.ex.cache.kernel(kernel)
        step = k["steps"][0]
        res = epi.residual
        args = [(inp.data_ptr(), _VP), (w.data_ptr(), _VP), (out.data_ptr(), _VP),
                (bias.data_ptr() if bias is not None else 0, _VP),
                (res.data_ptr() if res is not None else 0, _VP), (1 if epi.relu else 0, _I32)]
        self.dev.launch(k["cubin"], step["function"], step["grid"], step["block"], step["smem"], args,
                        pdl=bool(step.get("pdl")))
        return out

    def choose(self, batch: int) -> None:
        """Measure and fix the path of every conv with tensor-core kernels at `batch` (before a graph capture)."""
        from .measure.timing import graph_call_s
        torch = self.torch
        same: dict[tuple, str | None] = {}
        gen = torch.Generator(device="cuda").manual_seed(0)
        for op in self.ex.program.ops:
            if op.kind != "conv" or not (names := self.kernels(op.name, batch)):
                continue
            conv = self.ex.convs[op.name]
            s = conv.shape
            ep = op.attrs.get("epilogue")
            res, relu = bool(ep and ep["residual"]), bool(ep and ep["relu"])
            key = (s, res, relu, batch)
            if key not in same:
                x = torch.relu(torch.randn(batch, s.C, s.H, s.W, device="cuda", generator=gen)).to(self.ex.dtype)
                x = x.contiguous(memory_format=torch.channels_last)
                r = (torch.randn(batch, s.N, s.P, s.Q, device="cuda", generator=gen).to(self.ex.dtype)
                     .contiguous(memory_format=torch.channels_last) if res else None)
                epi = Epilogue(_bias(op), r, relu)
                times = {None: graph_call_s(torch, lambda: self.ex.cudnn_conv16(op, x, epi))}
                for n in names:
                    times[n] = graph_call_s(torch, lambda n=n: self.run(op, x, epi, n))
                same[key] = min(times, key=lambda n: times[n])
                self.measured.append({"layer": op.name, "batch": batch, "residual": res, "relu": relu,
                                      "us": {n or "cudnn": round(t * 1e6, 3) for n, t in times.items()},
                                      "chosen": same[key] or "cudnn"})
            self.choice[(op.name, batch)] = same[key]
