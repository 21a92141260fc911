"""snn: sparse CNN inference on NVIDIA GPUs.

The repository root is the `snn` package: `snn.codegen` (offline: spec -> plan -> sources -> cubins ->
bundle), `snn.runtime` (online: bundle -> engine), `snn.cli` (the `snn-codegen` and `snn-run` commands).

    import snn
    snn.build("network_specs/resnet50.yaml", gpu="h100", batch=[1, 8])   # no GPU needed
    engine = snn.load("generated/resnet50/h100", weights="resnet50.pth", batch=8)
    logits = engine(x)                  # x: a CUDA float32 tensor, N x 3 x 224 x 224
    snn.import_onnx("model.onnx", "model.yaml", "model.pth")           # ONNX -> spec + weights
    snn.import_torch("resnext50_32x4d", "resnext.yaml")                 # nn.Module or torchvision name -> spec

Importing snn imports neither torch nor cuda-python; `load` does.
"""
from __future__ import annotations

__all__ = ["build", "load", "import_onnx", "import_torch"]


def build(spec, gpu="h100", batch=1, levels="0.4:0.9:0.05", out="generated", **kwargs):
    """Plan, render and compile a spec's kernels into the bundle <out>/<network>/<gpu>/ (no GPU needed);
    precision="bf16" / "fp16" makes a 16-bit bundle (every conv on cuDNN's tensor cores; one kernel, its epilogue).
    Returns a BuildResult (.manifest_path, .summary()). See snn.codegen.build.build_spec."""
    from .codegen.build import build_spec
    return build_spec(spec, gpu, batch, levels, out, **kwargs)


def load(bundle, weights=None, batch=None, **kwargs):
    """A bundle on the current CUDA device as a callable: engine(x) -> logits, in the precision the bundle was
    built for (precision= another one is refused). See snn.runtime.engine.Engine."""
    from .runtime.engine import Engine
    return Engine(bundle, weights, batch, **kwargs)


def import_onnx(path, out_spec, out_weights=None, name=None):
    """Convert an ONNX model into a YAML spec (and, with out_weights, a state_dict file); needs the onnx
    package. Returns an ImportResult (.spec_path, .weights_path, .nodes, .convs). See
    snn.codegen.importer.import_onnx."""
    from .codegen.importer import import_onnx as _import_onnx
    return _import_onnx(path, out_spec, out_weights, name)


def import_torch(model, out_spec, out_weights=None, name=None, input_shape=None):
    """Convert a PyTorch nn.Module (traced with torch.fx) or the name of a torchvision classification model
    ("resnext50_32x4d", built with random weights, no download) into a YAML spec (and, with out_weights,
    a state_dict file); needs torch (and torchvision for a name). input_shape: per-image (C, H, W),
    default (3, 224, 224). Returns an ImportResult. See snn.codegen.importer.import_torch."""
    from .codegen.importer import import_torch as _import_torch
    return _import_torch(model, out_spec, out_weights, name, input_shape)
