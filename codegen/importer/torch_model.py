"""PyTorch nn.Module or torchvision model name -> YAML network spec (+ a state_dict of its weights).

`import_torch` traces the module symbolically with torch.fx, in eval mode (no forward pass runs), and
maps every node of the graph that the output depends on onto spec nodes (docs/spec-format.md,
"Importing a PyTorch model"). A torchvision name builds that model with random weights (no download;
on the meta device when no weights file is wanted) and imports it the same way.

Names follow the module tree, so the state_dict maps onto the spec and `param` is the module's name:

- a module call is named after the module (`layer1.0.conv1`); a module called k > 1 times gives k nodes
  numbered 1..k in call order (ResNet's Bottleneck calls its one `relu` three times: `layer1.0.relu1`,
  `.relu2`, `.relu3`);
- a function or tensor method (`+`, torch.cat, F.relu, torch.flatten, ...) is named after its op's
  short name inside the module whose forward calls it (`layer1.0.add`, `features.denseblock1.cat`,
  `flatten` at the top), numbered the same way;
- Dropout, Identity and the like disappear (their consumers read their input); an in-place op
  (ReLU(inplace=True), relu_, add_) makes later readers of its input read its output, as in eager mode.

Anything the spec cannot express is a `UserError` of one line naming the module or node and its op,

    efficientnet_b0: module 'features.0.2' (SiLU): op not supported (supported modules: Conv2d, ...)

and nothing is written then (`common.finish`). torch and torchvision are imported inside the functions.
"""
from __future__ import annotations

import difflib
import math
import operator
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snn.codegen.errors import UserError
from snn.codegen.spec import pool_out

from .common import ImportResult, check_targets, finish, pair, spec_text

TORCH_MISSING = ("importing a PyTorch model needs torch (and torchvision for a model name): "
                 "pip install torch torchvision")
TORCHVISION_MISSING = "importing a torchvision model by name needs torchvision: pip install torchvision"

INPUT_NAME = "image"
DEFAULT_INPUT_SHAPE = (3, 224, 224)
# torchvision's input size where it is not 224x224
_INPUT_SHAPES = {"inception_v3": (3, 299, 299)}

SUPPORTED_MODULES = ("Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Flatten",
                     "Linear", "Dropout", "Dropout2d", "Identity")
SUPPORTED_FUNCTIONS = ("+, add, add_", "torch.cat", "relu, relu_", "flatten", "view/reshape to [N, -1]",
                       "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "mean over H and W", "dropout",
                       "contiguous", "size, shape")

# torchvision's DenseNet applies its last ReLU in forward (F.relu after `features`); it is named as the
# modules around it are (features.norm5 -> features.relu5), which the shipped specs and profiles use.
_RENAMES = {("torchvision.models.densenet", "DenseNet"): {"relu": "features.relu5"}}

_INPUT = 0  # the key of the spec's input among the spec nodes' keys
_REQ = object()  # a required argument in _Converter.bind


class _Fail(Exception):
    """(what, label, op, why): `what 'label' (op): why`, the one-line UserError."""


@dataclass(frozen=True)
class Converted:
    text: str       # the spec
    tensors: dict   # {state_dict key: tensor} for every tensor the spec names (meta tensors without weights)
    source: str     # what error messages start with: the torchvision name or the module's class name


def import_torch(model, out_spec: str | Path, out_weights: str | Path | None = None, name: str | None = None,
                 input_shape: tuple[int, int, int] | None = None) -> ImportResult:
    """Convert `model` (an nn.Module, or the name of a torchvision classification model such as
    "resnext50_32x4d") into the spec `out_spec` and, if `out_weights` is given, the state_dict file
    `out_weights` (torch.save of float32 tensors keyed `<param>.weight`, ...: the module's own weights,
    seeded random ones for a torchvision name), which `snn-run ... --weights` reads. `name`: the
    network's name (default: the torchvision name, or the module's class name). `input_shape`: the
    per-image (C, H, W) the spec is built for (default 3x224x224; 3x299x299 for inception_v3).
    Raises UserError (one line) on anything unsupported; nothing is written then."""
    out_spec = Path(out_spec)
    out_weights = Path(out_weights) if out_weights is not None else None
    _import_torch()
    check_targets(out_spec, out_weights)
    conv = convert(model, name, input_shape, weights=out_weights is not None)
    return finish(conv.text, conv.source, conv.tensors, out_spec, out_weights)


def convert(model, name: str | None = None, input_shape: tuple[int, int, int] | None = None,
            weights: bool = False) -> Converted:
    """The spec text (and tensors) `import_torch` writes, without writing anything. `weights`: the
    tensors must hold real values (a torchvision model is then built on the CPU, not the meta device)."""
    torch = _import_torch()
    if isinstance(model, str):
        module = _torchvision_model(model, weights)
        source = model
        what = f"torchvision's {model}"
        if input_shape is None:
            input_shape = _INPUT_SHAPES.get(model, DEFAULT_INPUT_SHAPE)
    elif isinstance(model, torch.nn.Module):
        module = model
        cls = type(model)
        source = cls.__name__
        what = f"PyTorch ({cls.__module__}.{cls.__qualname__}, torch.fx)"
    else:
        raise UserError(f"expected an nn.Module or a torchvision model name, got {type(model).__name__}")
    name = name or source
    input_shape = _check_shape(source, input_shape if input_shape is not None else DEFAULT_INPUT_SHAPE)
    cls = type(module)
    renames = _RENAMES.get((cls.__module__, cls.__name__), {})
    try:
        graph = _trace(torch, module)
        conv = _Converter(torch, module, graph, input_shape, renames)
        conv.run()
        nodes, output = conv.named()
        tensors = conv.tensors(weights)
    except _Fail as e:
        kind, label, op, why = e.args
        raise UserError(f"{source}: {kind} '{label}' ({op}): {why}") from None
    text = spec_text(f"{name}: imported from {what} by `snn-codegen import`", name, INPUT_NAME, input_shape,
                     nodes, output)
    return Converted(text, tensors, source)


def _import_torch():
    try:
        import torch
        import torch.fx  # noqa: F401
    except ImportError:
        raise UserError(TORCH_MISSING) from None
    return torch


def _check_shape(source: str, shape) -> tuple[int, int, int]:
    try:
        dims = tuple(shape)
    except TypeError:
        dims = ()
    if len(dims) != 3 or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
        raise UserError(f"{source}: input shape {shape!r}: expected (channels, height, width), positive integers")
    return dims  # type: ignore[return-value]


def torchvision_models() -> list[str]:
    """torchvision's classification models (the names `import_torch` takes; not all of them import)."""
    try:
        from torchvision import models
    except ImportError:
        raise UserError(TORCHVISION_MISSING) from None
    return list(models.list_models(module=models))


def _torchvision_model(name: str, weights: bool):
    import torch
    try:
        from torchvision import models
    except ImportError:
        raise UserError(TORCHVISION_MISSING) from None
    classifiers = models.list_models(module=models)
    if name not in classifiers:
        if name in models.list_models():
            raise UserError(f"{name}: torchvision's {name} is not an image classification model; snn imports "
                            "torchvision's classification CNNs (resnet50, densenet121, vgg16, ...)")
        close = difflib.get_close_matches(name, classifiers, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else " (see torchvision.models.list_models())"
        raise UserError(f"{name}: no such file, nor a torchvision classification model{hint}")
    # Without a weights file nothing reads the values: the meta device skips allocating and initialising
    # them. Some constructors compute on tensors (RegNet's widths), which meta cannot: those build on the CPU.
    for device in ([] if weights else ["meta"]) + ["cpu"]:
        try:
            with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torchvision's notes about its default initialisation
                torch.manual_seed(0)  # a weights file of random values is the same on every run
                with torch.device(device):
                    return models.get_model(name, weights=None)
        except Exception as e:
            if device == "cpu":
                first = (str(e).strip().splitlines() or [""])[0][:200]
                raise UserError(f"{name}: cannot build torchvision's {name} ({type(e).__name__}: {first})") from None


def _trace(torch, module):
    """The fx graph of module.forward in eval mode; a node's meta['snn_scope'] names the module whose
    forward created it."""
    import torch.fx as fx

    class Tracer(fx.Tracer):
        def __init__(self):
            super().__init__()
            self.scopes = [""]
            self.failed_in = None

        def call_module(self, m, forward, args, kwargs):
            path = self.path_of_module(m)
            self.scopes.append(path)
            try:
                return super().call_module(m, forward, args, kwargs)
            except Exception:
                if self.failed_in is None:  # the innermost module whose forward failed
                    self.failed_in = (path, type(m).__name__)
                raise
            finally:
                self.scopes.pop()

        def create_node(self, *args, **kwargs):
            node = super().create_node(*args, **kwargs)
            node.meta["snn_scope"] = self.scopes[-1]
            return node

    tracer = Tracer()
    modes = {m: m.training for m in module.modules()}
    module.eval()  # what inference runs: no dropout, BN on running statistics, no auxiliary heads
    try:
        return tracer.trace(module)
    except Exception as e:
        path, cls = tracer.failed_in or ("", type(module).__name__)
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise _Fail("module", path, cls, f"torch.fx cannot trace its forward ({type(e).__name__}: {first}); "
                    "snn needs a forward without data-dependent control flow") from None
    finally:
        for m, training in modes.items():
            m.training = training


# ---------------------------------------------------------------------------------------------------
# Values the walk carries from node to node

@dataclass(frozen=True)
class _Tensor:
    key: int    # a spec node (or _INPUT)


class _Batch:
    """The batch size (x.size(0), x.shape[0]): unknown here; allowed only where a flatten keeps the batch."""


_BATCH = _Batch()


@dataclass(frozen=True)
class _Sizes:
    key: int    # x.size() / x.shape of the tensor with this key


@dataclass(frozen=True)
class _Attr:
    target: str  # a parameter or buffer read directly in forward


def _qualname(target) -> str:
    try:
        from torch.fx.node import _get_qualified_name
        name = _get_qualified_name(target)
    except Exception:
        name = getattr(target, "__name__", repr(target))
    return name.replace("torch._C._nn.", "torch.nn.functional.").replace("_operator.", "operator.")


class _Converter:
    def __init__(self, torch, root, graph, input_shape, renames):
        self.torch, self.root, self.graph, self.renames = torch, root, graph, renames
        nn, F = torch.nn, torch.nn.functional
        self.env: dict[Any, Any] = {}
        self.redirect: dict[int, int] = {}      # in-place ops: input key -> the key readers see afterwards
        self.shape: dict[int, tuple[int, ...]] = {_INPUT: tuple(input_shape)}
        self.nodes: list[dict[str, Any]] = []   # in graph order; _key, _base, _own, _module, _inputs, fields
        self.kept: list[dict[str, Any]] = []    # the named nodes the output depends on (named())
        self.output = _INPUT
        self.modules = {nn.Conv2d: self.m_conv, nn.BatchNorm2d: self.m_batchnorm, nn.ReLU: self.m_relu,
                        nn.MaxPool2d: self.m_maxpool, nn.AvgPool2d: self.m_avgpool,
                        nn.AdaptiveAvgPool2d: self.m_adaptive, nn.Flatten: self.m_flatten, nn.Linear: self.m_linear,
                        nn.Dropout: self.m_identity, nn.Dropout2d: self.m_identity, nn.Identity: self.m_identity}
        self.functions = {operator.add: self.f_add, operator.iadd: self.f_iadd, torch.add: self.f_add,
                          operator.mul: self.f_arith, operator.sub: self.f_arith, operator.floordiv: self.f_arith,
                          torch.cat: self.f_cat, torch.concat: self.f_cat, F.relu: self.f_relu,
                          torch.relu: self.f_relu, torch.relu_: self.f_relu_, F.relu_: self.f_relu_,
                          torch.flatten: self.f_flatten, F.max_pool2d: self.f_maxpool, F.avg_pool2d: self.f_avgpool,
                          F.adaptive_avg_pool2d: self.f_adaptive, torch.mean: self.f_mean, F.dropout: self.f_dropout,
                          F.dropout2d: self.f_dropout, torch.dropout: self.f_torch_dropout,
                          getattr: self.f_getattr, operator.getitem: self.f_getitem}
        self.methods = {"relu": self.f_relu, "relu_": self.f_relu_, "add": self.f_add, "add_": self.f_add_,
                        "flatten": self.f_flatten, "view": self.f_view, "reshape": self.f_view,
                        "mean": self.f_mean, "contiguous": self.f_same, "clone": self.f_same, "size": self.f_size,
                        "dim": self.f_dim}
        self.n = None  # the fx node being converted (error messages, names)

    # -- errors and arguments ----------------------------------------------------------------------
    def fail(self, why: str):
        n = self.n
        if n.op == "call_module":
            raise _Fail("module", n.target, type(self.root.get_submodule(n.target)).__name__, why)
        if n.op == "call_method":
            raise _Fail("node", self.fbase(n.target), f"Tensor.{n.target}", why)
        if n.op == "call_function":
            raise _Fail("node", self.fbase(getattr(n.target, "__name__", "op")), _qualname(n.target), why)
        raise _Fail("node", n.name, n.op, why)

    def fbase(self, short: str) -> str:
        scope = self.n.meta.get("snn_scope", "")
        return f"{scope}.{short}" if scope else short

    def value(self, a):
        import torch.fx as fx
        if isinstance(a, fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            vals = [self.value(x) for x in a]
            return vals if isinstance(a, list) else tuple(vals)
        if isinstance(a, dict):
            return {k: self.value(v) for k, v in a.items()}
        return a

    def bind(self, args, kwargs, *sig) -> dict[str, Any]:
        """Python's own argument binding for a signature [(name, default or _REQ)], on resolved values."""
        if len(args) > len(sig):
            self.fail(f"takes at most {len(sig)} arguments, got {len(args)}")
        out = {k: a for (k, _), a in zip(sig, args)}
        names = {k for k, _ in sig}
        for k, v in kwargs.items():
            if k not in names or k in out:
                self.fail(f"argument {k!r} is not supported here")
            out[k] = v
        for k, d in sig:
            if k not in out:
                if d is _REQ:
                    self.fail(f"argument {k!r} is missing")
                out[k] = d
        return out

    def tensor(self, v, what: str = "its input") -> int:
        if isinstance(v, _Tensor):
            k = v.key
            while k in self.redirect:
                k = self.redirect[k]
            return k
        if isinstance(v, _Attr):
            self.fail(f"{what} is the parameter or buffer '{v.target}' read directly; snn needs feature maps "
                      "computed from the image (use nn.Conv2d, nn.Linear, nn.BatchNorm2d modules)")
        self.fail(f"{what} is {v!r}, not a feature map")

    def chw(self, k: int) -> tuple[int, int, int]:
        s = self.shape[k]
        if len(s) != 3:
            self.fail(f"needs an [N, C, H, W] input, but its input has per-image shape {list(s)}")
        return s  # type: ignore[return-value]

    def ints(self, v, what: str, n: int = 2) -> tuple[int, ...]:
        vals = (v,) * n if isinstance(v, int) and not isinstance(v, bool) else v
        if (not isinstance(vals, (list, tuple)) or len(vals) != n
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in vals)):
            self.fail(f"{what} {v!r}: expected an integer or {n} integers")
        return tuple(vals)

    def emit(self, op: str, inputs: list[int], shape: tuple[int, ...], short: str | None = None,
             module=None, **fields) -> int:
        """A spec node named after the module called (or `short` in the calling module's scope)."""
        if len(set(inputs)) != len(inputs):
            self.fail("uses the same tensor twice as input; the spec needs distinct inputs")
        key = len(self.nodes) + 1
        base = self.n.target if short is None else self.fbase(short)
        node = {"_key": key, "_base": self.renames.get(base, base), "_own": short is None, "_module": module,
                "op": op, "_inputs": list(inputs), **fields}
        if module is not None:
            node["_param"] = self.n.target
        self.nodes.append(node)
        self.shape[key] = tuple(int(d) for d in shape)
        return key

    # -- the walk ---------------------------------------------------------------------------------
    def live_nodes(self) -> list:
        """The nodes the output depends on, plus those that may change such a tensor in place."""
        nodes = list(self.graph.nodes)
        live = {n for n in nodes if n.op == "output"}

        def may_mutate(n) -> bool:
            """In place by PyTorch's conventions, or a call whose result nobody reads: it can matter only by
            changing its input, so it is imported (or refused) rather than silently dropped."""
            if n.op == "output":
                return False
            if n.op == "call_module" and getattr(self.root.get_submodule(n.target), "inplace", False):
                return True
            name = n.target if n.op == "call_method" else getattr(n.target, "__name__", "")
            return str(name).endswith("_") or n.kwargs.get("inplace") is True or not n.users

        changed = True
        while changed:
            changed = False
            for n in reversed(nodes):
                if n in live:
                    continue
                if any(u in live for u in n.users) or (
                        may_mutate(n) and any(a in live for a in n.all_input_nodes)):
                    live.add(n)
                    changed = True
        return [n for n in nodes if n in live]

    def run(self):
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        if not placeholders:
            raise _Fail("module", "", type(self.root).__name__, "forward takes no input; snn needs one image input")
        for n in self.live_nodes():
            self.n = n
            if n.op == "placeholder":
                if n is not placeholders[0]:
                    self.fail("forward takes a second input; snn needs exactly one image input")
                self.env[n] = _Tensor(_INPUT)
            elif n.op == "get_attr":
                self.env[n] = _Attr(n.target)
            elif n.op == "call_module":
                m = self.root.get_submodule(n.target)
                handler = self.modules.get(type(m))
                if handler is None:
                    self.fail(f"op not supported (supported modules: {', '.join(SUPPORTED_MODULES)}; "
                              f"functions: {', '.join(SUPPORTED_FUNCTIONS)})")
                args, kwargs = self.value(n.args), self.value(n.kwargs)
                if len(args) + len(kwargs) != 1:
                    self.fail("is called with more than one argument; snn supports one feature map in")
                self.env[n] = handler(m, self.tensor(args[0] if args else next(iter(kwargs.values()))))
            elif n.op in ("call_function", "call_method"):
                handler = (self.functions.get(n.target) if n.op == "call_function"
                           else self.methods.get(n.target))
                if handler is None:
                    self.fail(f"op not supported (supported modules: {', '.join(SUPPORTED_MODULES)}; "
                              f"functions: {', '.join(SUPPORTED_FUNCTIONS)})")
                self.env[n] = handler(*self.value(n.args), **self.value(n.kwargs))
            elif n.op == "output":
                out = self.value(n.args[0])
                if isinstance(out, (list, tuple)):
                    if len(out) != 1:
                        self.fail(f"forward returns {len(out)} values; snn needs exactly one output")
                    out = out[0]
                if isinstance(out, dict):
                    self.fail(f"forward returns a dict ({', '.join(map(str, out))}); snn needs one tensor")
                self.output = self.tensor(out, "the output")
                if self.output == _INPUT:
                    self.fail("forward returns its input unchanged; there is nothing to import")

    def named(self) -> tuple[list[dict[str, Any]], str]:
        """The spec nodes the output depends on, named (see the module docstring), and the output's name."""
        need, keep = {self.output}, []
        for node in reversed(self.nodes):
            if node["_key"] in need:
                keep.append(node)
                need.update(node["_inputs"])
        keep.reverse()
        counts = Counter(n["_base"] for n in keep)
        seen: Counter = Counter()
        wanted = []
        for n in keep:
            base = n["_base"]
            if counts[base] == 1:
                wanted.append(base)
            else:
                seen[base] += 1
                wanted.append(f"{base}{'_' if base[-1].isdigit() else ''}{seen[base]}")
        # a module called once keeps its own name over a numbered or functional name that happens to equal it
        names: dict[int, str] = {_INPUT: INPUT_NAME}
        taken = {INPUT_NAME}
        order = sorted(range(len(keep)), key=lambda i: (not keep[i]["_own"] or wanted[i] != keep[i]["_base"], i))
        for i in order:
            name, j = wanted[i], 2
            while name in taken:
                name, j = f"{wanted[i]}_{j}", j + 1
            taken.add(name)
            names[keep[i]["_key"]] = name
        out = []
        for n in keep:
            node: dict[str, Any] = {"name": names[n["_key"]], "op": n["op"]}
            ins = [names[k] for k in n["_inputs"]]
            if n["op"] in ("add", "concat"):
                node["inputs"] = ins
            else:
                node["input"] = ins[0]
            node.update({k: v for k, v in n.items() if not k.startswith("_") and k != "op"})
            if "_param" in n:
                node["param"] = n["_param"]
            node["_module"] = n["_module"]
            out.append(node)
        self.kept = out
        return out, names[self.output]

    def tensors(self, real: bool) -> dict:
        """{state_dict key: tensor} for the named nodes' modules (what tensor_shapes(spec) lists)."""
        keys = {"conv": ("weight", "bias"), "batchnorm": ("weight", "bias", "running_mean", "running_var"),
                "linear": ("weight", "bias")}
        out = {}
        for n in self.kept:
            m = n["_module"]
            for k in keys.get(n["op"], ()):
                t = getattr(m, k, None)
                if t is None:
                    continue
                if real and t.is_meta:
                    raise _Fail("module", n["param"], type(m).__name__, f"its {k} is on the meta device; "
                                "a weights file needs the module's real tensors")
                out[f"{n['param']}.{k}"] = t
        return out

    # -- modules ----------------------------------------------------------------------------------
    def m_identity(self, m, x):
        return _Tensor(x)

    def m_relu(self, m, x):
        return self.relu(x, m.inplace)

    def relu(self, x: int, inplace: bool, short: str | None = None) -> _Tensor:
        k = self.emit("relu", [x], self.shape[x], short)
        if inplace:  # later readers of the input read the ReLU's output, as they do in eager mode
            self.redirect[x] = k
        return _Tensor(k)

    def m_conv(self, m, x):
        c, h, w = self.chw(x)
        if m.in_channels != c:
            self.fail(f"takes {m.in_channels} input channels, its input has {c}")
        if tuple(m.dilation) != (1, 1):
            self.fail(f"dilation {list(m.dilation)} is not supported (only 1)")
        if m.padding_mode != "zeros":
            self.fail(f"padding_mode '{m.padding_mode}' is not supported (only 'zeros')")
        r, s = m.kernel_size
        if m.padding == "valid":
            padding = (0, 0)
        elif m.padding == "same":
            if r % 2 == 0 or s % 2 == 0:
                self.fail(f"padding='same' with the even kernel {r}x{s} pads unevenly; only symmetric padding "
                          "is supported")
            padding = ((r - 1) // 2, (s - 1) // 2)
        else:
            padding = tuple(m.padding)
        stride = tuple(m.stride)
        if h + 2 * padding[0] < r or w + 2 * padding[1] < s:
            self.fail(f"kernel {r}x{s} is larger than the padded input {h + 2 * padding[0]}x{w + 2 * padding[1]}")
        p, q = (h + 2 * padding[0] - r) // stride[0] + 1, (w + 2 * padding[1] - s) // stride[1] + 1
        fields: dict[str, Any] = {"in_channels": c, "out_channels": m.out_channels, "kernel": pair((r, s)),
                                  "stride": pair(stride), "padding": pair(padding)}
        if m.groups != 1:
            fields["groups"] = m.groups
        fields["bias"] = m.bias is not None
        return _Tensor(self.emit("conv", [x], (m.out_channels, p, q), module=m, **fields))

    def m_batchnorm(self, m, x):
        c, h, w = self.chw(x)
        if not m.affine or not m.track_running_stats:
            self.fail("needs affine=True and track_running_stats=True (the spec's batchnorm has a scale, a shift "
                      "and running statistics)")
        if m.num_features != c:
            self.fail(f"has {m.num_features} features, its input has {c} channels")
        fields = {"channels": c}
        if float(m.eps) != 1e-5:
            fields["eps"] = float(m.eps)
        return _Tensor(self.emit("batchnorm", [x], (c, h, w), module=m, **fields))

    def pool(self, op, x, kernel, stride, padding, ceil_mode, dilation=1, return_indices=False,
             count_include_pad=True, divisor_override=None, short=None) -> _Tensor:
        c, h, w = self.chw(x)
        k = self.ints(kernel, "kernel_size")
        s = k if stride is None or stride == [] or stride == () else self.ints(stride, "stride")
        p = self.ints(padding, "padding")
        if self.ints(dilation, "dilation") != (1, 1):
            self.fail(f"dilation {dilation!r} is not supported (only 1)")
        if return_indices:
            self.fail("return_indices=True is not supported")
        if divisor_override is not None:
            self.fail("divisor_override is not supported")
        if op == "avgpool" and not count_include_pad and any(p):
            self.fail("count_include_pad=False with padding is not supported: the spec's avgpool counts the "
                      "padding, as PyTorch's default count_include_pad=True does")
        if p[0] > k[0] // 2 or p[1] > k[1] // 2:
            self.fail(f"padding {list(p)} is more than half the kernel {list(k)}")
        if h + 2 * p[0] < k[0] or w + 2 * p[1] < k[1]:
            self.fail(f"kernel {list(k)} is larger than the padded input {h + 2 * p[0]}x{w + 2 * p[1]}")
        shape = (c, pool_out(h, k[0], s[0], p[0], bool(ceil_mode)), pool_out(w, k[1], s[1], p[1], bool(ceil_mode)))
        fields: dict[str, Any] = {"kernel": pair(k), "stride": pair(s)}
        if any(p):
            fields["padding"] = pair(p)
        if ceil_mode:
            fields["ceil_mode"] = True
        return _Tensor(self.emit(op, [x], shape, short, **fields))

    def m_maxpool(self, m, x):
        return self.pool("maxpool", x, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.dilation, m.return_indices)

    def m_avgpool(self, m, x):
        return self.pool("avgpool", x, m.kernel_size, m.stride, m.padding, m.ceil_mode,
                         count_include_pad=m.count_include_pad, divisor_override=m.divisor_override)

    def adaptive(self, x, output_size, short=None) -> _Tensor:
        c, h, w = self.chw(x)
        size = (output_size, output_size) if not isinstance(output_size, (list, tuple)) else tuple(output_size)
        if len(size) != 2:
            self.fail(f"output_size {output_size!r}: expected an integer or 2 values")
        size = tuple(hw if o is None else o for o, hw in zip(size, (h, w)))  # None keeps that input size
        size = self.ints(size, "output_size")
        if size == (1, 1):
            return _Tensor(self.emit("global_avgpool", [x], (c, 1, 1), short))
        if min(size) < 1:
            self.fail(f"output_size {list(size)} must be positive")
        return _Tensor(self.emit("adaptive_avgpool", [x], (c, *size), short, output_size=pair(size)))

    def m_adaptive(self, m, x):
        return self.adaptive(x, m.output_size)

    def flatten(self, x: int, start_dim, end_dim, short=None) -> _Tensor:
        """torch.flatten(x, start_dim, end_dim) on [N, ...]: only [N, everything else] is a spec flatten."""
        rank = len(self.shape[x]) + 1
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in (start_dim, end_dim)):
            self.fail(f"start_dim/end_dim {start_dim!r}, {end_dim!r}: expected integers")
        if not (-rank <= start_dim < rank and -rank <= end_dim < rank):
            self.fail(f"start_dim {start_dim} / end_dim {end_dim} out of range for a {rank}-D input")
        if start_dim % rank != 1 or end_dim % rank != rank - 1:
            self.fail(f"flattens dims {start_dim}..{end_dim} of a {rank}-D input; only flattening all but the "
                      "batch (start_dim=1, end_dim=-1) is supported")
        if rank == 2:
            return _Tensor(x)
        return _Tensor(self.emit("flatten", [x], (math.prod(self.shape[x]),), short))

    def m_flatten(self, m, x):
        return self.flatten(x, m.start_dim, m.end_dim)

    def m_linear(self, m, x):
        s = self.shape[x]
        if len(s) != 1:
            self.fail(f"needs a flat [N, features] input, but its input has per-image shape {list(s)}; "
                      "flatten it first")
        if s[0] != m.in_features:
            self.fail(f"takes {m.in_features} features, its input has {s[0]}")
        fields: dict[str, Any] = {"in_features": m.in_features, "out_features": m.out_features}
        if m.bias is None:
            fields["bias"] = False
        return _Tensor(self.emit("linear", [x], (m.out_features,), module=m, **fields))

    # -- functions and tensor methods --------------------------------------------------------------
    def f_same(self, x, *args, **kwargs):
        return _Tensor(self.tensor(x))

    def f_relu(self, x, *args, **kwargs):
        a = self.bind((x, *args), kwargs, ("input", _REQ), ("inplace", False))
        return self.relu(self.tensor(a["input"]), bool(a["inplace"]), "relu")

    def f_relu_(self, x):
        return self.relu(self.tensor(x), True, "relu")

    def add(self, a, b, alpha, inplace: bool) -> _Tensor:
        if not isinstance(a, _Tensor) or not isinstance(b, _Tensor):
            self.fail("adds a constant; only the sum of two feature maps (a residual) is supported")
        if alpha != 1:
            self.fail(f"alpha={alpha!r} is not supported (only 1)")
        x, y = self.tensor(a), self.tensor(b)
        if self.shape[x] != self.shape[y]:
            self.fail(f"adds per-image shapes {list(self.shape[x])} and {list(self.shape[y])}: broadcasting is "
                      "not supported")
        k = self.emit("add", [x, y], self.shape[x], "add")
        if inplace:
            self.redirect[x] = k
        return _Tensor(k)

    def arith(self, a, b, op):
        """Size arithmetic on plain integers (x.size(1) * 2); feature maps go through add."""
        if any(isinstance(v, (_Tensor, _Attr)) for v in (a, b)):
            return None
        if a is _BATCH or b is _BATCH:
            self.fail("computes with the batch size; only x.view(x.size(0), -1) style flattening may use it")
        return op(a, b)

    def f_add(self, a, b=_REQ, *args, **kwargs):
        num = self.arith(a, b, operator.add) if not args and not kwargs else None
        if num is not None:
            return num
        p = self.bind((a, b, *args), kwargs, ("input", _REQ), ("other", _REQ), ("alpha", 1))
        return self.add(p["input"], p["other"], p["alpha"], False)

    def f_iadd(self, a, b):
        num = self.arith(a, b, operator.add)
        return num if num is not None else self.add(a, b, 1, True)

    def f_add_(self, a, b=_REQ, *args, **kwargs):
        p = self.bind((a, b, *args), kwargs, ("input", _REQ), ("other", _REQ), ("alpha", 1))
        return self.add(p["input"], p["other"], p["alpha"], True)

    def f_arith(self, a, b):
        num = self.arith(a, b, self.n.target)
        if num is None:
            self.fail("op not supported on feature maps (supported functions: " + ", ".join(SUPPORTED_FUNCTIONS) + ")")
        return num

    def f_cat(self, *args, **kwargs):
        p = self.bind(args, kwargs, ("tensors", _REQ), ("dim", 0))
        tensors = p["tensors"]
        if not isinstance(tensors, (list, tuple)) or not tensors:
            self.fail("expects a list of feature maps")
        ins = [self.tensor(t, "an input") for t in tensors]
        shapes = [self.chw(x) for x in ins]
        if p["dim"] not in (1, -3):
            self.fail(f"dim={p['dim']!r} is not supported (only the channel dim 1)")
        if len(ins) == 1:
            return _Tensor(ins[0])
        for s in shapes:
            if s[1:] != shapes[0][1:]:
                self.fail(f"concatenates spatial sizes {list(shapes[0][1:])} and {list(s[1:])}")
        return _Tensor(self.emit("concat", ins, (sum(s[0] for s in shapes), *shapes[0][1:]), "cat"))

    def f_flatten(self, *args, **kwargs):
        p = self.bind(args, kwargs, ("input", _REQ), ("start_dim", 0), ("end_dim", -1))
        return self.flatten(self.tensor(p["input"]), p["start_dim"], p["end_dim"], "flatten")

    def f_view(self, x, *shape, **kwargs):
        x = self.tensor(x)
        if kwargs:
            self.fail(f"argument {next(iter(kwargs))!r} is not supported here")
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = tuple(shape[0])
        feats = math.prod(self.shape[x])
        ok = len(shape) == 2 and ((shape[0] is _BATCH and shape[1] in (-1, feats))
                                  or (shape[0] == -1 and shape[1] == feats))
        if not ok:
            shown = ["N" if d is _BATCH else d for d in shape]
            self.fail(f"reshapes to {shown}; only flattening to [N, -1] is supported (x.flatten(1), "
                      f"x.view(x.size(0), -1); per-image shape {list(self.shape[x])})")
        if len(self.shape[x]) == 1:
            return _Tensor(x)
        return _Tensor(self.emit("flatten", [x], (feats,), "flatten"))

    def f_maxpool(self, *args, **kwargs):
        p = self.bind(args, kwargs, ("input", _REQ), ("kernel_size", _REQ), ("stride", None), ("padding", 0),
                      ("dilation", 1), ("ceil_mode", False), ("return_indices", False))
        return self.pool("maxpool", self.tensor(p["input"]), p["kernel_size"], p["stride"], p["padding"],
                         p["ceil_mode"], p["dilation"], p["return_indices"], short="maxpool")

    def f_avgpool(self, *args, **kwargs):
        p = self.bind(args, kwargs, ("input", _REQ), ("kernel_size", _REQ), ("stride", None), ("padding", 0),
                      ("ceil_mode", False), ("count_include_pad", True), ("divisor_override", None))
        return self.pool("avgpool", self.tensor(p["input"]), p["kernel_size"], p["stride"], p["padding"],
                         p["ceil_mode"], count_include_pad=p["count_include_pad"],
                         divisor_override=p["divisor_override"], short="avgpool")

    def f_adaptive(self, *args, **kwargs):
        p = self.bind(args, kwargs, ("input", _REQ), ("output_size", _REQ))
        return self.adaptive(self.tensor(p["input"]), p["output_size"], "avgpool")

    def f_mean(self, *args, **kwargs):
        """x.mean((2, 3)): global average pooling (then a flatten unless keepdim)."""
        p = self.bind(args, kwargs, ("input", _REQ), ("dim", None), ("keepdim", False), ("dtype", None))
        x = self.tensor(p["input"])
        rank = len(self.shape[x]) + 1
        dims = p["dim"] if isinstance(p["dim"], (list, tuple)) else [p["dim"]]
        if (rank != 4 or p["dtype"] is not None
                or not all(isinstance(d, int) and -rank <= d < rank for d in dims)
                or sorted(d % rank for d in dims) != [2, 3]):
            self.fail(f"mean over dim={p['dim']!r}; only the mean over H and W of [N, C, H, W] (global average "
                      "pooling) is supported")
        y = self.adaptive(x, 1, "avgpool")
        return y if p["keepdim"] else self.flatten(y.key, 1, -1, "flatten")

    def f_dropout(self, *args, **kwargs):
        p = self.bind(args, kwargs, ("input", _REQ), ("p", 0.5), ("training", True), ("inplace", False))
        return self.dropout(p["input"], p["p"], p["training"])

    def f_torch_dropout(self, *args, **kwargs):
        p = self.bind(args, kwargs, ("input", _REQ), ("p", _REQ), ("train", _REQ))
        return self.dropout(p["input"], p["p"], p["train"])

    def dropout(self, x, p, training) -> _Tensor:
        if training and p:  # F.dropout's default: it drops even in eval mode unless given training=self.training
            self.fail("drops values at inference (training=True); pass training=self.training")
        return _Tensor(self.tensor(x))

    def f_size(self, x, dim=None):
        sizes = _Sizes(self.tensor(x))
        return sizes if dim is None else self.index(sizes, dim)

    def f_dim(self, x):
        return len(self.shape[self.tensor(x)]) + 1

    def f_getattr(self, obj, attr, *default):
        if isinstance(obj, _Tensor) and attr == "shape":
            return _Sizes(self.tensor(obj))
        self.fail(f"reads attribute {attr!r}; only x.shape is supported")

    def index(self, sizes: _Sizes, i):
        full = (None, *self.shape[sizes.key])
        if not isinstance(i, int) or isinstance(i, bool) or not -len(full) <= i < len(full):
            self.fail(f"index {i!r} into a {len(full)}-D shape is not supported")
        return _BATCH if i % len(full) == 0 else full[i]

    def f_getitem(self, obj, i):
        if isinstance(obj, _Sizes):
            return self.index(obj, i)
        if isinstance(obj, (list, tuple)) and isinstance(i, int):
            return obj[i]
        self.fail("indexing a feature map is not supported")
