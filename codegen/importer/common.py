"""What the importers share: the result, the spec's YAML text, and the all-or-nothing finish.

`finish` parses the spec text with `parse_spec`, checks the weights against `tensor_shapes` (what the
runtime loads) and only then writes: the spec and the weights go to temporary files next to their
targets, renamed once everything succeeded, so a failed import leaves nothing behind.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from snn.codegen.errors import UserError
from snn.codegen.spec import Network, SpecError, parse_spec, tensor_shapes

TORCH_MISSING = "writing the weights file needs PyTorch: pip install torch (or import without weights)"


@dataclass(frozen=True)
class ImportResult:
    spec_path: Path
    weights_path: Path | None
    nodes: int          # spec nodes written
    convs: int          # conv nodes among them
    sparse_convs: int = 0   # convs that can run sparse (Network.sparse_convs)
    network: Network | None = None


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def check_targets(out_spec: Path, out_weights: Path | None) -> None:
    """Fail before any conversion work when the outputs cannot be written where asked."""
    for target in (out_spec, out_weights):
        if target is not None and not target.parent.is_dir():
            raise UserError(f"{target}: folder {target.parent} does not exist")
    if out_weights is not None and out_weights.resolve() == out_spec.resolve():
        raise UserError(f"{out_spec}: the spec and the weights cannot be the same file")


def finish(text: str, source: str | Path, tensors: dict, out_spec: Path, out_weights: Path | None) -> ImportResult:
    """Validate the spec text and its tensors ({state_dict key: numpy array or torch tensor}), then write
    both (the weights only when out_weights is given). `source` labels error messages."""
    net = parse_network(text, source)
    check_weights(net, tensors, source)
    write(text, out_spec, tensors if out_weights is not None else None, out_weights)
    return ImportResult(out_spec, out_weights, len(net.nodes), len(net.convs), len(net.sparse_convs), net)


def parse_network(text: str, source: str | Path) -> Network:
    try:
        return parse_spec(text, source)
    except SpecError as e:
        raise UserError(str(e)) from None


def check_weights(net: Network, tensors: dict, source: str | Path) -> None:
    """The state_dict holds exactly the tensors the spec names (what runtime.weights loads), with their shapes."""
    want = tensor_shapes(net)
    for key, shape in want.items():
        got = tensors.get(key)
        if got is None or tuple(got.shape) != shape:  # pragma: no cover - an importer bug, not a user's
            raise UserError(f"{source}: internal error: tensor '{key}' is "
                            f"{None if got is None else tuple(got.shape)}, the spec needs {shape}")
    extra = sorted(set(tensors) - set(want))
    if extra:  # pragma: no cover - an importer bug, not a user's
        raise UserError(f"{source}: internal error: tensor '{extra[0]}' is not named by the spec")


def _float32(v):
    """A CPU float32 torch tensor with its own storage (numpy arrays and torch tensors alike)."""
    import numpy as np
    import torch
    if isinstance(v, torch.Tensor):
        return v.detach().to("cpu", torch.float32).contiguous().clone()
    return torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32).copy())


def write(text: str, out_spec: Path, tensors: dict | None, out_weights: Path | None) -> None:
    tmps: list[str] = []
    try:
        fd, spec_tmp = tempfile.mkstemp(dir=out_spec.parent, prefix=f".{out_spec.name}.", suffix=".tmp")
        tmps.append(spec_tmp)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        if tensors is not None:
            import torch
            fd, w_tmp = tempfile.mkstemp(dir=out_weights.parent, prefix=f".{out_weights.name}.", suffix=".tmp")
            os.close(fd)
            tmps.append(w_tmp)
            torch.save({k: _float32(v) for k, v in tensors.items()}, w_tmp)
            os.replace(w_tmp, out_weights)
            tmps.remove(w_tmp)
        os.replace(spec_tmp, out_spec)
        tmps.remove(spec_tmp)
    except OSError as e:
        where = e.filename or out_spec
        raise UserError(f"cannot write {where}: {e.strerror or e}") from None
    finally:
        for t in tmps:
            try:
                os.unlink(t)
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------------
# The spec's text: one flow mapping a node, keys in the order given

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def yaml_str(s: str) -> str:
    """A name as a YAML flow scalar: plain when that reads back as the same string, else double-quoted."""
    if _PLAIN.fullmatch(s):
        try:
            if yaml.safe_load(s) == s:
                return s
        except yaml.YAMLError:
            pass
    return json.dumps(s)  # a JSON string is a YAML double-quoted scalar


def fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(map(fmt, v)) + "]"
    if isinstance(v, str):
        return yaml_str(v)
    if isinstance(v, float):  # YAML 1.1 (PyYAML) reads 1e-05 as a string: it wants 1.0e-05
        r = repr(v)
        if "e" in r and "." not in r:
            mant, exp = r.split("e")
            r = f"{mant}.0e{exp}"
        return r
    return str(v)


def pair(v: int | tuple[int, int]) -> int | list[int]:
    a, b = (v, v) if isinstance(v, int) else v
    return a if a == b else [a, b]


def spec_text(comment: str, name: str, input_name: str, input_shape: tuple[int, int, int],
              nodes: list[dict[str, Any]], output: str) -> str:
    """The spec as the importers write it; node keys starting with '_' are the importer's own."""
    c, h, w = input_shape
    lines = [f"# {comment}",
             f"name: {yaml_str(name)}",
             f"input: {{name: {yaml_str(input_name)}, shape: [{c}, {h}, {w}]}}",
             "nodes:"]
    for n in nodes:
        lines.append("  - {" + ", ".join(f"{k}: {fmt(v)}" for k, v in n.items() if not k.startswith("_")) + "}")
    lines.append(f"output: {yaml_str(output)}")
    return "\n".join(lines) + "\n"
