"""YAML network specs: parsing, validation and shape inference.

A spec is a DAG of named nodes (see docs/spec-format.md). `load_spec` returns an immutable
`Network` with every node's output shape, or raises `SpecError` whose message is one line that
names the file, the node and the problem.
"""
from __future__ import annotations

import math
from functools import cached_property
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# op -> (required fields, optional fields with defaults)
OPS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "conv": (("in_channels", "out_channels", "kernel"),
             {"stride": 1, "padding": 0, "groups": 1, "bias": False}),
    "batchnorm": (("channels",), {"eps": 1e-5}),
    "relu": ((), {}),
    "maxpool": (("kernel",), {"stride": None, "padding": 0, "ceil_mode": False}),
    "avgpool": (("kernel",), {"stride": None, "padding": 0, "ceil_mode": False}),
    "adaptive_avgpool": (("output_size",), {}),
    "global_avgpool": ((), {}),
    "add": ((), {}),
    "concat": ((), {}),
    "linear": (("in_features", "out_features"), {"bias": True}),
    "flatten": ((), {}),
}
MULTI_INPUT_OPS = ("add", "concat")
PAIR_FIELDS = ("kernel", "stride", "padding", "output_size")
BOOL_FIELDS = ("bias", "ceil_mode")
NODE_KEYS = {"name", "op", "input", "inputs", "param"}


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster


class SpecError(Exception):
    """A user mistake in a spec file; str() is the one line to print."""

    def __init__(self, path: str | Path, message: str, node: str | None = None):
        where = f"{path}: node '{node}'" if node else f"{path}"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Node:
    name: str
    op: str
    inputs: tuple[str, ...]
    attrs: dict[str, Any] = field(hash=False, compare=False)
    param: str | None  # torchvision parameter prefix, e.g. "layer1.0.conv1"; the node's name by default
    shape: tuple[int, ...]  # per-image output shape: (C, H, W) or (F,)

    def __getitem__(self, key: str) -> Any:
        return self.attrs[key]


@dataclass(frozen=True, order=True)
class ConvShape:
    """Everything that changes a convolution kernel, batch excluded."""
    C: int
    N: int
    H: int
    W: int
    R: int
    S: int
    stride: tuple[int, int]
    padding: tuple[int, int]

    @property
    def P(self) -> int:
        return (self.H + 2 * self.padding[0] - self.R) // self.stride[0] + 1

    @property
    def Q(self) -> int:
        return (self.W + 2 * self.padding[1] - self.S) // self.stride[1] + 1

    @property
    def macs(self) -> int:
        return self.N * self.P * self.Q * self.C * self.R * self.S

    def tag(self) -> str:
        """Short name, e.g. r3s3_str1_pad1_c256n256_h14w14."""
        st = self.stride[0] if self.stride[0] == self.stride[1] else f"{self.stride[0]}x{self.stride[1]}"
        pd = self.padding[0] if self.padding[0] == self.padding[1] else f"{self.padding[0]}x{self.padding[1]}"
        return (f"r{self.R}s{self.S}_str{st}_pad{pd}_c{self.C}n{self.N}_h{self.H}w{self.W}")


@dataclass(frozen=True)
class ConvLayer:
    index: int          # position among the network's convs (0-based, topological order)
    name: str           # node name in the spec
    param: str          # torchvision prefix of the weight (the node's name by default)
    shape: ConvShape
    bias: bool
    input: str          # producer node name
    input_op: str       # producer op ("relu", "maxpool", "input", ...)
    groups: int = 1
    sparse: bool = False  # may run a sparse kernel: its input is a ReLU output (possibly through a pool or
                          # concat, which keep zeros) and it is not grouped. Only these are planned,
                          # built and dispatched; the rest (the image-reading stem, grouped convs) run dense.
    into_concat: bool = False  # only concats read its value (directly, or through its own batchnorm and ReLU):
                               # its kernels can write their channels of the concat's buffer (KernelConfig.out_ld)
    bn_input: bool = False     # its input is a batchnorm + ReLU that only it reads, of a value the batchnorm
                               # cannot fold into (DenseNet's norm1 over its block's concat), stride 1 and an
                               # output the input's size: its kernels can apply them as they stage the input,
                               # read at a pixel pitch (KernelConfig.in_bn)

    @property
    def macs(self) -> int:
        return self.shape.macs // self.groups


@dataclass(frozen=True)
class Network:
    name: str
    path: str
    input_name: str
    input_shape: tuple[int, int, int]
    nodes: tuple[Node, ...]  # topological order
    output: str

    @cached_property
    def _by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def node(self, name: str) -> Node:
        return self._by_name[name]

    @cached_property
    def convs(self) -> tuple[ConvLayer, ...]:
        ops = {n.name: n.op for n in self.nodes}
        ops[self.input_name] = "input"
        relu_derived: set[str] = set()
        out = []
        for n in self.nodes:  # topological order
            if (n.op == "relu" or (n.op in ("maxpool", "avgpool") and n.inputs[0] in relu_derived)
                    or (n.op == "concat" and all(i in relu_derived for i in n.inputs))):
                relu_derived.add(n.name)
            if n.op != "conv":
                continue
            shape = conv_shape(n, self._shape_of(n.inputs[0]))
            out.append(ConvLayer(len(out), n.name, n.param, shape, n["bias"], n.inputs[0], ops[n.inputs[0]],
                                 n["groups"], n.inputs[0] in relu_derived and n["groups"] == 1,
                                 self._into_concat(n.name), self._bn_input(n, shape)))
        return tuple(out)

    @cached_property
    def _readers(self) -> dict[str, list[Node]]:
        return readers_of(self.nodes)

    def _into_concat(self, conv: str) -> bool:
        """Only concat nodes read the conv's value, or that of the batchnorm and ReLU that are its only readers."""
        v = conv
        for op in ("batchnorm", "relu"):
            r = self._readers.get(v, [])
            if len(r) == 1 and r[0].op == op:
                v = r[0].name
        r = self._readers.get(v, [])
        return v != self.output and bool(r) and all(n.op == "concat" for n in r)

    def _bn_input(self, conv: Node, shape: ConvShape) -> bool:
        """conv reads a ReLU of a batchnorm, each read only by the next, whose input is no conv that it alone reads
        (a batchnorm lowering folds into its conv), with stride 1 and an output the size of its input."""
        if conv["groups"] != 1 or shape.stride != (1, 1) or (shape.P, shape.Q) != (shape.H, shape.W):
            return False
        relu = self._by_name.get(conv.inputs[0])
        bn = self._by_name.get(relu.inputs[0]) if relu is not None and relu.op == "relu" else None
        if bn is None or bn.op != "batchnorm" or self._readers.get(relu.name) != [conv] \
                or self._readers.get(bn.name) != [relu]:
            return False
        src = self._by_name.get(bn.inputs[0])
        return not (src is not None and src.op == "conv" and self._readers.get(src.name) == [bn])

    @cached_property
    def conv_pairs(self) -> tuple[tuple[ConvLayer, ConvLayer], ...]:
        """(a, b): conv b reads the ReLU of conv a's batchnorm, with a residual added in between or not, and reads
        it first (a bottleneck's convs, a ResNet block's last conv and the next block's first): the pairs
        codegen/pair.py can run in one launch where their shapes allow (two 1x1 convs). The batchnorm must be all
        that reads a (it folds into a): not a DenseNet transition's conv, which its block's concat reads too."""
        by_name = {c.name: c for c in self.convs}
        out = []
        for b in self.convs:
            relu = self._by_name.get(b.input)
            if relu is None or relu.op != "relu" or self._readers.get(relu.name, [None])[0] is not self.node(b.name):
                continue
            v = self._by_name.get(relu.inputs[0])
            if v is not None and v.op == "add":
                v = self._by_name.get(v.inputs[0])
            if v is not None and v.op == "batchnorm":
                v = self._by_name.get(v.inputs[0]) if self._readers.get(v.inputs[0]) == [v] else None
            if v is not None and v.op == "conv" and v.name in by_name:
                out.append((by_name[v.name], b))
        return tuple(out)

    @property
    def sparse_convs(self) -> tuple[ConvLayer, ...]:
        """The convs that get sparse kernels (ConvLayer.sparse)."""
        return tuple(c for c in self.convs if c.sparse)

    def _shape_of(self, name: str) -> tuple[int, ...]:
        return self.input_shape if name == self.input_name else self.node(name).shape

    def conv_shapes(self) -> list[ConvShape]:
        """Distinct conv shapes, in order of first appearance."""
        return list(dict.fromkeys(c.shape for c in self.convs))

    @property
    def macs(self) -> int:
        total = sum(c.macs for c in self.convs)
        for n in self.nodes:
            if n.op == "linear":
                total += n["in_features"] * n["out_features"]
        return total

    @property
    def params(self) -> int:
        total = 0
        for n in self.nodes:
            if n.op == "conv":
                r, s = n["kernel"]
                total += n["out_channels"] * n["in_channels"] // n["groups"] * r * s
                total += n["out_channels"] if n["bias"] else 0
            elif n.op == "batchnorm":
                total += 2 * n["channels"]
            elif n.op == "linear":
                total += n["in_features"] * n["out_features"] + (n["out_features"] if n["bias"] else 0)
        return total


def conv_shape(node: Node, in_shape: tuple[int, ...]) -> ConvShape:
    c, h, w = in_shape
    r, s = node["kernel"]
    return ConvShape(c, node["out_channels"], h, w, r, s, node["stride"], node["padding"])


# ---------------------------------------------------------------------------------------------
# Loading

# The specs that ship with snn (package data of snn.network_specs).
SPECS_DIR = Path(__file__).resolve().parent.parent / "network_specs"


def shipped_specs() -> list[str]:
    return sorted(p.stem for p in SPECS_DIR.glob("*.yaml"))


def resolve_spec(name: str | Path) -> Path:
    """A spec file: `name` itself when it exists, else, for a bare name such as `resnet152` or
    `resnet152.yaml`, the spec of that name that ships with snn. Anything else is left for load_spec
    to report."""
    path = Path(name)
    if path.exists() or path.parent != Path("."):
        return path
    stem = path.stem if path.suffix in (".yaml", ".yml") else path.name
    shipped = SPECS_DIR / f"{stem}.yaml"
    if shipped.is_file():
        return shipped
    raise SpecError(path, f"no such file, and no shipped spec of that name (shipped: {', '.join(shipped_specs())})")


def load_spec(path: str | Path) -> Network:
    path = resolve_spec(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpecError(path, "no such file") from None
    except IsADirectoryError:
        raise SpecError(path, "is a directory, expected a YAML file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(path, f"cannot read: {e}") from None
    return parse_spec(text, path)


def parse_spec(text: str, path: str | Path = "<spec>") -> Network:
    try:
        doc = yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise SpecError(path, f"YAML syntax error at {line}{e.problem or e}") from None
    except yaml.YAMLError as e:
        raise SpecError(path, f"YAML error: {e}") from None
    if doc is None:
        raise SpecError(path, "file is empty")
    if not isinstance(doc, dict):
        raise SpecError(path, f"top level must be a mapping with 'name', 'input' and 'nodes', got {_tname(doc)}")
    unknown = set(doc) - {"name", "input", "nodes", "output"}
    if unknown:
        raise SpecError(path, f"unknown top-level field(s): {', '.join(sorted(map(str, unknown)))}")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError(path, "field 'name' must be a non-empty string")
    input_name, input_shape = _parse_input(path, doc.get("input"))
    raw_nodes = doc.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise SpecError(path, "field 'nodes' must be a non-empty list")

    parsed: dict[str, tuple[str, tuple[str, ...], dict[str, Any], str | None]] = {}
    for i, raw in enumerate(raw_nodes):
        nname, op, inputs, attrs, param = _parse_node(path, i, raw, input_name)
        if nname in parsed or nname == input_name:
            raise SpecError(path, "duplicate name", nname)
        parsed[nname] = (op, inputs, attrs, param)

    order = _toposort(path, parsed, input_name)
    shapes: dict[str, tuple[int, ...]] = {input_name: input_shape}
    nodes = []
    for nname in order:
        op, inputs, attrs, param = parsed[nname]
        shape = _infer(path, nname, op, attrs, [shapes[i] for i in inputs], inputs)
        shapes[nname] = shape
        nodes.append(Node(nname, op, inputs, attrs, param, shape))

    output = doc.get("output", order[-1] if "output" not in doc else None)
    if not isinstance(output, str) or output not in parsed:
        raise SpecError(path, f"field 'output' names unknown node {output!r}")
    nodes, output = pools_first(nodes, output)
    return Network(name, str(path), input_name, input_shape, tuple(nodes), output)


def readers_of(nodes) -> dict[str, list[Node]]:
    """Each value's reading nodes, in order."""
    readers: dict[str, list[Node]] = {}
    for n in nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    return readers


def pools_first(nodes: list[Node], output: str) -> tuple[list[Node], str]:
    """Each 1x1 conv (stride 1, unpadded) that one average pool alone reads (unpadded, floor mode, fewer pixels
    out than in) runs after the pool instead: a 1x1 conv and an average over pixels are both linear, so the conv
    on the pooled map gives the same values up to rounding, for a fraction of the MACs (a DenseNet transition:
    a quarter). Names stay: the pool's node reads the conv's input, the conv's node reads the pool, and the pool's
    readers read the conv. Every stage after the parse (the build, the runtime, the references) sees the new order."""
    readers = readers_of(nodes)
    by_name = {n.name: n for n in nodes}
    swaps: dict[str, Node] = {}   # conv -> the pool read after it
    for n in nodes:
        conv = by_name.get(n.inputs[0]) if n.op == "avgpool" else None
        if conv is None or conv.op != "conv" or conv.name == output or readers[conv.name] != [n] \
                or n["padding"] != (0, 0) or n["ceil_mode"] \
                or n.shape[1] * n.shape[2] >= conv.shape[1] * conv.shape[2] \
                or conv["kernel"] != (1, 1) or conv["stride"] != (1, 1) or conv["padding"] != (0, 0):
            continue
        swaps[conv.name] = n
    if not swaps:
        return nodes, output
    now_conv = {pool.name: conv for conv, pool in swaps.items()}
    out = []
    for n in nodes:
        if n.name in now_conv:
            continue
        if n.name in swaps:
            pool = swaps[n.name]
            out.append(Node(pool.name, "avgpool", n.inputs, pool.attrs, pool.param,
                            (n["in_channels"], *pool.shape[1:])))
            out.append(Node(n.name, "conv", (pool.name,), n.attrs, n.param, pool.shape))
        else:
            out.append(Node(n.name, n.op, tuple(now_conv.get(i, i) for i in n.inputs), n.attrs, n.param, n.shape))
    return out, now_conv.get(output, output)


def _tname(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "nothing"}.get(type(v), type(v).__name__)


def _parse_input(path, raw) -> tuple[str, tuple[int, int, int]]:
    if not isinstance(raw, dict):
        raise SpecError(path, "field 'input' must be a mapping like {name: image, shape: [3, 224, 224]}")
    name = raw.get("name", "input")
    if not isinstance(name, str) or not name:
        raise SpecError(path, "field 'input.name' must be a non-empty string")
    shape = raw.get("shape")
    if not (isinstance(shape, list) and len(shape) == 3):
        raise SpecError(path, "field 'input.shape' must be a list [channels, height, width]")
    for v in shape:
        if not _is_int(v) or v <= 0:
            raise SpecError(path, f"field 'input.shape' must hold positive integers, got {v!r}")
    return name, (shape[0], shape[1], shape[2])


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_node(path, i, raw, input_name):
    if not isinstance(raw, dict):
        raise SpecError(path, f"nodes[{i}] must be a mapping, got {_tname(raw)}")
    nname = raw.get("name")
    if not isinstance(nname, str) or not nname:
        raise SpecError(path, f"nodes[{i}] needs a 'name' (non-empty string)")
    op = raw.get("op")
    if op not in OPS:
        raise SpecError(path, f"unknown op {op!r} (known: {', '.join(OPS)})", nname)
    required, optional = OPS[op]
    unknown = set(raw) - NODE_KEYS - set(required) - set(optional)
    if unknown:
        raise SpecError(path, f"unknown field(s) for op '{op}': {', '.join(sorted(map(str, unknown)))}", nname)

    if op in MULTI_INPUT_OPS:
        ins = raw.get("inputs")
        if "input" in raw or not isinstance(ins, list) or len(ins) < 2:
            raise SpecError(path, f"op '{op}' needs 'inputs': a list of at least two node names", nname)
    else:
        if "inputs" in raw or "input" not in raw:
            raise SpecError(path, f"op '{op}' needs 'input': one node name", nname)
        ins = [raw["input"]]
    for x in ins:
        if not isinstance(x, str):
            raise SpecError(path, f"input {x!r} must be a node name (string)", nname)
    if len(set(ins)) != len(ins):
        raise SpecError(path, "lists the same input twice", nname)

    # without one, a node with tensors has them named after the node
    param = raw.get("param", nname if op in ("conv", "batchnorm", "linear") else None)
    if param is not None and not isinstance(param, str):
        raise SpecError(path, "field 'param' must be a string (the torchvision parameter prefix)", nname)

    attrs: dict[str, Any] = {}
    for key in required:
        if key not in raw:
            raise SpecError(path, f"op '{op}' needs field '{key}'", nname)
    for key in (*required, *optional):
        val = raw.get(key, optional.get(key))
        attrs[key] = _check_field(path, nname, key, val)
    if op in ("maxpool", "avgpool") and attrs["stride"] is None:
        attrs["stride"] = attrs["kernel"]
    return nname, op, tuple(ins), attrs, param


def _check_field(path, nname, key, val):
    if key in BOOL_FIELDS:
        if not isinstance(val, bool):
            raise SpecError(path, f"field '{key}' must be true or false, got {val!r}", nname)
        return val
    if key == "eps":
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not val > 0:
            raise SpecError(path, f"field 'eps' must be a positive number, got {val!r}", nname)
        return float(val)
    if val is None:  # optional pair defaulting to another field (pool stride)
        return None
    minimum = 0 if key == "padding" else 1
    if key in PAIR_FIELDS:
        pair = [val, val] if not isinstance(val, list) else val
        if len(pair) != 2 or not all(_is_int(v) for v in pair):
            raise SpecError(path, f"field '{key}' must be an integer or a list of two integers, got {val!r}", nname)
        if min(pair) < minimum:
            raise SpecError(path, f"field '{key}' must be {'non-negative' if minimum == 0 else 'positive'}, got {val!r}", nname)
        return (pair[0], pair[1])
    if not _is_int(val):
        raise SpecError(path, f"field '{key}' must be an integer, got {val!r}", nname)
    if val < minimum:
        raise SpecError(path, f"field '{key}' must be positive, got {val!r}", nname)
    return val


def _toposort(path, parsed, input_name) -> list[str]:
    for nname, (_, inputs, _, _) in parsed.items():
        for x in inputs:
            if x not in parsed and x != input_name:
                raise SpecError(path, f"input '{x}' is not defined", nname)
    # Kahn's algorithm, stable with respect to file order.
    indeg = {n: sum(1 for x in ins if x != input_name) for n, (_, ins, _, _) in parsed.items()}
    users: dict[str, list[str]] = {n: [] for n in parsed}
    for n, (_, ins, _, _) in parsed.items():
        for x in ins:
            if x != input_name:
                users[x].append(n)
    ready = [n for n in parsed if indeg[n] == 0]
    order: list[str] = []
    while ready:
        n = ready.pop(0)
        order.append(n)
        for u in users[n]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(order) != len(parsed):
        stuck = [n for n in parsed if indeg[n] > 0]
        raise SpecError(path, f"is part of a cycle ({' -> '.join(stuck[:6])}{' ...' if len(stuck) > 6 else ''})", stuck[0])
    return order


def pool_out(size, k, s, p, ceil_mode):
    span = size + 2 * p - k
    out = (math.ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:  # PyTorch's rule: last window must start inside
        out -= 1
    return out


def _infer(path, nname, op, a, in_shapes, inputs) -> tuple[int, ...]:
    def need_chw(i=0):
        if len(in_shapes[i]) != 3:
            raise SpecError(path, f"op '{op}' needs a (C, H, W) input, but '{inputs[i]}' gives shape {in_shapes[i]}", nname)
        return in_shapes[i]

    if op == "conv":
        c, h, w = need_chw()
        if a["in_channels"] != c:
            raise SpecError(path, f"in_channels is {a['in_channels']} but input '{inputs[0]}' has {c} channels", nname)
        g = a["groups"]
        if a["in_channels"] % g or a["out_channels"] % g:
            raise SpecError(path, f"groups={g} must divide in_channels and out_channels", nname)
        (r, s), (sh, sw), (ph, pw) = a["kernel"], a["stride"], a["padding"]
        p, q = (h + 2 * ph - r) // sh + 1, (w + 2 * pw - s) // sw + 1
        if h + 2 * ph < r or w + 2 * pw < s:
            raise SpecError(path, f"kernel {r}x{s} is larger than the padded input {h + 2 * ph}x{w + 2 * pw}", nname)
        return (a["out_channels"], p, q)
    if op == "batchnorm":
        c, h, w = need_chw()
        if a["channels"] != c:
            raise SpecError(path, f"channels is {a['channels']} but input '{inputs[0]}' has {c} channels", nname)
        return (c, h, w)
    if op == "relu":
        return in_shapes[0]
    if op in ("maxpool", "avgpool"):
        c, h, w = need_chw()
        (kh, kw), (sh, sw), (ph, pw) = a["kernel"], a["stride"], a["padding"]
        if ph > kh // 2 or pw > kw // 2:
            raise SpecError(path, "padding must be at most half the kernel size", nname)
        if h + 2 * ph < kh or w + 2 * pw < kw:
            raise SpecError(path, f"kernel {kh}x{kw} is larger than the padded input", nname)
        return (c, pool_out(h, kh, sh, ph, a["ceil_mode"]), pool_out(w, kw, sw, pw, a["ceil_mode"]))
    if op == "adaptive_avgpool":
        c, _, _ = need_chw()
        return (c, *a["output_size"])
    if op == "global_avgpool":
        c, _, _ = need_chw()
        return (c, 1, 1)
    if op == "add":
        for i, s in enumerate(in_shapes[1:], 1):
            if s != in_shapes[0]:
                raise SpecError(path, f"cannot add '{inputs[0]}' {in_shapes[0]} and '{inputs[i]}' {s}: shapes differ", nname)
        return in_shapes[0]
    if op == "concat":
        _, h, w = need_chw()
        for i in range(len(in_shapes)):
            ci, hi, wi = need_chw(i)
            if (hi, wi) != (h, w):
                raise SpecError(path, f"cannot concatenate '{inputs[0]}' ({h}x{w}) and '{inputs[i]}' ({hi}x{wi}): spatial sizes differ", nname)
        return (sum(s[0] for s in in_shapes), h, w)
    if op == "flatten":
        return (math.prod(in_shapes[0]),)
    if op == "linear":
        if len(in_shapes[0]) != 1:
            raise SpecError(path, f"op 'linear' needs a flat input; add a flatten node after '{inputs[0]}'", nname)
        if in_shapes[0][0] != a["in_features"]:
            raise SpecError(path, f"in_features is {a['in_features']} but input '{inputs[0]}' has {in_shapes[0][0]} features", nname)
        return (a["out_features"],)
    raise AssertionError(op)  # OPS and _infer must list the same ops


def tensor_shapes(net: Network) -> dict[str, tuple[int, ...]]:
    """Every tensor the spec needs (a state_dict's keys, torchvision names) with its shape."""
    out: dict[str, tuple[int, ...]] = {}
    for n in net.nodes:
        if n.op in ("conv", "batchnorm", "linear") and n.param is None:
            continue
        if n.op == "conv":
            r, s = n["kernel"]
            out[f"{n.param}.weight"] = (n["out_channels"], n["in_channels"] // n["groups"], r, s)
            if n["bias"]:
                out[f"{n.param}.bias"] = (n["out_channels"],)
        elif n.op == "batchnorm":
            for k in ("weight", "bias", "running_mean", "running_var"):
                out[f"{n.param}.{k}"] = (n["channels"],)
        elif n.op == "linear":
            out[f"{n.param}.weight"] = (n["out_features"], n["in_features"])
            if n["bias"]:
                out[f"{n.param}.bias"] = (n["out_features"],)
    return out
