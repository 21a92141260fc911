"""The Python API of the online side: a bundle loaded on the current CUDA device, called like a model.

    import snn
    engine = snn.load("generated/resnet152/h100", weights="resnet152.pth", batch=8)
    logits = engine(x)       # x: float32 CUDA tensor, N x 3 x 224 x 224 (NCHW or channels_last)

The engine runs on PyTorch's current stream and device, as one captured CUDA graph per input shape
with the dense/sparse choice taken on the GPU (runtime/graph.py); `graph=False` launches layer by
layer from Python. A batch smaller than a built batch size is padded up to it with its own images;
a larger one runs in chunks. `snn-run infer` is built on the same Engine.
"""
from __future__ import annotations

import json
from pathlib import Path

from snn.codegen import bundle as bundle_format
from snn.codegen.spec import Network, load_spec

from .errors import RunError


def bundle_dir(path: str | Path) -> Path:
    """A bundle folder, or the manifest.json inside one."""
    p = Path(path)
    if p.is_file() and p.name == bundle_format.MANIFEST:
        return p.parent
    if not (p / bundle_format.MANIFEST).is_file():
        raise RunError(f"{p}: not a bundle (no {bundle_format.MANIFEST}); `snn-codegen build SPEC --out DIR` "
                       f"writes one to DIR/<network>/<gpu>/")
    return p


def bundle_spec(folder: Path) -> Path:
    spec = folder / bundle_format.SPEC
    if not spec.is_file():
        raise RunError(f"{folder}: the bundle has no {bundle_format.SPEC}; give the spec it was built from")
    return spec


def default_batch(folder: Path) -> int:
    """The largest batch size the bundle was built for (1 if the manifest cannot say: loading it reports why)."""
    try:
        return max(int(b) for b in json.loads((folder / bundle_format.MANIFEST).read_text())["batches"])
    except (OSError, ValueError, KeyError, TypeError):
        return 1


class Engine:
    """A bundle, its weights and one batch-size bucket set, ready on the GPU.

    batch: the largest batch run at once (must be built); default: the bundle's largest.
    weights: None (seeded random, BN calibrated: labels mean nothing), 'torchvision', or a state_dict path.
    tuning: the tuning file to merge (default: the bundle's tuning.json if present; False: none).
    device: a runtime.cuda.Device already made (default: one for the current CUDA device).
    force: 'auto' (per layer from the zero counter), 'dense' or 'sparse' everywhere.
    precision: None (the bundle's, `snn-codegen build --precision`), or the one the caller expects; one other
    than the bundle's is refused. 'fp32' is exact; 'bf16' / 'fp16' run every conv on the tensor cores with its
    bias, residual and ReLU fused into one launch (cuDNN's, or the bundle's tensor-core kernel where it measured
    faster for the layer at load: runtime/tensorcore.py), DenseNet's pre-activations in the bundle's 16-bit
    epilogue kernel, the logits in that precision (runtime/executor.py; force is then 'dense').
    """

    def __init__(self, bundle: str | Path, weights: str | None = None, batch: int | None = None,
                 graph: bool = True, tuning: str | Path | bool | None = None, force: str = "auto",
                 trace: bool = False, seed: int = 0, spec: str | Path | None = None, device=None,
                 precision: str | None = None):
        from . import manifest, weights as weights_mod
        from .cuda import Device
        from .executor import Executor
        from .kernels import CudaBackend
        if precision is not None and precision not in bundle_format.PRECISIONS:
            raise RunError(f"precision must be one of {', '.join(bundle_format.PRECISIONS)}, got {precision!r}")
        folder = bundle_dir(bundle)
        self.spec_path = str(spec or bundle_spec(folder))
        self.net: Network = load_spec(self.spec_path)
        self.device = device or Device()
        batch = default_batch(folder) if batch is None else batch
        if batch < 1:
            raise RunError(f"batch must be at least 1, got {batch}")
        self.cache = manifest.load(folder / bundle_format.MANIFEST, self.net, self.spec_path, batch,
                                   self.device.compute_capability, tuning_path=tuning, precision=precision)
        precision = self.cache.precision  # settled: the bundle's (a different one asked for was refused)
        if precision != "fp32":
            if force == "sparse":
                raise RunError(f"{precision} runs every conv dense on the tensor cores: the sparse path needs fp32")
            force = "dense"
        self.batch, self.force, self.precision = batch, force, precision
        sd, self.class_names, self.warning = weights_mod.load(self.net, weights, seed, device="cuda")
        # 16 bits: each conv's launch applies its epilogue, the bundle's epilogue kernel DenseNet's BN + ReLU
        backend = CudaBackend(self.device, self.cache)
        self.executor = Executor(self.net, sd, backend, self.cache, "cuda", force, trace, precision)
        if precision != "fp32":  # per layer, the faster of cuDNN and the bundle's tensor-core kernels, measured now
            from . import tensorcore
            tensorcore.attach(self.executor, self.device, [b for b in self.cache.batches if b <= batch])
        self.graph = None
        if graph:  # one CUDA graph per batch size, dispatch on the device (runtime/graph.py)
            from .graph import GraphRunner, GraphUnavailable
            try:
                self.graph = GraphRunner(self.executor, self.device)
            except GraphUnavailable as e:  # an older driver or torch still runs, layer by layer
                self.warning = "; ".join(w for w in (self.warning, f"{e}; running without a CUDA graph") if w)

    @property
    def bundle(self) -> Path:
        return self.cache.bundle

    @property
    def last_trace(self):
        """Per conv layer of the last batch: measured input sparsity, path taken, kernel."""
        return self.executor.last_trace

    def forward_bucket(self, x):
        """x already holds a built batch size of images."""
        return self.graph.forward(x) if self.graph is not None else self.executor.forward(x)

    def __call__(self, x):
        import torch
        want = tuple(self.net.input_shape)
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or tuple(x.shape[1:]) != want:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise RunError(f"{self.net.name} takes N x {' x '.join(map(str, want))} images, got {got}")
        if not x.is_cuda or x.dtype != torch.float32:
            raise RunError(f"{self.net.name} takes a float32 CUDA tensor, got {x.dtype} on {x.device}")
        outs = []
        with torch.inference_mode():
            for i in range(0, x.shape[0], self.batch):
                part = x[i:i + self.batch]
                n = part.shape[0]
                bucket = self.cache.bucket(n, self.batch)
                if bucket > n:  # pad with its own images: real data keeps the measured sparsity representative
                    part = torch.cat([part, part[torch.arange(bucket - n, device=part.device) % n]])
                outs.append(self.forward_bucket(part)[:n])
        return outs[0] if len(outs) == 1 else torch.cat(outs)

