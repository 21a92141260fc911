"""The dense baselines `bench e2e` times beside snn: what a PyTorch user would run instead.

Each is the network's PyTorch model (torchvision's where it has one of the spec's name, else the spec run
node by node as an nn.Module), channels_last, in one of four precisions, run three ways:
- eager: the module called as is;
- graph: the module captured once as a CUDA graph and replayed;
- compile: torch.compile with inductor, freezing on, `mode="reduce-overhead"` (CUDA graphs), static shapes.
Precisions: fp32 (TF32 off: exact FP32, snn's own precision), tf32 (PyTorch's default for convolutions),
fp16 and bf16 (weights and inputs cast). A baseline that cannot run says why in the document, it is never
dropped silently. torch is imported by the caller's Env, never at module import.
"""
from __future__ import annotations

import copy
import time

from ..errors import RunError

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
KINDS = ("eager", "graph", "compile")
EXACT = "fp32"  # snn's precision: the baseline of "the same precision" is the fastest of these


def parse_choice(text: str, allowed: tuple[str, ...], option: str) -> list[str]:
    vals = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    bad = [v for v in vals if v not in allowed]
    if not vals or bad:
        raise RunError(f"{option} {text!r}: expected a comma list of {', '.join(allowed)}")
    return [a for a in allowed if a in vals]


def name(kind: str, precision: str) -> str:
    return f"{'torch.compile' if kind == 'compile' else 'torch_' + kind}_{precision}"


def compile_unavailable(torch) -> str | None:
    """Why torch.compile (inductor on CUDA) cannot run here, or None."""
    try:
        import torch._dynamo  # noqa: F401
        import torch._inductor.config  # noqa: F401
    except Exception as e:
        return f"torch.compile unavailable: {type(e).__name__}: {str(e)[:200]}"
    try:
        from torch.utils._triton import has_triton
        if not has_triton():
            return "torch.compile unavailable: triton is not installed (inductor needs it on CUDA)"
    except Exception as e:
        return f"torch.compile unavailable: cannot check for triton ({type(e).__name__})"
    return None


def spec_module(torch, net, sd):
    """The spec as an nn.Module: the node-by-node forward of measure.inputs over the state dict's tensors,
    held as buffers so .to(dtype) and torch.compile's freezing treat them as the model's weights."""
    from .inputs import forward

    class SpecModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.keys = sorted(sd)
            for i, k in enumerate(self.keys):
                self.register_buffer(f"t{i}", sd[k].detach().clone())

        def forward(self, x):
            params = {k: getattr(self, f"t{i}") for i, k in enumerate(self.keys)}
            return forward(net, params, x)[0]

    return SpecModule().eval()


def model_for(env, net, sd) -> tuple[object, str]:
    """(FP32 model on the device, channels_last; where it comes from)."""
    torch = env.torch
    try:
        import torchvision
        model = torchvision.models.get_model(net.name, weights=None)
        missing, unexpected = model.load_state_dict({k: v.cpu() for k, v in sd.items()}, strict=False)
        missing = [k for k in missing if not k.endswith("num_batches_tracked")]
        if missing or unexpected:
            raise ValueError(f"torchvision's {net.name} does not match the spec ({(missing + unexpected)[:3]})")
        src = f"torchvision.models.{net.name}"
    except Exception as e:
        model = spec_module(torch, net, sd)
        src = f"the spec as a PyTorch module (torchvision: {type(e).__name__}: {str(e)[:120]})"
    return model.eval().to(env.device).to(memory_format=torch.channels_last), src


DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


class Baselines:
    """The baseline variants of one network, one at a time: `variants(sets)` yields (name, meta, fn, xs)
    with the precision already set; the caller times fn over xs before asking for the next (a compiled
    model's caches are reset before the next compile)."""

    def __init__(self, env, net, sd, precisions, kinds, log=print):
        self.env, self.net, self.precisions, self.kinds, self.log = env, net, precisions, kinds, log
        self.model, self.source = model_for(env, net, sd)
        self.notes: dict[str, str] = {}
        self.compile_why = None
        if "compile" in kinds:
            self.compile_why = ("torch.compile not run on the CPU dry run" if env.cpu
                                else compile_unavailable(env.torch))
        if "graph" in kinds and env.cpu:
            self.notes["graph"] = "CUDA graphs not run on the CPU dry run"

    def _model(self, precision):
        torch = self.env.torch
        if precision in ("fp32", "tf32"):
            return self.model
        return copy.deepcopy(self.model).to(getattr(torch, DTYPES[precision]))

    def variants(self, sets):
        torch, env = self.env.torch, self.env
        for p in self.precisions:
            dt = getattr(torch, DTYPES[p])
            xs = [x.to(dt).contiguous(memory_format=torch.channels_last) for x in sets]
            model = self._model(p)
            for kind in self.kinds:
                n = name(kind, p)
                meta = {"precision": p, "kind": kind, "model": self.source}
                env.set_tf32(p == "tf32")
                try:
                    if kind == "eager":
                        yield n, meta, model, xs
                    elif kind == "graph" and not env.cpu:
                        yield n, meta, _graphed(torch, model, xs[0]), xs
                    elif kind == "compile" and self.compile_why is None:
                        fn, secs = _compiled(torch, model, xs[0])
                        meta["compile_s"] = round(secs, 1)
                        self.log(f"  {n}: compiled in {secs:.1f} s")
                        yield n, meta, fn, xs
                        torch._dynamo.reset()  # frees its CUDA graphs before the next compile
                    elif kind == "compile":
                        self.notes[n] = self.compile_why
                except Exception as e:  # a baseline that fails says so; the others still run
                    self.notes[n] = f"{kind} {p} failed: {type(e).__name__}: {str(e)[:300]}"
                    self.log(f"  {n}: {self.notes[n]}")
                finally:
                    env.set_tf32(False)
            del model, xs


def _graphed(torch, model, example):
    static_x = example.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = model(static_x)

    def run(x):
        static_x.copy_(x)
        g.replay()
        return static_y
    return run


def _compiled(torch, model, example):
    """torch.compile as a deployment would use it: inductor, freezing (weights as constants, conv+BN folded),
    CUDA graphs through mode="reduce-overhead", static shapes. Returns (fn, seconds to the first replay)."""
    import torch._inductor.config as icfg
    torch._dynamo.reset()
    icfg.freezing = True
    t0 = time.perf_counter()
    cm = torch.compile(model, mode="reduce-overhead", dynamic=False)
    for _ in range(3):  # compile, then record the CUDA graph, then replay
        cm(example)
    torch.cuda.synchronize()
    return cm, time.perf_counter() - t0


def strongest(times: dict[str, dict], precision: str | None = None) -> tuple[str | None, float | None]:
    """(name, ms) of the fastest baseline, of one precision or of all."""
    c = [(v["median_ms"], k) for k, v in times.items() if precision is None or v.get("precision") == precision]
    if not c:
        return None, None
    ms, k = min(c)
    return k, ms
