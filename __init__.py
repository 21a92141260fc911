"""snn: sparse CNN inference on NVIDIA GPUs.

The repository root is the `snn` package: `snn.codegen` (offline: spec -> plan -> sources -> cubins ->
bundle), `snn.runtime` (online: bundle -> engine), `snn.cli` (the `snn-codegen` and `snn-run` commands).

    import snn
    snn.build("resnet50", gpu="h100", batches=[1, 8], out="generated")      # no GPU needed
    engine = snn.load("generated/resnet50/h100", weights="resnet50.pth", batch=8)
    logits = engine(x)                  # x: a CUDA float32 tensor, N x 3 x 224 x 224

Importing snn imports neither torch nor cuda-python; `load` does.
"""
from __future__ import annotations

__all__ = ["build", "load"]


def build(*args, **kwargs):
    """Plan, render and compile a network's kernels into a relocatable bundle (snn.codegen.api.build)."""
    from .codegen.api import build as _build
    return _build(*args, **kwargs)


def load(*args, **kwargs):
    """Load a bundle onto the current CUDA device as a callable engine (snn.runtime.api.load)."""
    from .runtime.api import load as _load
    return _load(*args, **kwargs)
