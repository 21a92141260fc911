"""Stand-ins for the cost model and the emitter (docs/interfaces.md, plan and source), for the build's
tests: they follow the contracts, and their CUDA sources are real so nvcc, make, the cache and the
ptxas parser are really exercised."""
from __future__ import annotations

from dataclasses import dataclass, field

from snn.codegen.build import Stages
from snn.codegen.config import KernelConfig
from snn.codegen.emit import render_epilogue


@dataclass(frozen=True)
class GPU:
    name: str = "h100"
    arch: str = "sm_90"


@dataclass
class Choice:
    config: KernelConfig
    predicted_us: float
    alternatives: tuple = ()

    def candidates(self):
        return [(self.config, self.predicted_us)] + [(a.config, a.predicted_us) for a in self.alternatives]


@dataclass
class LayerPlan:
    layer: object
    choices: dict


@dataclass
class Plan:
    layers: list


@dataclass
class EmittedKernel:
    name: str
    source: str
    steps: list
    workspace: dict
    weight_layout: str = "CRSN"
    epilogue: bool = False
    input_layout: str = "NHWC"


def fake_config(shape, level) -> KernelConfig:
    """Two configs per shape: sparser levels get a bigger tile (so levels share kernels)."""
    return KernelConfig(2, 2, 8, 64, 1) if level < 0.65 else KernelConfig(4, 4, 8, 64, 2)


@dataclass
class FakePlanner:
    calls: list = field(default_factory=list)
    config_fn: object = fake_config
    alt_fn: object = None         # (shape, level) -> alternative KernelConfigs (build --candidates)

    def __call__(self, net, gpu, batch, levels, model="snn"):
        self.calls.append(batch)
        memo = {}
        layers = []
        for layer in net.convs:
            if layer.shape not in memo:  # identical shapes planned once, as the contract says
                def choice(lv, t):
                    alts = self.alt_fn(layer.shape, lv) if self.alt_fn else []
                    return Choice(self.config_fn(layer.shape, lv), t,
                                  tuple(Choice(c, round(t * (1.1 + 0.1 * i), 3)) for i, c in enumerate(alts)))
                memo[layer.shape] = {round(lv, 2): choice(lv, round(layer.shape.macs * batch / 1e6 * (1 - lv), 3))
                                     for lv in levels}
            layers.append(LayerPlan(layer, memo[layer.shape]))
        return Plan(layers)


KERNEL = """// fake sparse conv {name}
extern "C" __global__ void {name}(const float* __restrict__ input, const float* __restrict__ weight,
                                  float* __restrict__ output) {{
  constexpr int C = {C}, N = {N}, TOTAL = {total};
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < TOTAL) output[i] = input[i % C] * weight[i % N] + {extra}f;
}}
"""

# Dynamically indexed local array: ptxas must give it a stack frame.
STACKY = """
extern "C" __global__ void {name}(const float* __restrict__ input, const float* __restrict__ weight,
                                  float* __restrict__ output) {{
  float tile[64];
  const int n = (int)weight[0];  // a runtime trip count: tile cannot be unrolled into registers
  for (int k = 0; k < n; k++) tile[k & 63] = input[k * {C}];
  output[threadIdx.x] = tile[threadIdx.x & 63];
}}
"""

EPILOGUE = """
extern "C" __global__ void snn_epilogue(const float* in, const float* scale, const float* shift,
    const float* residual, float* out, unsigned long long* zeros, long long total, int C, int relu) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= total) return;
  float v = in[i] * scale[i % C] + shift[i % C] + (residual ? residual[i] : 0.f);
  if (relu) v = fmaxf(v, 0.f);
  out[i] = v;
  if (zeros && v == 0.f) atomicAdd(zeros, 1ull);
}
"""


@dataclass
class FakeRenderer:
    calls: list = field(default_factory=list)
    extra: str = "0.0"            # change it to change every source (or only those in `only`)
    only: set | None = None
    stacky: set = field(default_factory=set)   # kernel names to render with a stack frame
    broken: set = field(default_factory=set)   # kernel names to render with a syntax error

    def __call__(self, shape, batch, config):
        name = config.name(shape, batch)
        self.calls.append(name)
        total = batch * shape.N * shape.P * shape.Q
        if name in self.broken:
            src = f'extern "C" __global__ void {name}() {{ this is not C++; }}\n'
        elif name in self.stacky:
            src = STACKY.format(name=name, C=shape.C)
        else:
            extra = self.extra if self.only is None or name in self.only else FakeRenderer.extra
            src = KERNEL.format(name=name, C=shape.C, N=shape.N, total=total, extra=extra)
        steps = [{"op": "memset", "buffer": "output"},
                 {"op": "launch", "function": name, "grid": [(total + 255) // 256, 1, 1], "block": [256, 1, 1],
                  "smem": 0, "args": ["input", "weight", "output"]}]
        return EmittedKernel(name, src, steps, {"ws_vals": 4 * batch * shape.C * shape.H * shape.W})


def fake_estimate(shape, config):
    return (32 + config.th * config.tw * config.nt, 4 * config.tc * 64)


def fake_epilogue(precision="fp32"):
    """The stand-in FP32 epilogue; a 16-bit build's is the real one (it is all such a build compiles)."""
    return ("snn_epilogue", EPILOGUE) if precision == "fp32" else render_epilogue(precision)


def fake_stages(planner=None, renderer=None) -> Stages:
    return Stages(planner or FakePlanner(), renderer or FakeRenderer(), fake_epilogue,
                  fake_estimate, lambda name: GPU(name) if name != "auto" else GPU())


def pretend_spilled(monkeypatch, kernel: str) -> None:
    """The build's spill check (build.problems) reports spills for `kernel`, the real ptxas report for the others."""
    from snn.codegen import build as build_mod
    real = build_mod.problems
    monkeypatch.setattr(build_mod, "problems", lambda rec: ["4 bytes spill stores"] if rec["kernel"] == kernel
                        else real(rec))


def build_small_spec(tmp_path, monkeypatch, text: str, batches: list[int], levels: str = "0.5"):
    """`text` as tmp_path/net.yaml, built for h100 with the real stages (nvcc; cubins cached under tmp_path/cubins)
    into tmp_path/gen: (the spec's path, the BuildResult)."""
    from snn.codegen import build as build_mod
    monkeypatch.setenv("SNN_CACHE_DIR", str(tmp_path / "cubins"))
    spec = tmp_path / "net.yaml"
    spec.write_text(text)
    return spec, build_mod.build_spec(str(spec), "h100", batches, out=tmp_path / "gen", levels=levels)
