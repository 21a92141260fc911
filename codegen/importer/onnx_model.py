"""ONNX model -> YAML network spec (+ a state_dict of its weights).

`import_onnx` walks the ONNX graph in its (topological) order and maps every supported operator onto a
spec node (docs/spec-format.md, "Importing an ONNX model"); Identity and Dropout disappear (their
consumers read their input), MatMul followed by the Add of a constant becomes one linear node with a
bias. Anything the spec cannot express is a `UserError` of one line,

    model.onnx: node '/features/Sigmoid' (Sigmoid): op not supported (supported: Conv, ...)

and then nothing is written: the spec and the weights go to temporary files next to their targets,
which are renamed only once everything succeeded (the spec parsed by `parse_spec`, the weights checked
against `codegen.spec.tensor_shapes`, what the runtime loads: `common.finish`, shared with the PyTorch
importer). `onnx` and `torch` are imported inside the functions.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from snn.codegen.errors import UserError
from snn.codegen.spec import pool_out

from .common import TORCH_MISSING, ImportResult, check_targets, finish, pair, spec_text, torch_available

ONNX_MISSING = "importing an ONNX model needs the onnx package: pip install onnx"

SUPPORTED = ("Conv", "BatchNormalization", "Relu", "Add", "Sum", "Concat", "MaxPool", "AveragePool",
             "GlobalAveragePool", "Flatten", "Reshape", "Gemm", "MatMul", "Identity", "Dropout", "Constant")

__all__ = ["ImportResult", "ONNX_MISSING", "TORCH_MISSING", "import_onnx"]


class _Fail(Exception):
    """(node name, op type, why): becomes the one-line UserError."""


def import_onnx(path: str | Path, out_spec: str | Path, out_weights: str | Path | None = None,
                name: str | None = None) -> ImportResult:
    """Convert the ONNX model at `path` into the spec `out_spec` and, if `out_weights` is given, the
    state_dict file `out_weights` (torch.save of float32 tensors keyed `<param>.weight`, ...), which
    `snn-run ... --weights` and `runtime.weights.load_file` read. `name`: the network's name (default:
    the model file's stem). Raises UserError (one line) on anything unsupported; nothing is written then."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise UserError(ONNX_MISSING) from None
    path, out_spec = Path(path), Path(out_spec)
    out_weights = Path(out_weights) if out_weights is not None else None
    if out_weights is not None and not torch_available():
        raise UserError(TORCH_MISSING)
    check_targets(out_spec, out_weights)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        model = onnx.load(str(path))
    except Exception as e:  # protobuf DecodeError and friends
        first = (str(e).splitlines() or [""])[0][:200]
        raise UserError(f"{path}: cannot read as an ONNX model ({type(e).__name__}: {first})") from None

    try:
        conv = _Converter(model.graph, numpy_helper, onnx.helper)
        conv.run()
    except _Fail as e:
        node, op, why = e.args
        raise UserError(f"{path}: node '{node}' ({op}): {why}") from None

    return finish(conv.dump(name or path.stem), path, conv.tensors, out_spec, out_weights)


# ---------------------------------------------------------------------------------------------------
# The conversion proper

class _Converter:
    def __init__(self, graph, numpy_helper, helper):
        self.g, self.nh, self.helper = graph, numpy_helper, helper
        self.consts: dict[str, Any] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.alias: dict[str, str] = {}            # ONNX tensor -> spec node (or the spec's input)
        self.shape: dict[str, tuple[int, ...]] = {}  # spec node -> per-image shape
        self.nodes: list[dict[str, Any]] = []
        self.by_name: dict[str, dict[str, Any]] = {}
        self.tensors: dict[str, Any] = {}           # state_dict: key -> float32 numpy array
        self.users: dict[str, int] = {}
        for n in graph.node:
            for x in n.input:
                if x:
                    self.users[x] = self.users.get(x, 0) + 1
        for o in graph.output:
            self.users[o.name] = self.users.get(o.name, 0) + 1
        counts: dict[str, int] = {}
        for n in graph.node:
            counts[n.name] = counts.get(n.name, 0) + 1
        self.unique_names = {s for s, k in counts.items() if s and k == 1}
        self.input_name = ""
        self.input_shape: tuple[int, int, int] = (0, 0, 0)
        self.output = ""

    # -- helpers ----------------------------------------------------------------------------------
    def label(self, n) -> str:
        return n.name or (n.output[0] if n.output else n.op_type)

    def fail(self, n, why: str):
        raise _Fail(self.label(n), n.op_type, why)

    def attrs(self, n) -> dict[str, Any]:
        out = {}
        for a in n.attribute:
            v = self.helper.get_attribute_value(a)
            out[a.name] = v.decode() if isinstance(v, bytes) else v
        return out

    def spec_name(self, n) -> str:
        base = n.name if n.name in self.unique_names else (n.output[0] if n.output and n.output[0] else n.op_type)
        name, i = base, 1
        while name in self.by_name or name == self.input_name:
            name, i = f"{base}_{i}", i + 1
        return name

    def src(self, n, i: int = 0) -> str:
        """The spec node that feeds input i of ONNX node n."""
        x = n.input[i] if i < len(n.input) else ""
        if not x:
            self.fail(n, f"input {i} is missing")
        if x in self.alias:
            return self.alias[x]
        if x in self.consts:
            self.fail(n, f"input '{x}' is a constant tensor; snn needs it to be computed from the image")
        self.fail(n, f"input '{x}' is not produced by any node")

    def const(self, n, i: int, what: str):
        x = n.input[i] if i < len(n.input) else ""
        if not x:
            self.fail(n, f"{what} is missing")
        if x not in self.consts:
            self.fail(n, f"{what} '{x}' is not an initializer (weights computed in the graph are not supported)")
        arr = self.consts[x]
        if arr.dtype.kind != "f":
            self.fail(n, f"{what} '{x}' has dtype {arr.dtype}, expected floating point")
        return arr.astype("float32")

    def unused_extra_outputs(self, n, what: str):
        for o in n.output[1:]:
            if o and self.users.get(o):
                self.fail(n, f"its {what} output '{o}' is used; only inference graphs are supported")

    def add(self, n, op: str, inputs: list[str], shape: tuple[int, ...], **fields) -> dict[str, Any]:
        if len(set(inputs)) != len(inputs):
            self.fail(n, "uses the same tensor twice as input; the spec needs distinct inputs")
        name = self.spec_name(n)
        node: dict[str, Any] = {"name": name, "op": op}
        if op in ("add", "concat"):
            node["inputs"] = list(inputs)
        else:
            node["input"] = inputs[0]
        node.update(fields)
        if op in ("conv", "batchnorm", "linear"):
            node["param"] = name
        self.nodes.append(node)
        self.by_name[name] = node
        self.shape[name] = shape
        for o in n.output[:1]:
            self.alias[o] = name
        return node

    def chw(self, n, x: str) -> tuple[int, int, int]:
        s = self.shape[x]
        if len(s) != 3:
            self.fail(n, f"needs an [N, C, H, W] input, but its input has per-image shape {list(s)}")
        return s  # type: ignore[return-value]

    def spatial(self, n, a: dict, kernel: tuple[int, int], hw: tuple[int, int]):
        """(stride, padding) from strides/pads/auto_pad/dilations, symmetric pads only."""
        if any(d != 1 for d in a.get("dilations", [1, 1])):
            self.fail(n, f"dilation {list(a['dilations'])} is not supported (only 1)")
        strides = tuple(a.get("strides", [1, 1]))
        if len(kernel) != 2 or len(strides) != 2:
            self.fail(n, "only 2-D operators are supported")
        auto = a.get("auto_pad", "NOTSET")
        if auto in ("NOTSET", ""):
            pads = list(a.get("pads", [0, 0, 0, 0]))
            if len(pads) != 4:
                self.fail(n, f"pads {pads}: expected 4 values")
            if pads[0] != pads[2] or pads[1] != pads[3]:
                self.fail(n, f"asymmetric pads {pads} (begin != end) are not supported")
            padding = (pads[0], pads[1])
        elif auto == "VALID":
            padding = (0, 0)
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            padding = []
            for size, k, s in zip(hw, kernel, strides):
                total = max((math.ceil(size / s) - 1) * s + k - size, 0)
                if total % 2:
                    self.fail(n, f"auto_pad {auto} pads {size} unevenly (total {total}); only symmetric pads are supported")
                padding.append(total // 2)
            padding = tuple(padding)
        else:
            self.fail(n, f"auto_pad {auto!r} is not supported")
        return strides, padding

    # -- the walk ---------------------------------------------------------------------------------
    def run(self):
        g = self.g
        inputs = [i for i in g.input if i.name not in self.consts]
        if len(inputs) != 1:
            raise _Fail(inputs[1].name if len(inputs) > 1 else "?", "graph input",
                        f"the model has {len(inputs)} inputs; snn needs exactly one image input")
        inp = inputs[0]
        self.input_name = inp.name
        self.input_shape = self.input_dims(inp)
        self.alias[inp.name] = inp.name
        self.shape[inp.name] = self.input_shape
        if len(g.output) != 1:
            raise _Fail(g.output[1].name if len(g.output) > 1 else "?", "graph output",
                        f"the model has {len(g.output)} outputs; snn needs exactly one")
        for n in g.node:
            handler = getattr(self, f"op_{n.op_type}", None)
            if n.domain not in ("", "ai.onnx") or handler is None:
                self.fail(n, f"op not supported (supported: {', '.join(SUPPORTED)})")
            handler(n, self.attrs(n))
        out = g.output[0].name
        if out not in self.alias or self.alias[out] == self.input_name:
            raise _Fail(out, "graph output", "the output is not computed by a supported node")
        self.output = self.alias[out]
        if not self.nodes:  # pragma: no cover - guarded above
            raise _Fail(out, "graph output", "the model has no operators")

    def input_dims(self, inp) -> tuple[int, int, int]:
        t = inp.type.tensor_type
        if not inp.type.HasField("tensor_type") or not t.HasField("shape"):
            raise _Fail(inp.name, "graph input", "the input has no static shape; snn needs [N, C, H, W]")
        dims = t.shape.dim
        if len(dims) != 4:
            raise _Fail(inp.name, "graph input", f"the input has {len(dims)} dimensions; snn needs [N, C, H, W]")
        out = []
        for label, d in zip(("channels", "height", "width"), dims[1:]):
            if not d.HasField("dim_value") or d.dim_value <= 0:
                sym = f" ('{d.dim_param}')" if d.HasField("dim_param") and d.dim_param else ""
                raise _Fail(inp.name, "graph input", f"dynamic {label}{sym}; snn needs a static [N, C, H, W] input "
                            "(N may be symbolic): export the model with a fixed input size")
            out.append(int(d.dim_value))
        return out[0], out[1], out[2]

    # -- operators --------------------------------------------------------------------------------
    def op_Constant(self, n, a):
        if "value" not in a:
            self.fail(n, "only Constant with a tensor 'value' is supported")
        self.consts[n.output[0]] = self.nh.to_array(a["value"])

    def op_Identity(self, n, a):
        x = n.input[0]
        if x in self.consts and x not in self.alias:
            self.consts[n.output[0]] = self.consts[x]
        else:
            self.alias[n.output[0]] = self.src(n)

    def op_Dropout(self, n, a):
        self.unused_extra_outputs(n, "mask")
        self.alias[n.output[0]] = self.src(n)

    def op_Conv(self, n, a):
        x = self.src(n)
        c, h, w = self.chw(n, x)
        wt = self.const(n, 1, "weight")
        if wt.ndim != 4:
            self.fail(n, f"weight has {wt.ndim} dimensions; only 2-D convolutions are supported")
        m, cg, r, s = wt.shape
        groups = int(a.get("group", 1))
        if cg * groups != c:
            self.fail(n, f"weight {list(wt.shape)} with group={groups} does not fit its {c}-channel input")
        kernel = tuple(a.get("kernel_shape", (r, s)))
        if kernel != (r, s):
            self.fail(n, f"kernel_shape {list(kernel)} differs from the weight's {r}x{s}")
        stride, padding = self.spatial(n, a, (r, s), (h, w))
        bias = len(n.input) > 2 and bool(n.input[2])
        b = self.const(n, 2, "bias") if bias else None
        if b is not None and b.shape != (m,):
            self.fail(n, f"bias has shape {list(b.shape)}, expected [{m}]")
        if h + 2 * padding[0] < r or w + 2 * padding[1] < s:
            self.fail(n, f"kernel {r}x{s} is larger than the padded input")
        p, q = (h + 2 * padding[0] - r) // stride[0] + 1, (w + 2 * padding[1] - s) // stride[1] + 1
        fields: dict[str, Any] = {"in_channels": c, "out_channels": int(m), "kernel": pair((int(r), int(s))),
                                  "stride": pair(stride), "padding": pair(padding)}
        if groups != 1:
            fields["groups"] = groups
        fields["bias"] = bias
        node = self.add(n, "conv", [x], (int(m), p, q), **fields)
        self.tensors[f"{node['param']}.weight"] = wt
        if b is not None:
            self.tensors[f"{node['param']}.bias"] = b

    def op_BatchNormalization(self, n, a):
        if a.get("training_mode", 0):
            self.fail(n, "training_mode=1 is not supported (inference only)")
        self.unused_extra_outputs(n, "running statistics")
        x = self.src(n)
        c, h, w = self.chw(n, x)
        arrays = {}
        for i, (what, key) in enumerate((("scale", "weight"), ("bias", "bias"), ("mean", "running_mean"),
                                         ("variance", "running_var")), 1):
            t = self.const(n, i, what)
            if t.shape != (c,):
                self.fail(n, f"{what} has shape {list(t.shape)}, expected [{c}]")
            arrays[key] = t
        # ONNX stores float attributes as float32: keep its shortest decimal form (1e-05, not 9.99999974e-06)
        eps = float(str(np.float32(a.get("epsilon", 1e-5))))
        if not eps > 0:
            self.fail(n, f"epsilon must be positive, got {eps}")
        node = self.add(n, "batchnorm", [x], (c, h, w), channels=c, eps=eps)
        for key, t in arrays.items():
            self.tensors[f"{node['param']}.{key}"] = t

    def op_Relu(self, n, a):
        x = self.src(n)
        self.add(n, "relu", [x], self.shape[x])

    def op_Add(self, n, a):
        consts = [i for i, x in enumerate(n.input) if x in self.consts and x not in self.alias]
        if consts:
            self.add_bias(n, consts)
            return
        self.op_Sum(n, a)

    def op_Sum(self, n, a):
        ins = [self.src(n, i) for i in range(len(n.input))]
        if len(ins) == 1:
            self.alias[n.output[0]] = ins[0]
            return
        for x in ins[1:]:
            if self.shape[x] != self.shape[ins[0]]:
                self.fail(n, f"adds per-image shapes {list(self.shape[ins[0]])} and {list(self.shape[x])}: "
                             "broadcasting is not supported")
        self.add(n, "add", ins, self.shape[ins[0]])

    def add_bias(self, n, const_idx: list[int]):
        """MatMul + Add(constant): the bias of the linear node the MatMul became."""
        if len(n.input) != 2 or len(const_idx) != 1:
            self.fail(n, "adding a constant tensor is supported only as the bias after a MatMul")
        x = self.src(n, 1 - const_idx[0])
        node = self.by_name.get(x)
        feeder = n.input[1 - const_idx[0]]
        if (node is None or node["op"] != "linear" or node.get("bias") or not node.get("_matmul")
                or self.users.get(feeder, 0) != 1):
            self.fail(n, "adding a constant tensor is supported only as the bias after a MatMul")
        b = self.const(n, const_idx[0], "bias")
        out_f = node["out_features"]
        if b.size != out_f or b.ndim > 2 or (b.ndim == 2 and b.shape[0] != 1):
            self.fail(n, f"bias has shape {list(b.shape)}, expected [{out_f}]")
        node["bias"] = True
        self.tensors[f"{node['param']}.bias"] = b.reshape(out_f)
        self.alias[n.output[0]] = x

    def op_Concat(self, n, a):
        ins = [self.src(n, i) for i in range(len(n.input))]
        shapes = [self.chw(n, x) for x in ins]
        axis = int(a.get("axis", 1))
        if axis not in (1, -3):
            self.fail(n, f"axis={axis} is not supported (only the channel axis 1)")
        if len(ins) == 1:
            self.alias[n.output[0]] = ins[0]
            return
        for x, s in zip(ins, shapes):
            if s[1:] != shapes[0][1:]:
                self.fail(n, f"concatenates spatial sizes {list(shapes[0][1:])} and {list(s[1:])}")
        self.add(n, "concat", ins, (sum(s[0] for s in shapes), *shapes[0][1:]))

    def pool(self, n, a, op: str):
        x = self.src(n)
        c, h, w = self.chw(n, x)
        kernel = tuple(int(k) for k in a.get("kernel_shape", ()))
        if len(kernel) != 2:
            self.fail(n, f"kernel_shape {list(kernel)}: only 2-D pooling is supported")
        stride, padding = self.spatial(n, a, kernel, (h, w))
        ceil = bool(a.get("ceil_mode", 0))
        if op == "avgpool" and not a.get("count_include_pad", 0) and any(padding):
            self.fail(n, "count_include_pad=0 with padding is not supported: the spec's avgpool counts the "
                         "padding, as PyTorch's default count_include_pad=True does")
        if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:
            self.fail(n, f"padding {list(padding)} is more than half the kernel {list(kernel)}")
        if h + 2 * padding[0] < kernel[0] or w + 2 * padding[1] < kernel[1]:
            self.fail(n, f"kernel {list(kernel)} is larger than the padded input")
        shape = (c, pool_out(h, kernel[0], stride[0], padding[0], ceil),
                 pool_out(w, kernel[1], stride[1], padding[1], ceil))
        fields: dict[str, Any] = {"kernel": pair(kernel), "stride": pair(stride), "padding": pair(padding)}
        if ceil:
            fields["ceil_mode"] = True
        self.add(n, op, [x], shape, **fields)

    def op_MaxPool(self, n, a):
        self.unused_extra_outputs(n, "indices")
        self.pool(n, a, "maxpool")

    def op_AveragePool(self, n, a):
        self.pool(n, a, "avgpool")

    def op_GlobalAveragePool(self, n, a):
        x = self.src(n)
        c, _, _ = self.chw(n, x)
        self.add(n, "global_avgpool", [x], (c, 1, 1))

    def flatten(self, n, x: str):
        s = self.shape[x]
        if len(s) == 1:
            self.alias[n.output[0]] = x
        else:
            self.add(n, "flatten", [x], (math.prod(s),))

    def op_Flatten(self, n, a):
        axis = int(a.get("axis", 1))
        if axis != 1:
            self.fail(n, f"axis={axis} is not supported (only 1: keep the batch, flatten the rest)")
        self.flatten(n, self.src(n))

    def op_Reshape(self, n, a):
        x = self.src(n)
        if "shape" in a:  # opset < 5
            target = [int(v) for v in a["shape"]]
        elif len(n.input) > 1 and n.input[1] in self.consts and n.input[1] not in self.alias:
            target = [int(v) for v in self.consts[n.input[1]].reshape(-1)]
        else:
            self.fail(n, "the target shape is computed at run time; only a constant [N, -1] reshape (flatten) "
                         "is supported: export with a fixed shape or use Flatten")
        feats = math.prod(self.shape[x])
        ok = len(target) == 2 and (target[1] in (-1, feats)) and (target[0] == 0 and not a.get("allowzero", 0)
                                                                  or target[0] == -1 and target[1] == feats
                                                                  or target[0] > 0 and target[1] == -1)
        if not ok:
            self.fail(n, f"reshape to {target} is not supported; only flattening to [N, -1] is "
                         f"(per-image shape {list(self.shape[x])})")
        self.flatten(n, x)

    def linear(self, n, x: str, wt, bias, matmul: bool = False):
        s = self.shape[x]
        out_f, in_f = wt.shape
        if len(s) != 1:
            self.fail(n, f"needs a flat [N, features] input, but its input has per-image shape {list(s)}; "
                         "add a Flatten before it")
        if s[0] != in_f:
            self.fail(n, f"weight takes {in_f} features, its input has {s[0]}")
        if bias is not None and (bias.size != out_f or bias.ndim > 2 or (bias.ndim == 2 and bias.shape[0] != 1)):
            self.fail(n, f"bias C has shape {list(bias.shape)}, expected [{out_f}] (broadcasting is not supported)")
        node = self.add(n, "linear", [x], (int(out_f),), in_features=int(in_f), out_features=int(out_f),
                        bias=bias is not None)
        if matmul:
            node["_matmul"] = True
        self.tensors[f"{node['param']}.weight"] = wt
        if bias is not None:
            self.tensors[f"{node['param']}.bias"] = bias.reshape(int(out_f))

    def op_Gemm(self, n, a):
        x = self.src(n)
        if int(a.get("transA", 0)):
            self.fail(n, "transA=1 is not supported")
        if float(a.get("alpha", 1.0)) != 1.0 or float(a.get("beta", 1.0)) != 1.0:
            self.fail(n, f"alpha={a.get('alpha', 1.0)}, beta={a.get('beta', 1.0)}: only alpha = beta = 1 is supported")
        wt = self.const(n, 1, "weight B")
        if wt.ndim != 2:
            self.fail(n, f"weight B has shape {list(wt.shape)}, expected 2-D")
        if not int(a.get("transB", 0)):
            wt = wt.T.copy()
        bias = self.const(n, 2, "bias C") if len(n.input) > 2 and n.input[2] else None
        self.linear(n, x, wt, bias)

    def op_MatMul(self, n, a):
        x = self.src(n)
        wt = self.const(n, 1, "weight")
        if wt.ndim != 2:
            self.fail(n, f"weight has shape {list(wt.shape)}, expected 2-D")
        self.linear(n, x, wt.T.copy(), None, matmul=True)

    # -- output -----------------------------------------------------------------------------------
    def dump(self, name: str) -> str:
        return spec_text(f"{name}: imported from ONNX by `snn-codegen import`", name, self.input_name,
                         self.input_shape, self.nodes, self.output)
