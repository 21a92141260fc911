"""Lowering: a spec Network and its state_dict -> a Program, the flat op list the executor runs.

- conv -> batchnorm pairs become one conv with folded weights and bias (folded in float64, stored FP32,
  channels_last);
- the ReLU after a conv (or after conv + residual add) is fused into that conv (attrs "epilogue"): its
  kernel adds the bias (+ residual), applies the ReLU and counts the zeros it writes as it stores (the
  cuDNN path: one `snn_epilogue` launch in place after it); the ReLU's value is an `alias` of the conv's;
- a batchnorm not after a conv (DenseNet's pre-activation norm1/norm/norm5) + ReLU becomes one
  epilogue with the BN's scale/shift, written to a new tensor (the input lives on in later concats; in a CUDA
  graph the one static conv that reads it may apply it instead: runtime/handoff.py's preactivations);
- every other node (pooling, concat, flatten, linear, a relu after a linear) is one op of its own;
- a chain of concats each of which extends the one before (DenseNet's block: cat(x0, y1), cat(x0, y1, y2), ...)
  shares one buffer as wide as its last: each op copies only its new inputs into their channel slices, and its
  value is the buffer's first channels (a view: later readers see pixels wider apart than their channels);
- a conv whose value only such an op reads (DenseNet's conv2) writes it straight into its slice where its
  kernel can (attrs "concat"; the executor decides per kernel, the concat op copies what is not in place).
Each conv whose input comes from a ReLU (possibly through a pool or concat) is *eligible* for the sparse
path; each tensor such a conv reads gets a zero-counter slot, counted by the epilogue that writes it or
by a `count` op right after it; each value is dropped after its last reader.

A Program is data only: ops with their tensors, counter slots, liveness. Running it (dispatch, the
backend, tracing) is runtime/executor.py's job.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from snn.codegen.spec import Network

from .cuda import import_torch
from .errors import RunError


@dataclass
class Op:
    # conv | epilogue | count | alias | relu | add | maxpool | avgpool | adaptive_avgpool | concat | flatten | linear
    kind: str
    name: str                 # the spec node whose value this op produces
    inputs: tuple[str, ...]   # value names read
    attrs: dict = field(default_factory=dict)
    # attrs by kind: conv: weight (folded, NCRS, channels_last), bias (None when an epilogue adds it),
    # epilogue (if fused into it: shift, residual, relu, slot; inputs then end with the residual);
    # epilogue: scale, shift, residual (a value name or None), inplace, relu, slot (if it counts);
    # alias: none (the value is its input's: a conv that applied its epilogue itself);
    # concat: none (torch.cat of its inputs), or in a chain (_concat_chains): buffer (the chain's name), total
    # (its channels), offsets (where each input goes), channels (this value's: the buffer's first ones);
    # count: slot; pools: kernel, stride, padding, ceil_mode / size, and a max pool's epilogue (_into_pools: shift,
    # relu, slot) or an average pool's (_into_avgpools: scale, shift, relu, slot); linear: weight, bias


@dataclass
class Program:
    """A spec lowered for the executor: run `ops` in order, reading the spec's input value `input_name`;
    the result is the value `output`."""
    input_name: str
    output: str
    ops: list[Op]
    eligible: set[str]             # convs that may run sparse (their input is ReLU-derived, groups == 1)
    slots: dict[str, int]          # measured value -> its zero-counter index (convs sharing an input share it)
    free_after: list[list[str]]    # free_after[i]: values no op after ops[i] reads (the output excepted)

    def conv_op(self, conv: str) -> Op:
        return next(op for op in self.ops if op.kind == "conv" and op.name == conv)


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


def lower(net: Network, sd: dict, device="cpu", pool_epilogues: bool = True) -> Program:
    """The Program for `net` with the tensors of `sd` ({param name: tensor}, as weights.load returns
    it), folded and placed on `device`. pool_epilogues: move a cuDNN conv's shift + ReLU into the max pool that
    alone reads it (_into_pools; exact FP32 only: in 16 bits cuDNN fuses them into the conv's own call)."""
    torch = import_torch()
    dev = torch.device(device)
    g = _Graph(net)
    folded, alias = _bn_folds(g)
    weight, bias = _conv_weights(g, sd, folded, dev)
    ops, fused_bias = _fuse(g, sd, alias, bias, dev)
    for op in ops:
        if op.kind == "conv":
            op.attrs["bias"] = None if op.name in fused_bias else bias[op.name]
            op.attrs["weight"] = weight[op.name]
    eligible = {c.name for c in net.sparse_convs}  # the convs the build made kernels for (spec.ConvLayer.sparse)
    ops, slots = _counters(ops, eligible)
    ops = _into_convs(ops)
    if pool_epilogues:
        ops = _into_avgpools(_into_pools(ops, eligible))
    ops = _concat_chains(ops, lambda v: net.input_shape if v == net.input_name else g.nodes[v].shape)
    _into_concats(ops, net.output)
    return Program(net.input_name, net.output, ops, eligible, slots, _liveness(ops, net.output))


class _Graph:
    """The spec's nodes by name and each value's readers (the network output read by "<output>")."""

    def __init__(self, net: Network):
        self.net = net
        self.nodes = {n.name: n for n in net.nodes}
        self.users: dict[str, list[str]] = {n.name: [] for n in net.nodes}
        self.users[net.input_name] = []
        for n in net.nodes:
            for i in n.inputs:
                self.users[i].append(n.name)
        self.users[net.output].append("<output>")

    def only_user(self, name: str, of: str) -> bool:
        return self.users[name] == [of]

    def op_of(self, name: str) -> str | None:
        n = self.nodes.get(name)
        return None if n is None else n.op

    def read_by_one(self, name: str, op: str) -> bool:
        """`name` has a single reader and it is a node of kind `op`."""
        u = self.users[name]
        return len(u) == 1 and self.op_of(u[0]) == op


def _bn_folds(g: _Graph) -> tuple[dict[str, str], dict[str, str]]:
    """(conv -> its bn, bn -> its conv) for each batchnorm that is its conv's only reader: the bn's value
    is then the conv's, bias included."""
    folded: dict[str, str] = {}
    alias: dict[str, str] = {}
    for n in g.net.nodes:
        if n.op == "batchnorm" and g.op_of(n.inputs[0]) == "conv" and g.only_user(n.inputs[0], n.name):
            folded[n.inputs[0]], alias[n.name] = n.name, n.inputs[0]
    return folded, alias


def _conv_weights(g: _Graph, sd: dict, folded: dict[str, str], dev):
    """Each conv's weight (FP32, channels_last, on dev) and bias (None if it has none), BN folded in float64.
    A bias-free conv is folded with float64 zeros on its weight's device (a state_dict on the GPU works too)."""
    torch = import_torch()
    weight, bias = {}, {}
    for c in g.net.convs:
        node = g.nodes[c.name]
        w = sd[f"{c.param}.weight"].double()
        b = sd[f"{c.param}.bias"].double() if node["bias"] else torch.zeros(node["out_channels"], dtype=torch.float64,
                                                                                 device=w.device)
        if c.name in folded:
            bn = g.nodes[folded[c.name]]
            sd64 = {k: sd[f"{bn.param}.{k}"].double() for k in ("weight", "bias", "running_mean", "running_var")}
            scale, shift = bn_scale_shift({f"p.{k}": v for k, v in sd64.items()}, "p", bn["eps"])
            w = w * scale.view(-1, 1, 1, 1)
            b = b * scale + shift
        has_bias = bool(node["bias"]) or c.name in folded
        weight[c.name] = w.float().to(dev).contiguous(memory_format=torch.channels_last)
        bias[c.name] = b.float().to(dev) if has_bias else None
    return weight, bias


def _fuse(g: _Graph, sd: dict, alias: dict[str, str], bias: dict, dev) -> tuple[list[Op], set[str]]:
    """The op list in spec order, with the ReLU fusions; and the convs whose bias an epilogue adds."""
    net, nodes, only_user = g.net, g.nodes, g.only_user

    def value_of(v):
        """A folded bn's value is its conv's."""
        return alias.get(v, v)

    def conv_chain(v):
        """The conv whose value v is (v itself or its folded bn), if v has no other use."""
        c = alias.get(v, v)
        if g.op_of(c) != "conv":
            return None
        if c != v and not only_user(c, v):
            return None
        return c

    def bn_epilogue(name, bn, relu):
        s, t = bn_scale_shift(sd, bn.param, bn["eps"])
        return Op("epilogue", name, (value_of(bn.inputs[0]),),
                  {"scale": s.float().to(dev), "shift": t.float().to(dev), "residual": None, "inplace": False,
                   "relu": relu})

    def relu_epilogue(name, src, shift=None, residual=None, inputs=None, inplace=True):
        return Op("epilogue", name, inputs or (src,),
                  {"scale": None, "shift": shift, "residual": residual, "inplace": inplace, "relu": True})

    order = {n.name: i for i, n in enumerate(net.nodes)}
    ops: list[Op] = []
    fused_bias: set[str] = set()
    for n in net.nodes:
        if n.op == "conv":
            ops.append(Op("conv", n.name, (value_of(n.inputs[0]),)))
        elif n.op == "batchnorm":
            if n.name in alias or g.read_by_one(n.name, "relu"):
                continue  # folded into its conv, or fused into its relu below
            ops.append(bn_epilogue(n.name, n, relu=False))
        elif n.op == "relu":
            src = n.inputs[0]
            srcn = nodes.get(src)
            c = conv_chain(src) if only_user(src, n.name) else None
            if c is not None:                                   # conv (+bn) -> relu
                fused_bias.add(c)
                ops.append(relu_epilogue(n.name, c, shift=bias[c]))
            elif srcn is not None and srcn.op == "add" and len(srcn.inputs) == 2 and only_user(src, n.name):
                main = None
                for j, v in enumerate(srcn.inputs):  # the conv produced last: its kernel can add the other
                    cj = conv_chain(v) if only_user(v, src) else None
                    if cj is not None and (main is None or order[cj] > order[main]):
                        main, other = cj, value_of(srcn.inputs[1 - j])
                if main is not None:                            # conv (+bn) + residual -> relu
                    fused_bias.add(main)
                    ops.append(relu_epilogue(n.name, main, shift=bias[main], residual=other, inputs=(main, other)))
                else:
                    ops.append(Op("add", src, tuple(value_of(v) for v in srcn.inputs)))
                    ops.append(relu_epilogue(n.name, src))
            elif srcn is not None and srcn.op == "batchnorm" and src not in alias and only_user(src, n.name):
                ops.append(bn_epilogue(n.name, srcn, relu=True))  # pre-activation bn -> relu
            elif srcn is not None and srcn.op in ("conv", "batchnorm", "add") or src == net.input_name:
                ops.append(relu_epilogue(n.name, value_of(src), inplace=False))
            else:
                ops.append(Op("relu", n.name, (value_of(src),)))
        elif n.op == "add":
            if g.read_by_one(n.name, "relu") and len(n.inputs) == 2 \
                    and any(conv_chain(v) is not None and only_user(v, n.name) for v in n.inputs):
                continue  # fused into its relu
            ops.append(Op("add", n.name, tuple(value_of(v) for v in n.inputs)))
        elif n.op in ("maxpool", "avgpool"):
            ops.append(Op(n.op, n.name, (value_of(n.inputs[0]),),
                          {k: n[k] for k in ("kernel", "stride", "padding", "ceil_mode")}))
        elif n.op == "adaptive_avgpool":
            ops.append(Op("adaptive_avgpool", n.name, (value_of(n.inputs[0]),), {"size": n["output_size"]}))
        elif n.op == "global_avgpool":
            ops.append(Op("adaptive_avgpool", n.name, (value_of(n.inputs[0]),), {"size": (1, 1)}))
        elif n.op == "concat":
            ops.append(Op("concat", n.name, tuple(value_of(v) for v in n.inputs)))
        elif n.op == "flatten":
            ops.append(Op("flatten", n.name, (value_of(n.inputs[0]),)))
        elif n.op == "linear":
            w = sd[f"{n.param}.weight"].float().to(dev)
            b = sd[f"{n.param}.bias"].float().to(dev) if n["bias"] else None
            ops.append(Op("linear", n.name, (value_of(n.inputs[0]),), {"weight": w, "bias": b}))
        else:  # pragma: no cover - spec.OPS and this list must agree
            raise RunError(f"{net.path}: node '{n.name}': op '{n.op}' is not supported by the runtime")
    return ops, fused_bias


def _counters(ops: list[Op], eligible: set[str]) -> tuple[list[Op], dict[str, int]]:
    """One zero counter per measured tensor: the epilogue that writes it counts; other ReLU-derived
    inputs (after a pool or concat) get a `count` op right after they are produced."""
    slots: dict[str, int] = {}
    for op in ops:
        if op.kind == "conv" and op.name in eligible and op.inputs[0] not in slots:
            slots[op.inputs[0]] = len(slots)
    final: list[Op] = []
    for op in ops:
        final.append(op)
        if op.name in slots:
            if op.kind == "epilogue":
                op.attrs["slot"] = slots[op.name]
            else:
                final.append(Op("count", op.name, (op.name,), {"slot": slots[op.name]}))
    return final, slots


def _into_convs(ops: list[Op]) -> list[Op]:
    """Each bias (+ residual) + ReLU epilogue of a conv's own output moves into that conv (attrs "epilogue":
    shift, residual, relu, slot): its kernel applies it while storing (or, on the cuDNN path, one epilogue
    launch right after it); the epilogue op becomes an `alias` of the conv's value. The residual must exist
    by then (lowering fuses into the conv produced last)."""
    at = {op.name: i for i, op in enumerate(ops)}
    out: list[Op] = []
    for op in ops:
        a = op.attrs
        src = ops[at[op.inputs[0]]] if op.kind == "epilogue" and op.inputs[0] in at else None
        if src is None or src.kind != "conv" or a["scale"] is not None or not a["inplace"] \
                or (a["residual"] is not None and at.get(a["residual"], -1) >= at[src.name]):
            out.append(op)
            continue
        src.attrs["epilogue"] = {"shift": a["shift"], "residual": a["residual"], "relu": a["relu"],
                                 "slot": a.get("slot")}
        if a["residual"] is not None:
            src.inputs = src.inputs + (a["residual"],)
        out.append(Op("alias", op.name, (src.name,)))
    return out


def _readers(ops: list[Op]) -> dict[str, list[Op]]:
    """Each value's reading ops, in order."""
    readers: dict[str, list[Op]] = {}
    for op in ops:
        for v in op.inputs:
            readers.setdefault(v, []).append(op)
    return readers


def _count_in_pool(ops: list[Op], i: int, dropped: set[int]) -> None:
    """ops[i], a pool that took an epilogue: a count op right after it moves into it (its epilogue's slot) and is
    dropped."""
    op = ops[i]
    nxt = ops[i + 1] if i + 1 < len(ops) else None
    if nxt is not None and nxt.kind == "count" and nxt.inputs == (op.name,):
        op.attrs["epilogue"]["slot"] = nxt.attrs["slot"]
        dropped.add(id(nxt))


def _into_pools(ops: list[Op], eligible: set[str]) -> list[Op]:
    """A conv that always runs on cuDNN (not eligible: the stem's 7x7 over the image), its shift + ReLU fused into it
    (_into_convs) and its value read by one max pool alone: the epilogue moves into that pool (attrs "epilogue":
    shift, relu, slot), which applies it to each value it reads and, where a count op followed the pool, counts the
    pooled zeros itself (the count op is dropped). One launch instead of three: the epilogue over the conv's whole
    output, the pool, the count. The conv then runs as cuDNN's plain call. Where the backend's pool cannot take
    the epilogue, Executor._pool launches it before the pool, as before."""
    readers = _readers(ops)
    made = {op.name: op for op in ops if op.kind in ("conv", "alias")}
    dropped: set[int] = set()
    for i, op in enumerate(ops):
        alias = made.get(op.inputs[0]) if op.kind == "maxpool" else None
        if alias is None or alias.kind != "alias" or readers.get(alias.name) != [op]:
            continue
        conv = made.get(alias.inputs[0])
        ep = conv.attrs.get("epilogue") if conv is not None and conv.kind == "conv" else None
        if not ep or conv.name in eligible or readers.get(conv.name) != [alias] or ep["residual"] is not None \
                or not ep["relu"] or ep["slot"] is not None or "concat" in conv.attrs:
            continue
        op.attrs["epilogue"] = {"shift": ep["shift"], "relu": True, "slot": None}
        del conv.attrs["epilogue"]
        _count_in_pool(ops, i, dropped)
    return [op for op in ops if id(op) not in dropped]


def _into_avgpools(ops: list[Op]) -> list[Op]:
    """A pre-activation's batchnorm + ReLU (an epilogue with a scale, into a new tensor) that one average pool alone
    reads, the pool unpadded (a DenseNet transition's norm and relu, spec.pools_first having moved its conv after
    the pool): the epilogue moves into the pool (attrs "epilogue": scale, shift, relu, slot), which applies it to
    each value it reads and, where a count op followed the pool, counts the pooled zeros itself (the count op is
    dropped). One launch instead of three, and the activation is never written whole. Where the backend's pool
    cannot take it, Executor._pool launches the epilogue before the pool."""
    readers = _readers(ops)
    made = {op.name: op for op in ops}
    dropped: set[int] = set()
    for i, op in enumerate(ops):
        ep = made.get(op.inputs[0]) if op.kind == "avgpool" else None
        if ep is None or ep.kind != "epilogue" or ep.attrs["scale"] is None or ep.attrs["inplace"] \
                or ep.attrs["residual"] is not None or ep.attrs.get("slot") is not None \
                or readers.get(ep.name) != [op] or tuple(op.attrs["padding"]) != (0, 0) or op.attrs["ceil_mode"]:
            continue
        op.attrs["epilogue"] = {"scale": ep.attrs["scale"], "shift": ep.attrs["shift"], "relu": ep.attrs["relu"],
                                "slot": None}
        op.inputs = ep.inputs
        dropped.add(id(ep))
        _count_in_pool(ops, i, dropped)
    return [op for op in ops if id(op) not in dropped]


def _concat_chains(ops: list[Op], shape_of) -> list[Op]:
    """Concats that extend an earlier one (its inputs, then more) write into that one's buffer: each op of a
    chain copies only its new inputs and reads none of the earlier ones again, so they are freed after their
    copy. A concat extends at most one other, and is extended by at most one (a second would overwrite the
    first's channels). shape_of(value) -> (C, H, W)."""
    concats = [op for op in ops if op.kind == "concat"]
    parent: dict[str, Op] = {}
    child: dict[str, Op] = {}
    for op in concats:
        best = None
        for p in concats:
            if p is op:
                break
            k = len(p.inputs)
            if p.name not in child and k < len(op.inputs) and op.inputs[:k] == p.inputs \
                    and (best is None or k > len(best.inputs)):
                best = p
        if best is not None:
            parent[op.name], child[best.name] = best, op
    out: list[Op] = []
    for op in ops:
        if op.kind != "concat" or (op.name not in parent and op.name not in child):
            out.append(op)
            continue
        root = op
        while root.name in parent:
            root = parent[root.name]
        last = op
        while last.name in child:
            last = child[last.name]
        widths = [shape_of(v)[0] for v in op.inputs]
        first = len(parent[op.name].inputs) if op.name in parent else 0
        offsets = [sum(widths[:i]) for i in range(len(widths))]
        out.append(Op("concat", op.name, op.inputs[first:],
                      {"buffer": root.name, "total": sum(shape_of(v)[0] for v in last.inputs),
                       "offsets": offsets[first:], "channels": sum(widths)}))
    return out


def _into_concats(ops: list[Op], output: str) -> None:
    """A conv whose value (or its fused ReLU's alias) nothing but one concat chain op reads, as one of its new
    inputs, gets attrs "concat": the chain's buffer, its width, and the conv's channel offset in it."""
    readers = _readers(ops)
    producer = {op.name: op for op in ops if op.kind in ("conv", "alias")}
    for op in ops:
        if op.kind != "concat" or "buffer" not in op.attrs:
            continue
        for v, off in zip(op.inputs, op.attrs["offsets"]):
            src = producer.get(v)
            if src is None or v == output or readers.get(v) != [op]:
                continue
            if src.kind == "alias":   # conv -> its fused ReLU -> the concat: the conv read by the alias alone
                if readers.get(src.inputs[0]) != [src]:
                    continue
                src = producer.get(src.inputs[0])
            if src is not None and src.kind == "conv":
                src.attrs["concat"] = {"buffer": op.attrs["buffer"], "total": op.attrs["total"], "offset": off}


def _liveness(ops: list[Op], output: str) -> list[list[str]]:
    """Free each value after its last reader."""
    last: dict[str, int] = {}
    for i, op in enumerate(ops):
        for v in op.inputs:
            last[v] = i
    free_after: list[list[str]] = [[] for _ in ops]
    for v, i in last.items():
        if v != output:
            free_after[i].append(v)
    return free_after
