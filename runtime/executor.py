"""Run a lowered spec (runtime/lower.py's Program) in torch, with our kernels where they pay.

Dense convs, pooling, concat and the classifier run through torch (cuDNN), activations NHWC. The
backend runs the epilogues and the sparse steps: CudaBackend (runtime/kernels.py) on the GPU, or
TorchBackend below, its pure-torch emulation (the reference for the CPU tests). Per batch, each
eligible conv reads its input's zero counter on the host and dispatch.choose() picks the dense path
or one of its sparse kernels.

A backend provides
    epilogue(inp, scale, shift, residual, out, counters, slot, relu)   the snn_epilogue launch
    sparse_conv(name, kentry, inp, weight, out, workspace, shape, epi, in_epi=None, into=None, zero=None,
                zeroed=False)        a manifest kernel's steps, then its Epilogue (or None): fused into the
                                     launch where the kernel can (the hand-off's arguments: Executor.sparse_conv);
                                     out may be a concat buffer's channel slice (kernels.stores_slice)
    prepare_bias(channels)           make what a bias-only epilogue allocates (before a graph capture)
    prepare_accumulator(numel)       the same for the accumulator a split kernel adds into

The capture hook: runtime/graph.py records forward() into a CUDA graph through these members of
Executor, and no others:
    forward(x, capture=cap)          cap.counters: the int64 zero counters the pass counts into (zeroed
                                     first); cap.reads(op): called first at every op (a side branch whose
                                     value it reads joins there); cap.conv_op(op): then at every conv op,
                                     whatever its path (the graph may end there and the next begin);
                                     cap.conv(op, inp, epi, batch, counters, trace) -> output:
                                     called for every eligible conv in place of the host read and dispatch;
                                     cap.defer(op, inp, counters) -> bool: an epilogue op the graph leaves to
                                     the conv that reads it (its value is then inp)
    ops, eligible, slots, convs, conv_op(name)    the program, read only
    prepare_sparse(conv, kernel)     make everything a launch of `kernel` for `conv` uses (weight layout,
                                     workspace, the bias epilogue's constants), so that one recorded in a
                                     graph allocates nothing
    sparse_conv(op, kernel, inp, out, epi, in_epi, into, zero, zeroed)  launch `kernel` for the conv `op` into
                                     `out`, epilogue included, or hand it to the next conv (runtime/handoff.py)
    pair_conv(op, second, kernel, inp, out, out2, epi, epi2, in_epi, zero)  two 1x1 convs in one launch
                                     (runtime/pairs.py)
    stores_slice(kernel, epi, out)   whether that launch can write a concat buffer's channel slice as `out`
    dense_conv(op, inp, epi)         the cuDNN conv, then its epilogue (one snn_epilogue launch, in place); a conv
                                     the bundle has a direct kernel for (codegen/direct.py) runs that instead
    cache, device                    read; force: set to 'dense' for the warm-up pass, then restored;
    last_trace                       replaced after each replay by the graph's trace, read back on first access
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from snn.codegen.bundle import PRECISIONS  # the precisions a bundle records; the executor runs each
from snn.codegen.spec import Network, pool_out

from . import dispatch
from .cuda import import_torch, torch_dtype
from .errors import RunError
from .kernels import (ACCUMULATOR, OPTIONAL_ARGS, check_input_epilogue, input_pitch, launches_epilogue, output_pitch,
                      reads_nchw, stores_slice, takes_zero_range, uses_accumulator, workspace)
from .lower import Op, Program, from_layout, lower, to_layout


@dataclass
class Epilogue:
    """What follows a conv's sum: + bias[n] (+ residual), ReLU, zeros counted into counters[slot]. A kernel
    that fuses it (manifest "epilogue": true, emit.CONV_ARGS) applies it while storing; otherwise one
    snn_epilogue launch does, in place."""
    bias: object = None
    residual: object = None
    relu: bool = False
    counters: object = None
    slot: int | None = None

    @property
    def bias_only(self) -> bool:
        return self.residual is None and not self.relu and self.counters is None

    @property
    def empty(self) -> bool:
        return self.bias is None and self.bias_only


@dataclass
class InputEpilogue:
    """A producer's epilogue its consumer applies while staging (emit.IN_ARGS): relu(sum + shift[c] (+ residual)),
    the zeros counted into counters[slot], the result stored into `out` where given (emit.IN_RES_ARGS: for the
    value's later readers). runtime/graph.py moves it there, where the producer is a channel split; `sums` is
    the producer's raw sums, the consumer's real input. With `scale` (emit.IN_BN_ARGS) it is a pre-activation's
    batchnorm + ReLU instead, relu(x * scale[c] + shift[c]), and `sums` the batchnorm's input (a concat buffer's
    first channels, read in place)."""
    shift: object
    counters: object = None
    slot: int | None = None
    residual: object = None
    out: object = None
    sums: object = None
    scale: object = None


@dataclass
class LayerTrace:
    index: int
    name: str
    sparsity: float | None    # zeros / elements of the conv's input; None when not measured
    path: str                 # "dense" | "sparse"
    kernel: str | None
    ms: float | None          # time of the conv alone (synchronised; only with trace=True)


class TorchBackend:
    """Pure-torch epilogue and an emulation of the sparse steps (reference, and CPU tests).

    The emulation checks what the real steps need (buffers named by the steps exist, the weight
    arrives in the kernel's layout) and computes the conv with torch from the un-permuted weight.
    """

    def __init__(self, compute_dtype=None):
        self.torch = import_torch()
        self.compute_dtype = compute_dtype
        self.sparse_calls: list[str] = []

    def epilogue(self, inp, scale, shift, residual, out, counters, slot, relu):
        # torch ops straight into `out` (two passes for BN + ReLU, not three); inp may be a strided view, or out itself
        torch = self.torch
        c = inp.shape[1]
        if scale is not None and shift is not None:
            torch.addcmul(shift.view(1, c, 1, 1), inp, scale.view(1, c, 1, 1), out=out)
        elif scale is not None:
            torch.mul(inp, scale.view(1, c, 1, 1), out=out)
        elif shift is not None:
            torch.add(inp, shift.view(1, c, 1, 1), out=out)
        elif out is not inp:
            out.copy_(inp)
        if residual is not None:
            out.add_(residual)
        if relu:
            out.relu_()
        if counters is not None:
            counters[slot] += (out == 0).sum()

    def sparse_conv(self, name, kentry, inp, weight, out, workspace, shape, epi=None, in_epi=None, into=None,
                    zero=None, zeroed=False) -> bool:
        F = self.torch.nn.functional
        output_pitch(name, kentry, out, epi, into, shape)   # a channel slice only where the kernel could write one
        input_pitch(name, kentry, inp)                      # read at a pixel pitch only where the kernel could
        bufs = {"input": inp, "weight": weight, "output": out, ACCUMULATOR: out, **workspace}
        for step in kentry["steps"]:
            names = [step["buffer"]] if step["op"] == "memset" else step.get("args", [])
            for a in names:
                if a not in bufs and a not in OPTIONAL_ARGS:
                    raise RunError(f"kernel '{name}': step names unknown buffer '{a}'")
        check_input_epilogue(name, kentry, in_epi)
        if into is not None and not uses_accumulator(kentry):
            raise RunError(f"kernel '{name}' stores its own epilogue: it cannot leave it to its consumer")
        w = from_layout(weight, kentry.get("weight_layout", "NCRS"))
        x = self._staged(inp, in_epi)
        if self.compute_dtype is not None:
            x, w = x.to(self.compute_dtype), w.to(self.compute_dtype)
        y = F.conv2d(x, w, None, shape.stride, shape.padding)
        self.sparse_calls.append(name)
        # the range to clear, as the kernel (after reading its input) or its epilogue launch would
        cleared = zero is not None and (takes_zero_range(kentry) or (into is None and launches_epilogue(kentry, epi)))
        if cleared:
            zero.zero_()
        if into is not None:  # adds, like the kernel's atomics: a buffer not zeroed shows in the result
            into.add_(y)
            return cleared
        if zeroed and uses_accumulator(kentry) and (epi is None or epi.empty):
            out.add_(y)       # a split adding into an output said to be zero already, as the kernel would
            return cleared
        out.copy_(y)
        if epi is not None:
            self.epilogue(out, None, epi.bias, epi.residual, out, epi.counters, epi.slot, epi.relu)
        return cleared

    def _staged(self, x, in_epi):
        """x as a kernel stages it: with the producer's epilogue on its raw sums (or a batchnorm's), zeros counted."""
        if in_epi is None:
            return x
        c = x.shape[1]
        x = (x + in_epi.shift.view(1, c, 1, 1) if in_epi.scale is None
             else self.torch.addcmul(in_epi.shift.view(1, c, 1, 1), x, in_epi.scale.view(1, c, 1, 1)))
        if in_epi.residual is not None:
            x = x + in_epi.residual
        x = x.relu()
        if in_epi.counters is not None:
            in_epi.counters[in_epi.slot] += (x == 0).sum()
        if in_epi.out is not None:
            in_epi.out.copy_(x)
        return x

    def pair_conv(self, name, kentry, inp, weight, out, weight2, out2, epi, epi2, in_epi=None, zero=None) -> bool:
        """The emulation of a pair kernel (runtime/pairs.py): the first 1x1 conv with its epilogue into out, then
        the second on out with its own into out2; the zero range cleared."""
        F = self.torch.nn.functional
        if [a for s in kentry["steps"] for a in s.get("args", []) if a in ("weight2", "output2")] != ["weight2", "output2"]:
            raise RunError(f"kernel '{name}' is no pair kernel")
        out.copy_(F.conv2d(self._staged(inp, in_epi), from_layout(weight, "CRSN")))
        self.epilogue(out, None, epi.bias, epi.residual, out, epi.counters, epi.slot, epi.relu)
        out2.copy_(F.conv2d(out, from_layout(weight2, "CRSN")))
        self.epilogue(out2, None, epi2.bias, None, out2, epi2.counters, epi2.slot, epi2.relu)
        self.sparse_calls.append(name)
        if zero is not None:
            zero.zero_()
        return zero is not None

    def prepare_bias(self, channels):
        """Nothing to make ahead: this backend allocates as it goes (no CUDA graph records it)."""

    def prepare_accumulator(self, numel):
        """Nothing to make: the emulation computes into the output."""


class Executor:
    """One network lowered (its weights on the device) and run pass by pass.

    cache: a manifest.Cache (or None: everything dense). force: 'auto' | 'dense' | 'sparse'.
    precision: 'fp32' (exact: the sparse kernels and cuDNN with TF32 off), or 'bf16' / 'fp16': activations and
    weights in 16 bits, every conv dense on the tensor cores with its bias, residual and ReLU fused into its one
    launch, cuDNN's or the bundle's tensor-core kernel (dense_conv16) (force must be 'dense': the 16-bit sparse
    kernel lost to them on every measured layer, docs/performance.md); the epilogue ops (DenseNet's pre-activations) go to the backend, which launches the
    bundle's 16-bit epilogue kernel (CudaBackend) or runs torch ops (TorchBackend).
    """

    def __init__(self, net: Network, weights: dict, backend, cache=None, device="cuda",
                 force: str = "auto", trace: bool = False, precision: str = "fp32"):
        if force not in dispatch.FORCE_MODES:
            raise RunError(f"the path must be one of {', '.join(dispatch.FORCE_MODES)}, got {force!r}")
        if precision not in PRECISIONS:
            raise RunError(f"the precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if precision != "fp32" and force != "dense":
            raise RunError(f"{precision} runs every conv dense on the tensor cores: the sparse path needs fp32")
        torch = self.torch = import_torch()
        self.net, self.backend, self.cache, self.device = net, backend, cache, torch.device(device)
        self.force, self.trace = force, trace
        if self.device.type == "cuda":  # exact FP32: the sparse kernels are, cuDNN must be too
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        self.convs = {c.name: c for c in net.convs}
        self.precision = precision
        self.dtype = torch_dtype(torch, precision)
        self.program: Program = lower(net, weights, self.device, pool_epilogues=precision == "fp32")
        if precision != "fp32":
            _cast(self.program, self.dtype)
        self._layout_cache: dict[tuple[str, str], object] = {}
        self._pool_weights: dict[int, object] = {}   # pixels of a map -> 1 / pixels as a row (_adaptive_avgpool)
        self._as_given: dict[int, bool] = {}         # batch -> whether the image stays NCHW (_image_as_given)
        self.tensorcore = None  # 16 bits: runtime/tensorcore.TensorCoreConvs, where the bundle has such kernels
        self._workspace_cache: dict[str, dict] = {}
        self._last_trace: list[LayerTrace] | Callable[[], list[LayerTrace]] = []

    @property
    def last_trace(self) -> list[LayerTrace]:
        """Per conv layer of the last forward pass: measured input sparsity, path taken, kernel. After a graph
        replay it is read back from the device here, on first access, not by every call (a sync and a pass over
        the layers that a caller timing the network or not reading the trace should not pay)."""
        if callable(self._last_trace):
            self._last_trace = self._last_trace()
        return self._last_trace

    @last_trace.setter
    def last_trace(self, trace) -> None:
        """A list, or a function that makes it (runtime/graph.py: the replay's trace, read back when asked for)."""
        self._last_trace = trace

    # -- the program -------------------------------------------------------------------------------
    @property
    def ops(self) -> list[Op]:
        return self.program.ops

    @property
    def eligible(self) -> set[str]:
        return self.program.eligible

    @property
    def slots(self) -> dict[str, int]:
        return self.program.slots

    def conv_op(self, conv: str) -> Op:
        return self.program.conv_op(conv)

    # -- sparse kernels ----------------------------------------------------------------------------
    def _weight_in(self, conv: str, layout: str):
        key = (conv, layout)
        if key not in self._layout_cache:
            w = self.conv_op(conv).attrs["weight"]
            self._layout_cache[key] = to_layout(w.contiguous(), layout)
            if self.device.type == "cuda" and not self.torch.cuda.is_current_stream_capturing():
                # a sparse kernel copies its weights before it waits for its stream predecessor (programmatic
                # launch, runtime/cuda.py): they must not come from the kernel right before it
                self.torch.cuda.synchronize()
        return self._layout_cache[key]

    def _workspace(self, name: str, kentry: dict) -> dict:
        if name not in self._workspace_cache:
            self._workspace_cache[name] = workspace(self.torch, kentry.get("workspace"), self.device)
        return self._workspace_cache[name]

    def prepare_sparse(self, conv: str, kernel: str) -> None:
        """Make the weight layout and workspace of `kernel` for `conv`, and the constants of its bias
        epilogue, now: a sparse_conv recorded into a CUDA graph afterwards allocates nothing."""
        if self.conv_op(conv).attrs["bias"] is not None:
            self.backend.prepare_bias(self.convs[conv].shape.N)
        kentry = self.cache.kernel(kernel)
        self._weight_in(conv, kentry.get("weight_layout", "NCRS"))
        self._workspace(kernel, kentry)
        if uses_accumulator(kentry) and "batch" in kentry:
            s = self.convs[conv].shape
            self.backend.prepare_accumulator(int(kentry["batch"]) * s.N * s.P * s.Q)

    def sparse_conv(self, op: Op, kernel: str, inp, out, epi: Epilogue, in_epi: InputEpilogue | None = None,
                    into=None, zero=None, zeroed=False) -> bool:
        """The manifest steps of `kernel` for the conv `op`: NHWC `inp` -> NHWC `out`, epilogue included
        (one snn_epilogue launch after the steps where the kernel does not fuse it). runtime/graph.py's moved
        epilogues: in_epi (the producer's, applied to `inp` while staging), into (a zeroed buffer for this
        split's raw sums, its epilogue left to the consumer), zero (a range of the graph's sums buffer cleared by
        this conv's launches where they can: returns True then). out may be a concat buffer's channel slice where
        stores_slice(kernel, epi); zeroed: out holds zeros already (no fill before a split adds into it)."""
        kentry = self.cache.kernel(kernel)
        w = self._weight_in(op.name, kentry.get("weight_layout", "NCRS"))
        return self.backend.sparse_conv(kernel, kentry, inp, w, out, self._workspace(kernel, kentry),
                                        self.convs[op.name].shape, epi, in_epi, into, zero, zeroed)

    def pair_conv(self, op: Op, second: Op, kernel: str, inp, out, out2, epi: Epilogue, epi2: Epilogue,
                  in_epi: InputEpilogue | None = None, zero=None) -> bool:
        """The pair kernel `kernel` (codegen/pair.py) for the 1x1 convs `op` and `second`, which reads op's value:
        NHWC `inp` -> `out` (op's epilogue applied, in_epi its producer's while staging) -> `out2` (second's
        epilogue, no residual); zero: a range of the graph's sums buffer it clears (True then). runtime/pairs.py."""
        w = self._weight_in(op.name, "CRSN")
        w2 = self._weight_in(second.name, "CRSN")
        return self.backend.pair_conv(kernel, self.cache.kernel(kernel), inp, w, out, w2, out2, epi, epi2, in_epi,
                                      zero)

    def stores_slice(self, kernel: str, epi: Epilogue, out=None) -> bool:
        """Whether `kernel` with this epilogue writes a concat buffer's channel slice (`out`, where given) itself
        (kernels.stores_slice)."""
        return stores_slice(self.cache.kernel(kernel), epi, out)

    def dense_conv(self, op: Op, inp, epi: Epilogue):
        """cuDNN FP32 (NHWC out), then the epilogue in place (a bias alone goes into cuDNN's call); in 16 bits
        one fused cuDNN call (dense_conv16)."""
        if self.precision != "fp32":
            return self.dense_conv16(op, inp, epi)
        torch, F = self.torch, self.torch.nn.functional
        conv = self.convs[op.name]
        shape = conv.shape
        if epi.bias_only:
            return F.conv2d(inp, op.attrs["weight"], epi.bias, shape.stride, shape.padding, 1, conv.groups)
        y = F.conv2d(inp, op.attrs["weight"], None, shape.stride, shape.padding, 1, conv.groups)
        y = y.contiguous(memory_format=torch.channels_last)
        self.backend.epilogue(y, None, epi.bias, epi.residual, y, epi.counters, epi.slot, epi.relu)
        return y

    def dense_conv16(self, op: Op, inp, epi: Epilogue):
        """conv + bias (+ residual) + ReLU in one launch on the tensor cores, NHWC: the bundle's tensor-core kernel
        where runtime/tensorcore.py measured it faster for this layer and batch, else cuDNN's fused call; zeros
        counted with torch where a counter asks (--trace)."""
        inp = inp.contiguous(memory_format=self.torch.channels_last)
        kernel = self.tensorcore.kernel(op.name, inp.shape[0]) if self.tensorcore is not None else None
        y = self.tensorcore.run(op, inp, epi, kernel) if kernel else self.cudnn_conv16(op, inp, epi)
        if epi.counters is not None:
            epi.counters[epi.slot] += (y == 0).sum()
        return y

    def cudnn_conv16(self, op: Op, inp, epi: Epilogue):
        """cuDNN's fused graph (torch.cudnn_convolution_relu / _add_relu) on a channels_last input."""
        torch, F = self.torch, self.torch.nn.functional
        conv = self.convs[op.name]
        s, w = conv.shape, op.attrs["weight"]
        if epi.relu and epi.residual is not None:
            return torch.cudnn_convolution_add_relu(inp, w, epi.residual, 1.0, epi.bias, s.stride, s.padding,
                                                    (1, 1), conv.groups)
        if epi.relu:
            return torch.cudnn_convolution_relu(inp, w, epi.bias, s.stride, s.padding, (1, 1), conv.groups)
        y = F.conv2d(inp, w, epi.bias, s.stride, s.padding, 1, conv.groups)
        return y + epi.residual if epi.residual is not None else y

    def epilogue_of(self, op: Op, env: dict, counters) -> Epilogue:
        """The conv op's epilogue this pass: its fused bias + residual + ReLU + count, or its own bias."""
        ep = op.attrs.get("epilogue")
        if ep is None:
            return Epilogue(bias=op.attrs["bias"])
        res = env[ep["residual"]].contiguous(memory_format=self.torch.channels_last) if ep["residual"] else None
        slot = ep["slot"] if counters is not None else None
        return Epilogue(ep["shift"], res, ep["relu"], counters if slot is not None else None, slot)

    # -- run ---------------------------------------------------------------------------------------
    def _count_needed(self) -> bool:
        return self.force != "dense" or self.trace

    def forward(self, x, capture=None):
        """x: [B, 3, H, W] float32 on the device (any memory format) -> logits [B, classes].

        capture: a runtime.graph.Capture while a CUDA graph is being recorded: eligible convs then go
        to capture.conv (the device-side selector and conditional nodes) instead of the host read of
        the counter; the counters are capture.counters, zeroed inside the graph.
        """
        torch, F = self.torch, self.torch.nn.functional
        cl = torch.channels_last
        prog = self.program
        B = x.shape[0]
        count = self._count_needed() and bool(prog.slots)
        if capture is not None:
            counters = capture.counters
            if count:
                counters.zero_()  # a memset node: every replay starts from zero
        else:
            counters = torch.zeros(max(1, len(prog.slots)), dtype=torch.int64, device=self.device) if count else None
        x = x.to(self.device, self.dtype)
        env = {prog.input_name: x if self._image_as_given(B) else x.contiguous(memory_format=cl)}
        blocks: dict[str, object] = {}  # concat chain -> its buffer (lowering's _concat_chains)
        trace: list[LayerTrace] = []
        sync = self.trace and self.device.type == "cuda" and capture is None
        be = self.backend
        for i, op in enumerate(prog.ops):
            a = op.attrs
            if capture is not None:
                capture.reads(op)         # a value it reads from a side branch of the graph: joined first
            if op.kind == "conv":
                if capture is not None:
                    capture.conv_op(op)   # where the graph may end and the next begin
                epi = self.epilogue_of(op, env, counters if count else None)
                target = None
                if "concat" in a:  # its value's only reader is a concat chain: its slice of the buffer, where it can
                    c = a["concat"]
                    buf = self._chain_buffer(blocks, c["buffer"], c["total"], env[op.inputs[0]], op)
                    target = buf[:, c["offset"]:c["offset"] + self.convs[op.name].shape.N]
                env[op.name] = self._conv(op, env[op.inputs[0]], epi, B, counters, trace, sync, capture, target)
            elif op.kind == "alias":
                env[op.name] = env[op.inputs[0]]
            elif op.kind == "epilogue":
                inp = env[op.inputs[0]]
                if a["inplace"] or inp.dim() != 4:
                    inp = inp.contiguous(memory_format=cl)
                # else: as it is (a concat chain's view, its pixels wider apart than its channels: the backend reads it)
                slot = a.get("slot")
                cnt = counters if (count and slot is not None) else None
                if capture is not None and capture.defer(op, inp, cnt):
                    env[op.name] = inp   # its one reader, a conv, applies it as it stages inp (runtime/graph.py)
                else:
                    res = env[a["residual"]].contiguous(memory_format=cl) if a["residual"] else None
                    out = inp if a["inplace"] else torch.empty_like(inp, memory_format=cl)
                    be.epilogue(inp, a["scale"], a["shift"], res, out, cnt, slot, a["relu"])
                    env[op.name] = out
            elif op.kind == "count":
                if count:  # an in-place ReLU of a non-negative tensor: writes what it reads, counts zeros
                    t = env[op.inputs[0]].contiguous(memory_format=cl)
                    env[op.name] = t
                    be.epilogue(t, None, None, None, t, counters, a["slot"], True)
            elif op.kind == "relu":
                env[op.name] = torch.relu(env[op.inputs[0]])
            elif op.kind == "add":
                y = env[op.inputs[0]]
                for v in op.inputs[1:]:
                    y = y + env[v]
                env[op.name] = y
            elif op.kind in ("maxpool", "avgpool"):
                env[op.name] = self._pool(op.kind, env[op.inputs[0]], a, counters if count else None)
            elif op.kind == "adaptive_avgpool":
                env[op.name] = self._adaptive_avgpool(env[op.inputs[0]], a["size"])
            elif op.kind == "concat" and "buffer" in a:  # a chain's: its new inputs into the shared buffer
                parts = [env[v] for v in op.inputs]
                buf = self._chain_buffer(blocks, a["buffer"], a["total"], parts[0])
                for t, off in zip(parts, a["offsets"]):
                    dst = buf[:, off:off + t.shape[1]]
                    if t.data_ptr() != dst.data_ptr():   # not written in place by its conv
                        dst.copy_(t)
                env[op.name] = buf[:, :a["channels"]]
            elif op.kind == "concat":
                env[op.name] = torch.cat([env[v] for v in op.inputs], dim=1).contiguous(memory_format=cl)
            elif op.kind == "flatten":
                env[op.name] = torch.flatten(env[op.inputs[0]], 1)
            elif op.kind == "linear":
                env[op.name] = F.linear(env[op.inputs[0]], a["weight"], a["bias"])
            for v in prog.free_after[i]:
                env.pop(v, None)
        self.last_trace = trace
        return env[prog.output]

    def _image_as_given(self, B) -> bool:
        """Whether the image stays in the caller's layout: every op that reads it is a conv whose direct kernel reads
        it NCHW (codegen/direct.py) and will run (no sparse kernel to dispatch to), so no copy to channels-last."""
        if B not in self._as_given:
            prog = self.program
            readers = [op for op in prog.ops if prog.input_name in op.inputs]
            self._as_given[B] = self.cache is not None and bool(readers) and all(
                op.kind == "conv" and op.name not in prog.eligible
                and (k := self.cache.direct_kernel(op.name, B)) is not None
                and reads_nchw(self.cache.kernel(k)) for op in readers)
        return self._as_given[B]

    def _adaptive_avgpool(self, x, size):
        """A pool to one pixel in FP32 (the global pool before a classifier) as one small matmul of the map's pixels
        with a row of 1 / pixels: cuBLAS's gemv took 2.7 us at batch 1 against 4.5 for torch's mean reduction, which
        runs a channels-last map on a few blocks (docs/results/fusion/h200/ends/gap_probe.log). The row is made on
        first use, which the graph's eager warm-up is; a first use inside a capture pools as torch does."""
        torch = self.torch
        B, C, H, W = x.shape
        w = self._pool_weights.get(H * W)
        if size not in (1, (1, 1), [1, 1]) or x.dtype != torch.float32 or (
                w is None and x.is_cuda and torch.cuda.is_current_stream_capturing()):
            return torch.nn.functional.adaptive_avg_pool2d(x, size)
        if w is None:
            w = self._pool_weights[H * W] = torch.full((1, H * W), 1.0 / (H * W), device=x.device)
        x = x.contiguous(memory_format=torch.channels_last)   # its pixels x channels: a view
        return torch.matmul(w, x.permute(0, 2, 3, 1).reshape(B, H * W, C)).view(B, C, 1, 1)

    def _pool(self, kind: str, x, a: dict, counters=None):
        """A max or average pool (`kind`) on the bundle's kernel where the backend has one that takes x, else torch's.
        With attrs "epilogue" (lower._into_pools: a max pool's producer's shift + ReLU; lower._into_avgpools: an
        average pool's pre-activation batchnorm + ReLU; the pooled zeros counted into `slot`) the kernel applies it
        where it can; else the backend's epilogue launches run before the pool (and count after it)."""
        torch = self.torch
        ep = a.get("epilogue")
        slot = ep["slot"] if ep and counters is not None else None
        y = self._pool_kernel(kind, x, a, ep, counters if slot is not None else None, slot)
        if y is not None:
            return y
        cl = torch.channels_last
        if ep:   # x may be a concat chain's view (its pixels wider apart than its channels): the backend reads it
            t = torch.empty_like(x, memory_format=cl)
            self.backend.epilogue(x, ep.get("scale"), ep["shift"], None, t, None, None, ep["relu"])
            x = t
        y = self._pool_kernel(kind, x, a)
        if y is None:
            pool = torch.nn.functional.max_pool2d if kind == "maxpool" else torch.nn.functional.avg_pool2d
            y = pool(x, a["kernel"], a["stride"], a["padding"], ceil_mode=a["ceil_mode"]).contiguous(memory_format=cl)
        if slot is not None:   # an in-place ReLU of a non-negative tensor: writes what it reads, counts zeros
            self.backend.epilogue(y, None, None, None, y, counters, slot, True)
        return y

    def _pool_kernel(self, kind: str, x, a: dict, ep: dict | None = None, counters=None, slot=None):
        """The backend's pool kernel's output (the epilogue `ep` applied, zeros counted into counters[slot]), or
        None where it has none, or none that takes x (or the epilogue; an average pool: whole windows only)."""
        pool = getattr(self.backend, kind, None)   # CudaBackend's (TorchBackend has none)
        if pool is None or x.dim() != 4 or (kind == "avgpool" and (tuple(a["padding"]) != (0, 0) or a["ceil_mode"])):
            return None
        out_hw = tuple(pool_out(x.shape[2 + i], a["kernel"][i], a["stride"][i], a["padding"][i], a["ceil_mode"])
                       for i in (0, 1))
        if kind == "maxpool":
            return pool(x, a["kernel"], a["stride"], a["padding"], out_hw,
                        *((ep["shift"], ep["relu"], counters, slot) if ep else ()))
        return pool(x, a["kernel"], a["stride"], out_hw, *((ep["scale"], ep["shift"], ep["relu"], counters, slot)
                                                            if ep else ()))

    def _chain_buffer(self, blocks: dict, name: str, total: int, like, conv: Op | None = None):
        """A concat chain's buffer ([B, total, H, W] NHWC, like's batch and pixels), made by its first writer. Zeroed
        where a conv writes into it that may run sparse: a split then adds into its slice with no fill."""
        buf = blocks.get(name)
        if buf is None:
            torch = self.torch
            b, _, h, w = like.shape
            if conv is not None:   # the conv's output pixels, not its input's
                h, w = self.convs[conv.name].shape.P, self.convs[conv.name].shape.Q
            buf = blocks[name] = torch.empty((b, total, h, w), device=self.device, dtype=like.dtype,
                                             memory_format=torch.channels_last)
            if self._sparse_into_chains:
                buf.zero_()
        return buf

    @property
    def _sparse_into_chains(self) -> bool:
        """Some conv may add a split's sums into a chain buffer's slice (so it is made zeroed)."""
        return self.cache is not None and self.force != "dense" and any("concat" in op.attrs for op in self.ops)

    def _conv(self, op: Op, inp, epi: Epilogue, B, counters, trace, sync, capture, target=None):
        """The conv's output: into `target` (a concat buffer's zeroed channel slice) where its kernel can write it,
        else a new tensor (the concat op copies it in)."""
        torch = self.torch
        cl = torch.channels_last
        conv = self.convs[op.name]
        shape = conv.shape
        eligible = op.name in self.program.eligible
        if eligible and counters is not None and capture is not None:
            return capture.conv(op, inp, epi, B, counters, trace, target)
        sparsity = None
        if eligible and counters is not None:
            # host read of the counter: one small copy per layer (the graph path decides on the device)
            sparsity = int(counters[self.program.slots[op.inputs[0]]].item()) / inp.numel()
        kernel = None
        if eligible and self.cache is not None and sparsity is not None:
            kernel = dispatch.choose(self.cache.layer_entry(op.name, B), sparsity, self.force)
        direct = self.cache.direct_kernel(op.name, B) if kernel is None and self.cache is not None else None
        t0 = self._tick(sync)
        if direct is not None:  # the image's conv on the bundle's direct kernel (codegen/direct.py), not cuDNN's
            out = torch.empty((B, shape.N, shape.P, shape.Q), device=self.device, memory_format=cl)
            nchw = reads_nchw(self.cache.kernel(direct))
            self.sparse_conv(op, direct, inp.contiguous() if nchw else inp.contiguous(memory_format=cl), out, epi)
        elif kernel is None:
            out = self.dense_conv(op, inp, epi)
        else:
            inp = inp.contiguous(memory_format=cl)
            into = target is not None and self.stores_slice(kernel, epi, target)
            out = target if into else torch.empty((B, shape.N, shape.P, shape.Q), device=self.device, memory_format=cl)
            self.sparse_conv(op, kernel, inp, out, epi, zeroed=into)
        ms = self._tock(t0, sync) if self.trace else None
        trace.append(LayerTrace(conv.index, conv.name, sparsity, "sparse" if kernel else "dense", kernel or direct, ms))
        return out

    def _tick(self, sync):
        if sync:
            self.torch.cuda.synchronize()
        return time.perf_counter()

    def _tock(self, t0, sync):
        if sync:
            self.torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3


def _cast(prog: Program, dtype) -> None:
    """The program's weights, biases and epilogue vectors in `dtype` (16-bit precisions)."""
    for op in prog.ops:
        for attrs in (op.attrs, op.attrs.get("epilogue") or {}):
            for k in ("weight", "bias", "scale", "shift"):
                t = attrs.get(k)
                if t is not None and hasattr(t, "to"):
                    attrs[k] = t.to(dtype)


def apply_node(torch, n, v: list, p):
    """One spec node in plain torch, NCHW: its output from its inputs `v`; p(node, key) gives a tensor of
    the node's parameters. The interpreters (reference here, measure.inputs.forward) share it."""
    F = torch.nn.functional
    if n.op == "conv":
        return F.conv2d(v[0], p(n, "weight"), p(n, "bias") if n["bias"] else None, n["stride"], n["padding"],
                        1, n["groups"])
    if n.op == "batchnorm":
        return F.batch_norm(v[0], p(n, "running_mean"), p(n, "running_var"), p(n, "weight"), p(n, "bias"),
                            False, 0.0, n["eps"])
    if n.op == "relu":
        return torch.relu(v[0])
    if n.op in ("maxpool", "avgpool"):
        pool = F.max_pool2d if n.op == "maxpool" else F.avg_pool2d
        return pool(v[0], n["kernel"], n["stride"], n["padding"], ceil_mode=n["ceil_mode"])
    if n.op == "adaptive_avgpool":
        return F.adaptive_avg_pool2d(v[0], n["output_size"])
    if n.op == "global_avgpool":
        return F.adaptive_avg_pool2d(v[0], 1)
    if n.op == "add":
        y = v[0]
        for t in v[1:]:
            y = y + t
        return y
    if n.op == "concat":
        return torch.cat(v, 1)
    if n.op == "flatten":
        return torch.flatten(v[0], 1)
    if n.op == "linear":
        return F.linear(v[0], p(n, "weight"), p(n, "bias") if n["bias"] else None)
    raise RunError(f"op '{n.op}' unknown to the reference")  # pragma: no cover


def reference(net: Network, sd: dict, x, dtype=None, keep_all: bool = False, on_batchnorm=None):
    """The spec interpreted node by node in plain torch, NCHW, no folding, no fusion: the yardstick
    the executor is checked against (float64 on the CPU, or FP32 with TF32 off on the GPU)."""
    torch = import_torch()
    dtype = dtype or x.dtype
    p = lambda n, k: sd[f"{n.param}.{k}"].to(x.device, dtype)  # noqa: E731
    env = {net.input_name: x.to(dtype)}
    for n in net.nodes:
        v = [env[i] for i in n.inputs]
        if n.op == "batchnorm" and on_batchnorm is not None:
            on_batchnorm(n, v[0])
        env[n.name] = apply_node(torch, n, v, p)
    return env if keep_all else env[net.output]
