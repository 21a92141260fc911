"""Importers: other model formats -> a YAML network spec (docs/spec-format.md) and a state_dict.

    from snn.codegen.importer import import_onnx
    result = import_onnx("model.onnx", "model.yaml", "model.pth")

The format libraries (onnx, torch) are imported inside the functions, never at module import.
"""
from __future__ import annotations

from .onnx_model import ImportResult, import_onnx

__all__ = ["ImportResult", "import_onnx"]
