"""Importers: other model formats -> a YAML network spec (docs/spec-format.md) and a state_dict.

    from snn.codegen.importer import import_onnx, import_torch
    result = import_onnx("model.onnx", "model.yaml", "model.pth")
    result = import_torch("resnext50_32x4d", "resnext.yaml")        # a torchvision name, or an nn.Module

`common` holds what they share (the result, the YAML text, the all-or-nothing write). The format
libraries (onnx, torch, torchvision) are imported inside the functions, never at module import.
"""
from __future__ import annotations

from .common import ImportResult
from .onnx_model import import_onnx
from .torch_model import import_torch

__all__ = ["ImportResult", "import_onnx", "import_torch"]
