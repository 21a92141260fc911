"""Run any spec end to end in torch, with our kernels where they pay.

The spec's DAG is compiled once into a flat list of ops:
- conv -> batchnorm pairs become one conv with folded weights and bias;
- the ReLU after a conv (or after conv + residual add) becomes one `snn_epilogue` launch that adds the
  bias (+ residual), applies the ReLU in place and counts the zeros it wrote;
- a batchnorm not after a conv (DenseNet's pre-activation norm1/norm/norm5) + ReLU becomes one
  epilogue with the BN's scale/shift, written to a new tensor (the input lives on in later concats);
- dense convs, pooling, concat and the classifier run through torch (cuDNN), activations NHWC.
Each conv whose input comes from a ReLU (possibly through maxpool/concat) is *eligible*: per batch,
dispatch.choose() picks the dense path or one of its sparse kernels from the measured sparsity.

The backend (CudaBackend in runtime/kernels.py, or TorchBackend here) runs the epilogue and the
sparse steps; everything else is plain torch.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from snn.codegen.spec import Network

from . import dispatch
from .cuda import import_torch
from .errors import RunError


@dataclass
class Op:
    kind: str                 # conv | epilogue | count | relu | add | maxpool | avgpool | adaptive_avgpool | concat | flatten | linear | bn
    name: str                 # the spec node whose value this op produces
    inputs: tuple[str, ...]   # value names read
    attrs: dict = field(default_factory=dict)


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
        torch = self.torch
        c = inp.shape[1]
        y = inp
        if scale is not None:
            y = y * scale.view(1, c, 1, 1)
        if shift is not None:
            y = y + shift.view(1, c, 1, 1)
        if residual is not None:
            y = y + residual
        if relu:
            y = torch.relu(y)
        out.copy_(y)
        if counters is not None:
            counters[slot] += (out == 0).sum()

    def sparse_conv(self, name, kentry, inp, weight, out, workspace, shape):
        F = self.torch.nn.functional
        bufs = {"input": inp, "weight": weight, "output": out, **workspace}
        for step in kentry["steps"]:
            names = [step["buffer"]] if step["op"] == "memset" else step.get("args", [])
            for a in names:
                if a not in bufs:
                    raise RunError(f"kernel '{name}': step names unknown buffer '{a}'")
        w = from_layout(weight, kentry.get("weight_layout", "NCRS"))
        x = inp
        if self.compute_dtype is not None:
            x, w = x.to(self.compute_dtype), w.to(self.compute_dtype)
        y = F.conv2d(x, w, None, shape.stride, shape.padding)
        out.copy_(y)
        self.sparse_calls.append(name)


def to_layout(w, layout: str):
    """torch's NCRS weight -> `layout` (a permutation of the letters N, C, R, S), contiguous."""
    if sorted(layout) != sorted("NCRS"):
        raise RunError(f"weight layout {layout!r} is not a permutation of N, C, R, S")
    return w.permute(*["NCRS".index(ch) for ch in layout]).contiguous()


def from_layout(w, layout: str):
    return w.permute(*[layout.index(ch) for ch in "NCRS"])


def bn_scale_shift(sd: dict, param: str, eps: float):
    torch = import_torch()
    scale = sd[f"{param}.weight"] / torch.sqrt(sd[f"{param}.running_var"] + eps)
    shift = sd[f"{param}.bias"] - sd[f"{param}.running_mean"] * scale
    return scale, shift


class Executor:
    """One network, its weights on the device, and the compiled op list.

    cache: a manifest.Cache (or None: everything dense). force: 'auto' | 'dense' | 'sparse'.
    """

    def __init__(self, net: Network, weights: dict, backend, cache=None, device="cuda",
                 force: str = "auto", trace: bool = False):
        if force not in dispatch.FORCE_MODES:
            raise RunError(f"--force must be one of {', '.join(dispatch.FORCE_MODES)}, got {force!r}")
        torch = self.torch = import_torch()
        self.net, self.backend, self.cache, self.device = net, backend, cache, torch.device(device)
        self.force, self.trace = force, trace
        if self.device.type == "cuda":  # exact FP32: the sparse kernels are, cuDNN must be too
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        self.convs = {c.name: c for c in net.convs}
        self._compile(weights)
        self._layout_cache: dict[tuple[str, str], object] = {}
        self._workspace_cache: dict[str, dict] = {}
        self.last_trace: list[LayerTrace] = []
        self._capture = None  # set only while forward() is being recorded into a CUDA graph

    # -- compile ---------------------------------------------------------------------------------
    def _compile(self, sd: dict):
        torch, net = self.torch, self.net
        dev = self.device
        cl = torch.channels_last
        nodes = {n.name: n for n in net.nodes}
        users: dict[str, list[str]] = {n.name: [] for n in net.nodes}
        users[net.input_name] = []
        for n in net.nodes:
            for i in n.inputs:
                users[i].append(n.name)
        users[net.output].append("<output>")

        def only_user(name, of):
            return users[name] == [of]

        # conv -> bn folding
        folded: dict[str, str] = {}      # conv -> bn
        alias: dict[str, str] = {}       # bn -> conv (the bn's value is the conv's, bias included)
        for n in net.nodes:
            if n.op == "batchnorm" and nodes.get(n.inputs[0]) is not None:
                src = nodes[n.inputs[0]]
                if src.op == "conv" and only_user(src.name, n.name):
                    folded[src.name], alias[n.name] = n.name, src.name

        weight, bias = {}, {}
        for c in net.convs:
            node = nodes[c.name]
            w = sd[f"{c.param}.weight"].double()
            b = sd[f"{c.param}.bias"].double() if node["bias"] else torch.zeros(node["out_channels"], dtype=torch.float64)
            if c.name in folded:
                bn = nodes[folded[c.name]]
                sd64 = {k: sd[f"{bn.param}.{k}"].double() for k in ("weight", "bias", "running_mean", "running_var")}
                scale, shift = bn_scale_shift({f"p.{k}": v for k, v in sd64.items()}, "p", bn["eps"])
                w = w * scale.view(-1, 1, 1, 1)
                b = b * scale + shift
            has_bias = bool(node["bias"]) or c.name in folded
            weight[c.name] = w.float().to(dev).contiguous(memory_format=cl)
            bias[c.name] = b.float().to(dev) if has_bias else None

        def conv_chain(v):
            """The conv whose value v is (v itself or its folded bn), if v has no other use."""
            c = alias.get(v, v)
            if nodes.get(c) is None or nodes[c].op != "conv":
                return None
            if c != v and not only_user(c, v):
                return None
            return c

        ops: list[Op] = []
        fused_bias: set[str] = set()
        value_of = lambda v: alias.get(v, v)  # noqa: E731
        for n in net.nodes:
            if n.op == "conv":
                ops.append(Op("conv", n.name, (value_of(n.inputs[0]),)))
            elif n.op == "batchnorm":
                if n.name in alias:
                    continue
                if len(users[n.name]) == 1 and nodes.get(users[n.name][0]) is not None \
                        and nodes[users[n.name][0]].op == "relu":
                    continue  # fused into its relu below
                s, t = bn_scale_shift(sd, n.param, n["eps"])
                ops.append(Op("epilogue", n.name, (value_of(n.inputs[0]),),
                              dict(scale=s.float().to(dev), shift=t.float().to(dev), residual=None,
                                   inplace=False, relu=False)))
            elif n.op == "relu":
                src = n.inputs[0]
                srcn = nodes.get(src)
                c = conv_chain(src) if only_user(src, n.name) else None
                if c is not None:                                   # conv (+bn) -> relu
                    fused_bias.add(c)
                    ops.append(Op("epilogue", n.name, (c,), dict(scale=None, shift=bias[c], residual=None,
                                                                 inplace=True, relu=True)))
                elif srcn is not None and srcn.op == "add" and len(srcn.inputs) == 2 and only_user(src, n.name):
                    main = None
                    for j, v in enumerate(srcn.inputs):
                        cj = conv_chain(v) if only_user(v, src) else None
                        if cj is not None:
                            main, other = cj, value_of(srcn.inputs[1 - j])
                            break
                    if main is not None:                            # conv (+bn) + residual -> relu
                        fused_bias.add(main)
                        ops.append(Op("epilogue", n.name, (main, other),
                                      dict(scale=None, shift=bias[main], residual=other, inplace=True, relu=True)))
                    else:
                        ops.append(Op("add", src, tuple(value_of(v) for v in srcn.inputs)))
                        ops.append(Op("epilogue", n.name, (src,), dict(scale=None, shift=None, residual=None,
                                                                       inplace=True, relu=True)))
                elif srcn is not None and srcn.op == "batchnorm" and src not in alias and only_user(src, n.name):
                    s, t = bn_scale_shift(sd, srcn.param, srcn["eps"])   # pre-activation bn -> relu
                    ops.append(Op("epilogue", n.name, (value_of(srcn.inputs[0]),),
                                  dict(scale=s.float().to(dev), shift=t.float().to(dev), residual=None,
                                       inplace=False, relu=True)))
                elif srcn is not None and srcn.op in ("conv", "batchnorm", "add") or src == net.input_name:
                    ops.append(Op("epilogue", n.name, (value_of(src),), dict(scale=None, shift=None, residual=None,
                                                                              inplace=False, relu=True)))
                else:
                    ops.append(Op("relu", n.name, (value_of(src),)))
            elif n.op == "add":
                if len(users[n.name]) == 1 and nodes.get(users[n.name][0]) is not None \
                        and nodes[users[n.name][0]].op == "relu" and len(n.inputs) == 2 \
                        and any(conv_chain(v) is not None and only_user(v, n.name) for v in n.inputs):
                    continue  # fused into its relu
                ops.append(Op("add", n.name, tuple(value_of(v) for v in n.inputs)))
            elif n.op in ("maxpool", "avgpool"):
                ops.append(Op(n.op, n.name, (value_of(n.inputs[0]),),
                              dict(kernel=n["kernel"], stride=n["stride"], padding=n["padding"], ceil_mode=n["ceil_mode"])))
            elif n.op == "adaptive_avgpool":
                ops.append(Op("adaptive_avgpool", n.name, (value_of(n.inputs[0]),), dict(size=n["output_size"])))
            elif n.op == "global_avgpool":
                ops.append(Op("adaptive_avgpool", n.name, (value_of(n.inputs[0]),), dict(size=(1, 1))))
            elif n.op == "concat":
                ops.append(Op("concat", n.name, tuple(value_of(v) for v in n.inputs)))
            elif n.op == "flatten":
                ops.append(Op("flatten", n.name, (value_of(n.inputs[0]),)))
            elif n.op == "linear":
                w = sd[f"{n.param}.weight"].float().to(dev)
                b = sd[f"{n.param}.bias"].float().to(dev) if n["bias"] else None
                ops.append(Op("linear", n.name, (value_of(n.inputs[0]),), dict(weight=w, bias=b)))
            else:  # pragma: no cover - spec.OPS and this list must agree
                raise RunError(f"{net.path}: node '{n.name}': op '{n.op}' is not supported by the runtime")

        for op in ops:
            if op.kind == "conv":
                op.attrs["bias"] = None if op.name in fused_bias else bias[op.name]
                op.attrs["weight"] = weight[op.name]

        # Which conv inputs are ReLU outputs (possibly through maxpool/concat): those convs may run sparse.
        relu_derived: set[str] = set()
        for op in ops:
            if (op.kind == "epilogue" and op.attrs["relu"]) or op.kind == "relu":
                relu_derived.add(op.name)
            elif op.kind == "maxpool" and op.inputs[0] in relu_derived:
                relu_derived.add(op.name)
            elif op.kind == "concat" and all(v in relu_derived for v in op.inputs):
                relu_derived.add(op.name)
        self.eligible = {op.name for op in ops if op.kind == "conv" and op.inputs[0] in relu_derived
                         and nodes[op.name]["groups"] == 1}

        # One zero counter per measured tensor: the epilogue that writes it counts; other ReLU-derived
        # inputs (after maxpool/concat) get a counting pass right after they are produced.
        slots: dict[str, int] = {}
        for op in ops:
            if op.kind == "conv" and op.name in self.eligible and op.inputs[0] not in slots:
                slots[op.inputs[0]] = len(slots)
        final: list[Op] = []
        for op in ops:
            final.append(op)
            if op.name in slots:
                if op.kind == "epilogue":
                    op.attrs["slot"] = slots[op.name]
                else:
                    final.append(Op("count", op.name, (op.name,), dict(slot=slots[op.name])))
        self.slots = slots
        self.ops = final

        # Free each value after its last reader.
        last: dict[str, int] = {}
        for i, op in enumerate(self.ops):
            for v in op.inputs:
                last[v] = i
        self._free_after = [[] for _ in self.ops]
        for v, i in last.items():
            if v != net.output:
                self._free_after[i].append(v)

    # -- run ---------------------------------------------------------------------------------------
    def _weight_in(self, conv: str, layout: str):
        key = (conv, layout)
        if key not in self._layout_cache:
            w = next(op.attrs["weight"] for op in self.ops if op.kind == "conv" and op.name == conv)
            self._layout_cache[key] = to_layout(w.contiguous(), layout)
        return self._layout_cache[key]

    def conv_op(self, conv: str) -> Op:
        return next(op for op in self.ops if op.kind == "conv" and op.name == conv)

    def _workspace(self, name: str, kentry: dict) -> dict:
        if name not in self._workspace_cache:
            self._workspace_cache[name] = {
                k: self.torch.empty(max(1, int(v)), dtype=self.torch.uint8, device=self.device)
                for k, v in (kentry.get("workspace") or {}).items()}
        return self._workspace_cache[name]

    def _count_needed(self) -> bool:
        return self.force != "dense" or self.trace

    def forward(self, x, capture=None):
        """x: [B, 3, H, W] float32 on the device (any memory format) -> logits [B, classes].

        capture: a runtime.graph.Capture while a CUDA graph is being recorded: eligible convs then
        get the device-side selector and conditional nodes instead of the host read of the counter.
        """
        torch, F = self.torch, self.torch.nn.functional
        cl = torch.channels_last
        B = x.shape[0]
        count = self._count_needed() and bool(self.slots)
        if capture is not None:
            counters = capture.counters
            if count:
                counters.zero_()  # a memset node: every replay starts from zero
        else:
            counters = torch.zeros(max(1, len(self.slots)), dtype=torch.int64, device=self.device) if count else None
        self._capture = capture
        env = {self.net.input_name: x.to(self.device, torch.float32).contiguous(memory_format=cl)}
        trace: list[LayerTrace] = []
        sync = self.trace and self.device.type == "cuda" and capture is None
        be = self.backend
        for i, op in enumerate(self.ops):
            a = op.attrs
            if op.kind == "conv":
                env[op.name] = self._conv(op, env[op.inputs[0]], B, counters, trace, sync)
            elif op.kind == "epilogue":
                inp = env[op.inputs[0]].contiguous(memory_format=cl)
                res = env[a["residual"]].contiguous(memory_format=cl) if a["residual"] else None
                out = inp if a["inplace"] else torch.empty_like(inp, memory_format=cl)
                slot = a.get("slot")
                be.epilogue(inp, a["scale"], a["shift"], res, out,
                            counters if (count and slot is not None) else None, slot, a["relu"])
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
            elif op.kind == "maxpool":
                env[op.name] = F.max_pool2d(env[op.inputs[0]], a["kernel"], a["stride"], a["padding"],
                                            ceil_mode=a["ceil_mode"])
            elif op.kind == "avgpool":
                env[op.name] = F.avg_pool2d(env[op.inputs[0]], a["kernel"], a["stride"], a["padding"],
                                            ceil_mode=a["ceil_mode"])
            elif op.kind == "adaptive_avgpool":
                env[op.name] = F.adaptive_avg_pool2d(env[op.inputs[0]], a["size"])
            elif op.kind == "concat":
                env[op.name] = torch.cat([env[v] for v in op.inputs], dim=1).contiguous(memory_format=cl)
            elif op.kind == "flatten":
                env[op.name] = torch.flatten(env[op.inputs[0]], 1)
            elif op.kind == "linear":
                env[op.name] = F.linear(env[op.inputs[0]], a["weight"], a["bias"])
            for v in self._free_after[i]:
                env.pop(v, None)
        self.last_trace = trace
        self._capture = None
        return env[self.net.output]

    def _conv(self, op: Op, inp, B, counters, trace, sync):
        torch, F = self.torch, self.torch.nn.functional
        cl = torch.channels_last
        conv = self.convs[op.name]
        shape = conv.shape
        eligible = op.name in self.eligible
        if eligible and counters is not None and self._capture is not None:
            return self._capture.conv(op, inp, B, counters, trace)
        sparsity = None
        if eligible and counters is not None:
            # host read of the counter: one small copy per layer (issue 8 moves this on the device)
            sparsity = int(counters[self.slots[op.inputs[0]]].item()) / inp.numel()
        kernel = None
        if eligible and self.cache is not None and sparsity is not None:
            kernel = dispatch.choose(self.cache.layer_entry(op.name, B), sparsity, self.force)
        t0 = self._tick(sync)
        if kernel is None:
            out = F.conv2d(inp, op.attrs["weight"], op.attrs["bias"], shape.stride, shape.padding)
        else:
            kentry = self.cache.kernel(kernel)
            inp = inp.contiguous(memory_format=cl)
            out = torch.empty((B, shape.N, shape.P, shape.Q), device=self.device, memory_format=cl)
            w = self._weight_in(op.name, kentry.get("weight_layout", "NCRS"))
            self.backend.sparse_conv(kernel, kentry, inp, w, out, self._workspace(kernel, kentry), shape)
            if op.attrs["bias"] is not None:
                self.backend.epilogue(out, None, op.attrs["bias"], None, out, None, None, False)
        ms = self._tock(t0, sync) if self.trace else None
        trace.append(LayerTrace(conv.index, conv.name, sparsity, "sparse" if kernel else "dense", kernel, ms))
        return out

    def _tick(self, sync):
        if sync:
            self.torch.cuda.synchronize()
        return time.perf_counter()

    def _tock(self, t0, sync):
        if sync:
            self.torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3


def reference(net: Network, sd: dict, x, dtype=None, keep_all: bool = False, on_batchnorm=None):
    """The spec interpreted node by node in plain torch, NCHW, no folding, no fusion: the yardstick
    the executor is checked against (float64 on the CPU, or FP32 with TF32 off on the GPU)."""
    torch = import_torch()
    F = torch.nn.functional
    dtype = dtype or x.dtype
    p = lambda n, k: sd[f"{n.param}.{k}"].to(x.device, dtype)  # noqa: E731
    env = {net.input_name: x.to(dtype)}
    for n in net.nodes:
        v = [env[i] for i in n.inputs]
        if n.op == "conv":
            y = F.conv2d(v[0], p(n, "weight"), p(n, "bias") if n["bias"] else None, n["stride"], n["padding"],
                         1, n["groups"])
        elif n.op == "batchnorm":
            if on_batchnorm is not None:
                on_batchnorm(n, v[0])
            y = F.batch_norm(v[0], p(n, "running_mean"), p(n, "running_var"), p(n, "weight"), p(n, "bias"),
                             False, 0.0, n["eps"])
        elif n.op == "relu":
            y = torch.relu(v[0])
        elif n.op == "maxpool":
            y = F.max_pool2d(v[0], n["kernel"], n["stride"], n["padding"], ceil_mode=n["ceil_mode"])
        elif n.op == "avgpool":
            y = F.avg_pool2d(v[0], n["kernel"], n["stride"], n["padding"], ceil_mode=n["ceil_mode"])
        elif n.op == "adaptive_avgpool":
            y = F.adaptive_avg_pool2d(v[0], n["output_size"])
        elif n.op == "global_avgpool":
            y = F.adaptive_avg_pool2d(v[0], 1)
        elif n.op == "add":
            y = v[0]
            for t in v[1:]:
                y = y + t
        elif n.op == "concat":
            y = torch.cat(v, 1)
        elif n.op == "flatten":
            y = torch.flatten(v[0], 1)
        elif n.op == "linear":
            y = F.linear(v[0], p(n, "weight"), p(n, "bias") if n["bias"] else None)
        else:  # pragma: no cover
            raise RunError(f"op '{n.op}' unknown to the reference")
        env[n.name] = y
    return env if keep_all else env[net.output]
