"""`snn-run bench layers|e2e`: the sparse path against cuDNN, timed per docs/bench.md.

What is in each number (the same in the JSON, the plots and the summary):
- `sparse`: every step the manifest lists for the layer's kernel (memset if any, the launch(es); the
  dense->compact conversion is fused into the conv kernel). No bias, no ReLU.
- `dense_fp32` / `dense_tf32`: one cuDNN convolution (`F.conv2d`, no bias), `cudnn.benchmark=True`,
  NHWC; with `nchw`, also NCHW, and the best of the two formats is the baseline.
- `epilogue`: the `snn_epilogue` launch that adds the bias and applies the ReLU in place on the conv
  output (`epilogue_count`: the same, also counting zeros, which the sparse path needs). Both paths of
  the executor run it after the conv, so it is reported apart and added to both sides where a
  "with epilogue" number is shown.
Timing: CUDA events around each run, an L2 flush (a write of 2x the L2 size) before each run, the GPU
held back by a sleep kernel so host launch overhead stays out, warm-up, median of `reps` runs,
rotating input sets. Inputs: each layer's real pre-activation on photos, thresholded per layer to
the level (ReLU(z - q), q the level's quantile of z), so the zero pattern is that of real activations.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

from snn.codegen.spec import Network, load_spec

from .dispatch import DECISION_COST_US
from .errors import RunError

SCHEMA = 1
N_SETS = 4            # rotating input sets per measurement
_CYCLES_PER_US = 2000  # above any H100/H200 SM clock: the sleep is long enough


# ---------------------------------------------------------------- parsing and small maths (no torch)
def parse_batches(text: str) -> list[int]:
    try:
        out = sorted({int(t) for t in str(text).split(",") if t.strip()})
    except ValueError:
        raise RunError(f"--batch {text!r}: expected a comma list of positive integers, e.g. 1,8,32") from None
    if not out or out[0] < 1:
        raise RunError(f"--batch {text!r}: expected a comma list of positive integers, e.g. 1,8,32")
    return out


def parse_levels(text: str) -> list[float]:
    from snn.codegen.costmodel import parse_levels as _parse
    from snn.codegen.errors import UserError
    try:
        return sorted(set(_parse(text)))
    except UserError as e:
        raise RunError(str(e)) from None


def parse_profile(text: str | None) -> list[float] | None:
    """'0.7' or a per-stage comma list '0.5,0.6,0.7,0.8' -> targets; None stays None."""
    if text is None:
        return None
    try:
        vals = [float(t) for t in str(text).split(",") if t.strip()]
    except ValueError:
        vals = []
    if not vals or any(not 0.0 <= v < 1.0 for v in vals):
        raise RunError(f"--sparsity-profile {text!r}: expected one sparsity in [0, 1) or a comma list of them "
                       f"(one per stage), e.g. 0.7 or 0.5,0.6,0.7,0.8")
    return vals


def stage_targets(n: int, profile: list[float]) -> list[float]:
    """Target per ReLU, in network order: the ReLUs split into len(profile) consecutive stages as
    evenly as possible (earlier stages get the extra one)."""
    k = len(profile)
    base, extra = divmod(n, k)
    out: list[float] = []
    for i, t in enumerate(profile):
        out += [t] * (base + (1 if i < extra else 0))
    return out


def level_key(level: float) -> str:
    return f"{level:.2f}"


def geomean(xs) -> float | None:
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def lowest_winning_level(pairs: dict[float, tuple[float, float]]) -> float | None:
    """pairs: level -> (sparse_us, dense_us). The lowest level from which the sparse path is faster at
    that level and at every higher measured level (one noisy win below a loss does not count);
    None if it never wins at the highest level."""
    best = None
    for level in sorted(pairs, reverse=True):
        s, d = pairs[level]
        if s is None or d is None or not s < d:
            break
        best = level
    return best


def stats(times_us: list[float]) -> dict:
    a = np.asarray(times_us, dtype=float)
    return {"median_us": round(float(np.median(a)), 3), "p10_us": round(float(np.percentile(a, 10)), 3),
            "p90_us": round(float(np.percentile(a, 90)), 3), "n": int(a.size),
            "times_us": [round(float(t), 3) for t in a]}


def distinct_shapes(net: Network, names) -> list[dict]:
    """Group conv layers (in network order) by shape: [{'shape': ConvShape, 'layers': [names]}]."""
    want = set(names)
    groups: dict = {}
    for c in net.convs:
        if c.name in want:
            groups.setdefault(c.shape, []).append(c.name)
    return [{"shape": s, "layers": v} for s, v in groups.items()]


def sample_groups(groups: list[dict], max_shapes: int | None, keep=lambda s: s.R > 1) -> list[dict]:
    """At most max_shapes groups: every group whose shape `keep`s (3x3 and larger: the paper's
    target), then evenly spaced others in network order."""
    if not max_shapes or len(groups) <= max_shapes:
        return groups
    kept = [g for g in groups if keep(g["shape"])]
    rest = [g for g in groups if not keep(g["shape"])]
    room = max(0, max_shapes - len(kept))
    if room and rest:
        step = len(rest) / room
        rest = [rest[int(i * step)] for i in range(min(room, len(rest)))]
    else:
        rest = []
    chosen = {id(g) for g in kept + rest}
    return [g for g in groups if id(g) in chosen]


def shape_label(shape) -> str:
    st = f"/{shape.stride[0]}" if shape.stride[0] != 1 else ""
    return f"{shape.R}x{shape.S}{st} {shape.C}->{shape.N} @{shape.H}x{shape.W}"


def git_commit() -> str | None:
    env = os.environ.get("SNN_GIT_COMMIT")
    if env:
        return env
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                           cwd=Path(__file__).resolve().parents[1])
        return r.stdout.strip() or None if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def write_json(doc: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    return path


# ------------------------------------------------------------------------------------ the device side
def event_median_s(torch, fn, reps: int, warmup: int = 3) -> float:
    """Median seconds of `reps` CUDA-event timings of fn() after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3)
    return statistics.median(ts)


def fp32_peak_tflops(torch) -> float:
    """The measured FP32 ceiling (METHOD.md): an 8192^3 matrix product with TF32 off, median of 10 timings."""
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 8192
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    return round(2 * n ** 3 / event_median_s(torch, lambda: torch.mm(a, b), reps=10) / 1e12, 2)


class Env:
    """torch, the device (CUDA, or the CPU for a dry run), and what the JSON records about them."""

    def __init__(self, cpu_dry_run: bool = False):
        from .cuda import import_torch
        self.torch = torch = import_torch()
        self.cpu = cpu_dry_run
        if cpu_dry_run:
            self.device, self.dev = torch.device("cpu"), None
            self.name, self.cc = "cpu (dry run: timings mean nothing)", (9, 0)
        else:
            from .cuda import Device
            self.dev = Device()
            self.device = torch.device("cuda")
            self.name, self.cc = self.dev.name, self.dev.compute_capability
            torch.backends.cudnn.benchmark = True
        self.set_tf32(False)

    def set_tf32(self, on: bool):
        self.torch.backends.cudnn.allow_tf32 = on
        self.torch.backends.cuda.matmul.allow_tf32 = on

    def backend(self, cache):
        if self.cpu:
            from .executor import TorchBackend
            return TorchBackend()
        from .kernels import CudaBackend
        return CudaBackend(self.dev, cache)

    def sync(self):
        if not self.cpu:
            self.torch.cuda.synchronize()

    def info(self) -> dict:
        torch = self.torch
        d = {"gpu": self.name, "compute_capability": list(self.cc), "torch": torch.__version__,
             "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
             "cuda_runtime": torch.version.cuda, "driver": None, "git_commit": git_commit(),
             "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}
        if not self.cpu:
            p = torch.cuda.get_device_properties(torch.cuda.current_device())
            d["l2_bytes"] = int(getattr(p, "L2_cache_size", 0)) or None
            d["sms"] = p.multi_processor_count
            nv = Nvml.open()
            if nv:
                d.update(nv.describe())
            if not d.get("driver"):
                try:
                    r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True, timeout=20)
                    d["driver"] = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
                except (OSError, subprocess.SubprocessError):
                    pass
        return d

    def fp32_peak_tflops(self) -> float | None:
        return None if self.cpu else fp32_peak_tflops(self.torch)

    def l2_bytes(self) -> int:
        if self.cpu:
            return 0
        p = self.torch.cuda.get_device_properties(self.torch.cuda.current_device())
        return int(getattr(p, "L2_cache_size", 0)) or 50 * 2**20


class Nvml:
    """NVML: driver, clocks and the total-energy counter (mJ). Through nvidia-ml-py (pynvml) when it
    imports, else straight from libnvidia-ml.so.1 with ctypes (the counter needs nothing more)."""

    def __init__(self, mod=None, handle=None, lib=None):
        self.m, self.h, self.lib = mod, handle, lib

    @classmethod
    def open(cls):
        import torch
        index = torch.cuda.current_device()
        if os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip().isdigit():
            index = int(os.environ["CUDA_VISIBLE_DEVICES"].split(",")[index].strip())
        try:
            import pynvml as m
            m.nvmlInit()
            return cls(m, m.nvmlDeviceGetHandleByIndex(index))
        except Exception:
            pass
        try:
            import ctypes
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return None
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(h)) != 0:
                return None
            return cls(None, h, lib)
        except Exception:
            return None

    def describe(self) -> dict:
        d = {"nvml": "pynvml" if self.m else "ctypes"}
        if self.m is None:
            import ctypes
            buf = ctypes.create_string_buffer(96)
            if self.lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == 0:
                d["driver"] = buf.value.decode()
            return d
        m, h = self.m, self.h
        for key, fn in (("driver", lambda: m.nvmlSystemGetDriverVersion()),
                        ("sm_clock_max_mhz", lambda: m.nvmlDeviceGetMaxClockInfo(h, m.NVML_CLOCK_SM)),
                        ("power_limit_w", lambda: m.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0)):
            try:
                v = fn()
                d[key] = v.decode() if isinstance(v, bytes) else v
            except Exception:
                pass
        return d

    def energy_mj(self) -> int | None:
        try:
            if self.m is not None:
                return int(self.m.nvmlDeviceGetTotalEnergyConsumption(self.h))
            import ctypes
            v = ctypes.c_ulonglong()
            if self.lib.nvmlDeviceGetTotalEnergyConsumption(self.h, ctypes.byref(v)) != 0:
                return None
            return int(v.value)
        except Exception:
            return None


class Timer:
    """Median-of-many device timing with an L2 flush before each run (module docstring)."""

    def __init__(self, env: Env, reps: int = 30, warmup: int = 5):
        self.env, self.reps, self.warmup = env, reps, warmup
        torch = env.torch
        self.flush_buf = None if env.cpu else torch.empty(2 * env.l2_bytes() // 4, dtype=torch.float32,
                                                         device=env.device)
        self.last: dict = {}

    def flush(self):
        if self.flush_buf is not None:
            self.flush_buf.zero_()

    def __call__(self, fns) -> list[float]:
        """fns: callables run in rotation; returns `reps` times in microseconds."""
        torch, k = self.env.torch, len(fns)
        for i in range(self.warmup):
            self.flush()
            fns[i % k]()
        self.env.sync()
        if self.env.cpu:
            out = []
            for i in range(self.reps):
                t = time.perf_counter()
                fns[i % k]()
                out.append((time.perf_counter() - t) * 1e6)
            return out
        out, self.last = event_times_us(torch, fns, self.flush, self.reps, self.env.sync)
        return out


def event_times_us(torch, fns, flush, reps: int, sync) -> tuple[list[float], dict]:
    """`reps` CUDA-event times (µs) of fns run in rotation, each after flush(), with the GPU kept behind the host
    by a sleep kernel sized to the measured host cost of one run, so launch latency stays out of the events (a
    flush alone covers ~90 µs: enqueueing a memset and a launch through cuda-python can take longer, and a
    batch-1 kernel then times the host). Returns (times, {"host_enqueue_us", "sleep_us"})."""
    k = len(fns)
    t0 = time.perf_counter()  # host cost of enqueueing one run, measured on an idle GPU after the warm-up
    for i in range(3):
        flush()
        fns[i % k]()
    host_us = (time.perf_counter() - t0) * 1e6 / 3
    sync()
    info = {"host_enqueue_us": round(host_us, 2)}
    has_sleep = hasattr(torch.cuda, "_sleep")
    out = []
    chunk = 64  # events + launches queued per chunk: well under the launch queue's depth
    for c0 in range(0, reps, chunk):
        n = min(chunk, reps - c0)
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        if has_sleep:
            sleep_us = min(100.0 + 1.5 * n * host_us, 200_000.0)
            torch.cuda._sleep(int(sleep_us * _CYCLES_PER_US))
            info["sleep_us"] = round(sleep_us, 1)
        for i in range(n):
            flush()
            ev[i][0].record()
            fns[(c0 + i) % k]()
            ev[i][1].record()
        torch.cuda.synchronize()
        out += [a.elapsed_time(b) * 1e3 for a, b in ev]
    return out, info


def load_image_pool(net: Network, images_dir: str | None, n: int, seed: int = 0):
    """[n, C, H, W] CPU float32 images and a description: photos from images_dir (and their mirror
    images, then repeated, to reach n), or smooth synthetic images when no folder is given."""
    from . import images, weights
    torch = __import__("torch")
    c, h, w = net.input_shape
    if not images_dir:
        return weights.synthetic_images(n, net.input_shape, seed), {"source": "synthetic", "n": n}
    try:
        paths, _ = images.discover(images_dir)
    except FileNotFoundError as e:
        raise RunError(str(e)) from None
    arrays, used, skipped = [], [], []
    for p in paths:
        try:
            arrays.append(images.preprocess(p, size=h, resize=max(h, round(h * 256 / 224))))
            used.append(p.name)
        except (ValueError, OSError) as e:
            skipped.append(f"{p.name}: {e}")
    if not arrays:
        raise RunError(f"{images_dir}: no decodable images")
    x = torch.from_numpy(np.stack(arrays))
    if x.shape[1] != c:
        raise RunError(f"{images_dir}: images have {x.shape[1]} channels, {net.name} needs {c}")
    x = torch.cat([x, torch.flip(x, dims=[3])])  # mirror images: twice the distinct inputs
    idx = [i % x.shape[0] for i in range(max(n, 1))]
    return x[idx].contiguous(), {"source": str(images_dir), "photos": used, "skipped": skipped,
                                 "distinct": int(x.shape[0]), "n": n, "mirrored": True}


def quantile(z, q: float) -> float:
    torch = __import__("torch")
    flat = z.detach().reshape(-1).float()
    if flat.numel() > (1 << 22):  # torch.quantile's size limit; a 4M sample places q within ~0.05 %
        g = torch.Generator(device=flat.device).manual_seed(0)
        flat = flat[torch.randint(0, flat.numel(), (1 << 22,), generator=g, device=flat.device)]
    return float(torch.quantile(flat, q).item())


def relu_sources(net: Network) -> dict[str, set[str]]:
    """conv name -> the ReLU nodes whose outputs its input is made of (through maxpool/concat)."""
    nodes = {n.name: n for n in net.nodes}

    def walk(v):
        n = nodes.get(v)
        if n is None:
            return None
        if n.op == "relu":
            return {v}
        if n.op == "maxpool":
            return walk(n.inputs[0])
        if n.op == "concat":
            parts = [walk(i) for i in n.inputs]
            return None if any(p is None for p in parts) else set().union(*parts)
        return None

    out = {}
    for c in net.convs:
        r = walk(c.input)
        if r:
            out[c.name] = r
    return out


def forward(net: Network, sd: dict, x, keep=(), on_relu=None):
    """Node-by-node NCHW FP32 forward (as executor.reference) that also returns, for each conv in
    `keep` whose input is ReLU-derived, that input's pre-activation z (input == ReLU(z)).
    on_relu(node, z) -> z' may move z before the ReLU (the sparsity profile)."""
    torch = __import__("torch")
    F = torch.nn.functional
    last: dict[str, int] = {}
    for i, n in enumerate(net.nodes):
        for v in n.inputs:
            last[v] = i
    p = lambda n, k: sd[f"{n.param}.{k}"]  # noqa: E731
    env, pre, kept = {net.input_name: x}, {}, {}
    for i, n in enumerate(net.nodes):
        v = [env[k] for k in n.inputs]
        if n.op == "conv":
            if n.name in keep and n.inputs[0] in pre:
                kept[n.name] = pre[n.inputs[0]]
            y = F.conv2d(v[0], p(n, "weight"), p(n, "bias") if n["bias"] else None, n["stride"], n["padding"],
                         1, n["groups"])
        elif n.op == "batchnorm":
            y = F.batch_norm(v[0], p(n, "running_mean"), p(n, "running_var"), p(n, "weight"), p(n, "bias"),
                             False, 0.0, n["eps"])
        elif n.op == "relu":
            z = on_relu(n, v[0]) if on_relu else v[0]
            y = torch.relu(z)
            pre[n.name] = z
        elif n.op in ("maxpool", "avgpool"):
            pool = F.max_pool2d if n.op == "maxpool" else F.avg_pool2d
            y = pool(v[0], n["kernel"], n["stride"], n["padding"], ceil_mode=n["ceil_mode"])
            if n.op == "maxpool" and n.inputs[0] in pre:  # max commutes with the ReLU
                pre[n.name] = pool(pre[n.inputs[0]], n["kernel"], n["stride"], n["padding"], ceil_mode=n["ceil_mode"])
        elif n.op == "adaptive_avgpool":
            y = F.adaptive_avg_pool2d(v[0], n["output_size"])
        elif n.op == "global_avgpool":
            y = F.adaptive_avg_pool2d(v[0], 1)
        elif n.op == "add":
            y = v[0]
            for t in v[1:]:
                y = y + t
        elif n.op == "concat":
            y = torch.cat(v, 1)
            if all(k in pre for k in n.inputs):
                pre[n.name] = torch.cat([pre[k] for k in n.inputs], 1)
        elif n.op == "flatten":
            y = torch.flatten(v[0], 1)
        elif n.op == "linear":
            y = F.linear(v[0], p(n, "weight"), p(n, "bias") if n["bias"] else None)
        else:  # pragma: no cover
            raise RunError(f"op '{n.op}' unknown to the bench forward")
        env[n.name] = y
        for k in n.inputs:
            if last.get(k) == i and k != net.output:
                env.pop(k, None)
                pre.pop(k, None)
    return env[net.output], kept


def shift_target(net: Network, relu_name: str) -> str | None:
    """The parameter whose shift moves this ReLU's input by the same amount: the bias of the BN (or
    biased conv/linear) that feeds it, or of a BN that feeds the add that feeds it."""
    nodes = {n.name: n for n in net.nodes}
    src = nodes.get(nodes[relu_name].inputs[0])
    if src is None:
        return None
    if src.op == "add":
        for i in src.inputs:
            m = nodes.get(i)
            if m is not None and (m.op == "batchnorm" or (m.op == "conv" and m["bias"])):
                src = m
                break
        else:
            return None
    if src.op == "batchnorm" or (src.op in ("conv", "linear") and src["bias"]):
        return f"{src.param}.bias"
    return None


def apply_profile(net: Network, sd: dict, x, profile: list[float]) -> tuple[dict, list[dict]]:
    """Shift the bias feeding each ReLU whose output reaches a conv so that the ReLU's output on the
    images x has the target sparsity (one pass in network order: each shift sees the earlier ones).
    Returns the new tensors and one record per ReLU."""
    torch = __import__("torch")
    feeding = sorted(set().union(*relu_sources(net).values()), key=[n.name for n in net.nodes].index) \
        if relu_sources(net) else []
    targets = dict(zip(feeding, stage_targets(len(feeding), profile))) if feeding else {}
    sd = dict(sd)
    report: list[dict] = []

    def on_relu(n, z):
        if n.name not in targets:
            return z
        t = targets[n.name]
        param = shift_target(net, n.name)
        rec = {"relu": n.name, "target": t, "param": param, "before": float((z <= 0).float().mean().item())}
        if param is None:
            rec.update(shift=0.0, after=rec["before"], note="no bias to shift")
        else:
            q = quantile(z, t)
            sd[param] = sd[param] - q
            z = z - q
            rec.update(shift=-q, after=float((z <= 0).float().mean().item()))
        report.append(rec)
        return z

    with torch.inference_mode():
        forward(net, sd, x, on_relu=on_relu)
    return sd, report


def at_level(z, level: float):
    """ReLU(z - q), q the level's quantile of z: the zero pattern of the real activation, thresholded."""
    torch = __import__("torch")
    return torch.relu(z - quantile(z, level)).contiguous(memory_format=torch.channels_last)


def _load_caches(env: Env, net, spec, cache_dir, gpu, batches):
    from . import manifest
    path = manifest.locate(cache_dir, net, spec, gpu, batches[0], env.name, env.cc)
    return path, {b: manifest.load(path, net, spec, b, env.cc) for b in batches}


def _weights(env: Env, net, weights_arg, seed):
    from . import weights
    sd, _, warning = weights.load(net, weights_arg, seed, device=str(env.device))
    return {k: v.to(env.device) for k, v in sd.items()}, warning


# ------------------------------------------------------------------------------------- bench layers
def measure_layer(env: Env, timer: Timer, backend, cache, kernel: str, shape, weight, sets, nchw: bool,
                  check: bool = True, dense: bool = True) -> dict:
    """Time the sparse kernel and cuDNN (FP32, TF32; NHWC, and NCHW if asked; none if not `dense`) on the
    same input sets."""
    from .lower import to_layout
    torch = env.torch
    F = torch.nn.functional
    cl = torch.channels_last
    B = sets[0].shape[0]
    kentry = cache.kernel(kernel)
    wk = to_layout(weight, kentry.get("weight_layout", "NCRS"))
    ws = {k: torch.empty(max(1, int(v)), dtype=torch.uint8, device=env.device)
          for k, v in (kentry.get("workspace") or {}).items()}
    out = torch.empty((B, shape.N, shape.P, shape.Q), device=env.device, memory_format=cl)
    rec: dict = {"kernel": kernel}
    if check:  # poisoned output, then sparse vs cuDNN FP32 on set 0: a wrong kernel is not timed silently
        out.fill_(float("nan"))
        backend.sparse_conv(kernel, kentry, sets[0], wk, out, ws, shape)
        ref = F.conv2d(sets[0], weight, None, shape.stride, shape.padding)
        env.sync()
        err = float((torch.linalg.vector_norm((out - ref).double()) /
                     torch.linalg.vector_norm(ref.double()).clamp_min(1e-30)).item())
        rec["rel_err_vs_cudnn_fp32"] = err if math.isfinite(err) else None
        rec["nan_in_output"] = bool(torch.isnan(out).any().item())
    w_cl = weight.contiguous(memory_format=cl)
    times, hosts = {}, {}

    def run(name, fns, tf32=False):
        env.set_tf32(tf32)
        times[name] = timer(fns)
        hosts[name] = dict(timer.last)  # host enqueue cost and the sleep that hid it
        env.set_tf32(False)

    run("sparse", [lambda x=x: backend.sparse_conv(kernel, kentry, x, wk, out, ws, shape) for x in sets])
    fns = [lambda x=x: F.conv2d(x, w_cl, None, shape.stride, shape.padding) for x in sets]
    if dense:
        run("dense_fp32_nhwc", fns)
        run("dense_tf32_nhwc", fns, True)
    if dense and nchw:
        xs = [x.contiguous() for x in sets]
        w = weight.contiguous()
        dn = [lambda x=x: F.conv2d(x, w, None, shape.stride, shape.padding) for x in xs]
        run("dense_fp32_nchw", dn)
        run("dense_tf32_nchw", dn, True)
        del xs
    rec["times"] = {k: stats(v) for k, v in times.items()}
    rec["host"] = hosts
    return rec


def measure_epilogue(env: Env, timer: Timer, backend, shape, B) -> dict:
    torch = env.torch
    out = torch.rand((B, shape.N, shape.P, shape.Q), device=env.device).contiguous(memory_format=torch.channels_last)
    bias = torch.randn(shape.N, device=env.device) * 0.01
    counters = torch.zeros(1, dtype=torch.int64, device=env.device)
    res = {"epilogue": timer([lambda: backend.epilogue(out, None, bias, None, out, None, None, True)]),
           "epilogue_count": timer([lambda: backend.epilogue(out, None, bias, None, out, counters, 0, True)])}
    return {k: stats(v) for k, v in res.items()}


def derive_layer(rec: dict) -> dict:
    """Best-of-format baselines and speedups from one level record's medians."""
    t = {k: v["median_us"] for k, v in rec["times"].items()}
    d = {"dense_fp32_us": min(v for k, v in t.items() if k.startswith("dense_fp32")),
         "dense_tf32_us": min(v for k, v in t.items() if k.startswith("dense_tf32")),
         "sparse_us": t["sparse"]}
    d["speedup_fp32"] = round(d["dense_fp32_us"] / d["sparse_us"], 4)
    d["speedup_tf32"] = round(d["dense_tf32_us"] / d["sparse_us"], 4)
    return d


def useful_tflops(macs: int, sparsity: float, us: float) -> float:
    """Non-zero work only (issue 7, target 5): 2 FLOPs per multiply-accumulate whose input is not zero."""
    return round(2 * macs * (1.0 - sparsity) / us / 1e6, 3)


def limit_rows(doc: dict) -> list[dict]:
    """Per shape and batch: useful TFLOP/s at each level, its share of the document's measured FP32 peak, and
    the time at the highest level (the fixed cost when that level is ~0.99). Empty for documents from before
    these were recorded."""
    peak = doc.get("fp32_peak_tflops")
    rows = []
    for s in doc["shapes"]:
        for B, b in s["batches"].items():
            lv = {k: r for k, r in b["levels"].items() if "useful_tflops" in r}
            if not lv:
                continue
            top = max(lv, key=float)
            rows.append({"label": s["label"], "batch": int(B),
                         "useful_tflops": {k: r["useful_tflops"] for k, r in lv.items()},
                         "share": {k: r["useful_tflops"] / peak for k, r in lv.items()} if peak else {},
                         "top_level": top, "top_level_us": lv[top]["sparse_us"]})
    return rows


def bench_layers(spec: str, cache_dir: str, gpu: str, batches: list[int], levels: list[float],
                 images_dir: str | None, weights_arg: str | None = None, seed: int = 0, reps: int = 30,
                 warmup: int = 5, nchw: bool = True, max_shapes: int | None = None, only=(),
                 bar=None, cpu_dry_run: bool = False, log=print, checkpoint=None) -> dict:
    """bar(total) -> a context manager with .update(n) (click.progressbar), or None; checkpoint(doc)
    is called after every shape with the document so far (`complete` false until the end)."""
    import contextlib
    net = load_spec(spec)
    env = Env(cpu_dry_run)
    torch = env.torch
    mpath, caches = _load_caches(env, net, spec, cache_dir, gpu, batches)
    c0 = caches[batches[0]]
    sources = relu_sources(net)
    names = [c.name for c in net.convs if c.name in c0.layers and c.name in sources
             and (not only or c.name in only)]
    unknown = set(only) - {c.name for c in net.convs}
    if unknown:
        raise RunError(f"--layer {sorted(unknown)[0]}: {spec} has no conv layer of that name")
    groups = sample_groups(distinct_shapes(net, names), max_shapes)
    sd, warning = _weights(env, net, weights_arg, seed)
    pool, pool_info = load_image_pool(net, images_dir, max(batches), seed)
    with torch.inference_mode():
        _, z_all = forward(net, sd, pool.to(env.device), keep={g["layers"][0] for g in groups})
    timer = Timer(env, reps, warmup)
    doc = {"schema": SCHEMA, "kind": "layers", "network": net.name, "spec": spec, "manifest": str(mpath),
           "environment": env.info(), "weights": weights_arg or "random (seeded, BN calibrated)",
           "weights_warning": warning, "images": pool_info, "batches": batches, "levels": levels,
           "timing": {"reps": reps, "warmup": warmup, "input_sets": N_SETS, "l2_flush_bytes": 2 * env.l2_bytes(),
                      "what": __doc__.split("What is in each number")[1].split("Timing:")[0].strip()},
           "fp32_peak_tflops": env.fp32_peak_tflops(), "complete": False, "shapes": []}
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(pool.shape[0]) for _ in range(N_SETS)]
    with (bar(len(groups) * len(batches) * len(levels)) if bar else contextlib.nullcontext()) as progress, \
            torch.inference_mode():
        for g in groups:
            _bench_group(env, net, sd, timer, caches, batches, levels, g, z_all, perms, nchw, doc,
                         progress.update if progress else None, log)
            if checkpoint:
                checkpoint(doc)
    doc["complete"] = True
    return doc


def _bench_group(env, net, sd, timer, caches, batches, levels, g, z_all, perms, nchw, doc, progress, log):
    from . import dispatch
    torch = env.torch
    rep = g["layers"][0]
    conv = next(c for c in net.convs if c.name == rep)
    shape = conv.shape
    z = z_all.pop(rep)
    weight = sd[f"{conv.param}.weight"].float().contiguous()
    entry = {"label": shape_label(shape), "tag": shape.tag(), "layers": g["layers"], "count": len(g["layers"]),
             "macs": shape.macs, "shape": {k: getattr(shape, k) for k in ("C", "N", "H", "W", "R", "S", "P", "Q")}
             | {"stride": list(shape.stride), "padding": list(shape.padding)}, "batches": {}}
    for B in batches:
        cache = caches[B]
        backend = env.backend(cache)
        le = cache.layer_entry(rep, B)
        sets = [z[torch.as_tensor(p[:B].tolist(), device=z.device) % z.shape[0]] for p in perms]
        bent = {"epilogue": measure_epilogue(env, timer, backend, shape, B), "levels": {}}
        for level in levels:
            kernel = dispatch.choose(le, level, "sparse")
            xs = [at_level(s, level) for s in sets]
            rec = measure_layer(env, timer, backend, cache, kernel, shape, weight, xs, nchw)
            rec["sparsity"] = [round(float((x == 0).float().mean().item()), 4) for x in xs]
            rec.update(derive_layer(rec))
            rec["useful_tflops"] = useful_tflops(shape.macs * B, float(np.mean(rec["sparsity"])), rec["sparse_us"])
            bent["levels"][level_key(level)] = rec
            del xs
            if progress:
                progress(1)
        entry["batches"][str(B)] = bent
        del sets
        if not env.cpu:
            torch.cuda.empty_cache()
    doc["shapes"].append(entry)
    log(f"{net.name} {entry['label']}: " + ", ".join(
        f"b{B} " + "/".join(f"{e['levels'][level_key(lv)]['speedup_fp32']:.2f}" for lv in levels)
        for B, e in ((B, entry["batches"][str(B)]) for B in batches)) + " (speedup vs cuDNN FP32 per level)")


# ----------------------------------------------------------------------------------------- bench e2e
def _torchvision_model(env: Env, net: Network, sd: dict):
    try:
        import torchvision
        model = torchvision.models.get_model(net.name, weights=None)
    except Exception as e:
        return None, f"torchvision has no model '{net.name}' ({type(e).__name__})"
    missing, unexpected = model.load_state_dict({k: v.cpu() for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        return None, f"torchvision's {net.name} does not match the spec ({(missing + unexpected)[:3]})"
    return model.eval().to(env.device).to(memory_format=env.torch.channels_last), None


def _time_forward(env: Env, fn, inputs, reps, warmup) -> list[float]:
    """Wall time of whole forward passes (ms): the host's part counts, as it does for a user."""
    for i in range(warmup):
        fn(inputs[i % len(inputs)])
    env.sync()
    out = []
    for i in range(reps):
        x = inputs[i % len(inputs)]
        env.sync()
        t = time.perf_counter()
        fn(x)
        env.sync()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def _energy(env: Env, nv, fn, inputs, min_s: float = 0.5, min_reps: int = 5) -> dict | None:
    if nv is None or env.cpu:
        return None
    env.sync()
    e0, t0, n = nv.energy_mj(), time.perf_counter(), 0
    if e0 is None:
        return None
    while n < min_reps or time.perf_counter() - t0 < min_s:
        fn(inputs[n % len(inputs)])
        n += 1
    env.sync()
    e1, dt = nv.energy_mj(), time.perf_counter() - t0
    return {"runs": n, "seconds": round(dt, 4), "energy_mj": e1 - e0, "mean_power_w": round((e1 - e0) / 1e3 / dt, 2)}


def _graphed(env: Env, model, example):
    torch = env.torch
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


def _rel_err(torch, y, ref) -> float:
    return float((torch.linalg.vector_norm((y - ref).double()) / torch.linalg.vector_norm(ref.double())).item())


def _trace_rows(trace) -> list[dict]:
    return [{"name": t.name, "sparsity": None if t.sparsity is None else round(t.sparsity, 4),
             "path": t.path, "kernel": t.kernel, "ms_synced": None if t.ms is None else round(t.ms, 4)}
            for t in trace]


def _replay_ms(env: Env, replay, reps: int = 30) -> float:
    """Median GPU time of one graph replay (CUDA events), the number kernel_sum is compared with."""
    return round(event_median_s(env.torch, replay, reps, warmup=1) * 1e3, 4)


def kernel_sum(torch, fn, iters: int = 5) -> dict:
    """GPU time of every kernel/memset/memcpy of one call of `fn`, from CUPTI through torch.profiler:
    what the graph replay would take with no gaps between its nodes (issue 8 compares the two)."""
    try:
        from torch.profiler import ProfilerActivity, profile
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
        total, count = 0.0, 0
        for e in prof.events():
            if str(getattr(e, "device_type", "")).endswith("CUDA"):
                total += e.time_range.elapsed_us()
                count += 1
        return {"kernel_sum_ms": round(total / 1e3 / iters, 4), "activities_per_call": count / iters}
    except Exception as e:  # profiler or CUPTI unavailable: say so
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}


def bench_e2e(spec: str, cache_dir: str, gpu: str, batches: list[int], images_dir: str | None,
              weights_arg: str | None = None, seed: int = 0, profile: list[float] | None = None,
              reps: int = 20, warmup: int = 3, graphs: bool = True, energy: bool = True,
              cpu_dry_run: bool = False, log=print, checkpoint=None) -> dict:
    from .executor import Executor
    net = load_spec(spec)
    env = Env(cpu_dry_run)
    torch = env.torch
    mpath, caches = _load_caches(env, net, spec, cache_dir, gpu, batches)
    sd, warning = _weights(env, net, weights_arg, seed)
    pool, pool_info = load_image_pool(net, images_dir, max(batches), seed)
    pool = pool.to(env.device)
    prof_report = None
    if profile:
        sd, prof_report = apply_profile(net, sd, pool, profile)
    sd_cpu = {k: v.detach().cpu() for k, v in sd.items()}
    nv = Nvml.open() if energy and not env.cpu else None
    doc = {"schema": SCHEMA, "kind": "e2e", "network": net.name, "spec": spec, "manifest": str(mpath),
           "environment": env.info(), "weights": weights_arg or "random (seeded, BN calibrated)",
           "weights_warning": warning, "images": pool_info,
           "sparsity_profile": profile, "sparsity_profile_note": (
               "folded-BN biases shifted so that each ReLU feeding a conv reaches the target sparsity on "
               "the images above: sparsity is SET, not that of trained weights") if profile else None,
           "profile_report": prof_report, "batches": batches,
           "timing": {"reps": reps, "warmup": warmup, "what": (
               "wall time of one forward pass (host included, synchronised), median over reps; inputs "
               "rotate over sets of images. snn: the executor, per layer cuDNN or our kernels by the zero "
               "counter (FP32 exact), as one CUDA graph with the decision taken on the device (runtime/graph.py; "
               "copy in, replay, branches read back), or eager with host dispatch when graphs are off; "
               "snn_eager: the eager path. dense_exec_fp32(_graph): the same executor with every conv on cuDNN "
               "(FP32), eager (graph-replayed). torchvision_*: torchvision's model, channels_last, eager or "
               "CUDA-graph replay. kernel_sum: GPU time of one snn graph replay's kernels (CUPTI) against the "
               "replay's own time (CUDA events).")},
           "energy_available": nv is not None, "complete": False, "runs": {}}
    rng = np.random.default_rng(seed)
    for B in batches:
        cache = caches[B]
        sets = [pool[torch.as_tensor(rng.permutation(pool.shape[0])[:B].tolist(), device=env.device)
                     % pool.shape[0]] for _ in range(3)]
        # the executor folds BN from a CPU state_dict (as weights.load returns it): device tensors
        # there meet its CPU zeros for bias-free convs
        snn = Executor(net, sd_cpu, env.backend(cache), cache, str(env.device), "auto")
        dense = Executor(net, sd_cpu, env.backend(cache), cache, str(env.device), "dense")
        tv, why = _torchvision_model(env, net, sd)
        tv_sets = [x.contiguous(memory_format=torch.channels_last) for x in sets]
        rec: dict = {"times_ms": {}, "energy": {}, "notes": {}}
        with torch.inference_mode():
            tracer = Executor(net, sd_cpu, env.backend(cache), cache, str(env.device), "auto", trace=True)
            y_snn = tracer.forward(sets[0])
            rec["layers"] = _trace_rows(tracer.last_trace)
            y_dense = dense.forward(sets[0])
            rec["rel_err_snn_vs_dense"] = _rel_err(torch, y_snn, y_dense)
            del tracer
            plan = [("snn", snn.forward, sets, False), ("dense_exec_fp32", dense.forward, sets, False)]
            if graphs and not env.cpu:
                # issue 8: snn is the whole forward as one CUDA graph with device-side dispatch; the eager
                # path (host dispatch) and the dense executor graphed are kept beside it
                plan = [("snn_eager", snn.forward, sets, False), ("dense_exec_fp32", dense.forward, sets, False)]
                from .cuda import Device
                from .graph import GraphRunner
                for name, ex in (("snn", snn), ("dense_exec_fp32_graph", dense)):
                    try:
                        runner = GraphRunner(ex, Device())
                        y_graph = runner(sets[0])  # captures for this batch size
                        plan.insert(0 if name == "snn" else len(plan), (name, runner, sets, False))
                        if runner.notes:
                            rec["notes"][name + "_dense_layers"] = list(runner.notes)
                        if name == "snn":
                            rec["rel_err_snn_graph_vs_dense"] = _rel_err(torch, y_graph, dense.forward(sets[0]))
                            rec["graph_trace"] = _trace_rows(snn.last_trace)
                            replay = runner.replayer(sets[0])
                            rec["kernel_sum"] = kernel_sum(torch, replay)
                            rec["kernel_sum"]["replay_ms"] = _replay_ms(env, replay)
                            if "kernel_sum_ms" in rec["kernel_sum"]:
                                rec["kernel_sum"]["replay_over_kernel_sum"] = round(
                                    rec["kernel_sum"]["replay_ms"] / rec["kernel_sum"]["kernel_sum_ms"], 4)
                    except Exception as e:  # report it and time the rest; the eager path still answers
                        rec["notes"][name] = f"graph path failed: {type(e).__name__}: {str(e)[:300]}"
                        if name == "snn":
                            plan.insert(0, ("snn", snn.forward, sets, False))
            if tv is not None:
                plan += [("torchvision_fp32", tv, tv_sets, False), ("torchvision_tf32", tv, tv_sets, True)]
                if graphs and not env.cpu:
                    for name, tf32 in (("torchvision_fp32_graph", False), ("torchvision_tf32_graph", True)):
                        env.set_tf32(tf32)
                        try:
                            plan.append((name, _graphed(env, tv, tv_sets[0]), tv_sets, tf32))
                        except Exception as e:  # capture can fail on odd builds; say so, go on
                            rec["notes"][name] = f"graph capture failed: {type(e).__name__}: {str(e)[:200]}"
                        env.set_tf32(False)
            else:
                rec["notes"]["torchvision"] = why
            for name, fn, xs, tf32 in plan:
                env.set_tf32(tf32)
                t = _time_forward(env, fn, xs, reps, warmup)
                rec["times_ms"][name] = {"median_ms": round(statistics.median(t), 4),
                                         "times_ms": [round(v, 4) for v in t]}
                e = _energy(env, nv, fn, xs)
                if e:
                    e["mj_per_image"] = round(e["energy_mj"] / (e["runs"] * B), 3)
                rec["energy"][name] = e
                env.set_tf32(False)
        base = rec["times_ms"]["snn"]["median_ms"]
        rec["speedup_snn_over"] = {k: round(v["median_ms"] / base, 4) for k, v in rec["times_ms"].items() if k != "snn"}
        if rec["energy"].get("snn"):
            rec["energy_ratio_over_snn"] = {k: round(v["mj_per_image"] / rec["energy"]["snn"]["mj_per_image"], 4)
                                            for k, v in rec["energy"].items() if v and k != "snn"}
        sp = [l["sparsity"] for l in rec["layers"] if l["sparsity"] is not None]
        rec["mean_conv_input_sparsity"] = round(float(np.mean(sp)), 4) if sp else None
        rec["sparse_layers"] = sum(1 for l in rec["layers"] if l["path"] == "sparse")
        doc["runs"][str(B)] = rec
        log(f"{net.name} b{B}: snn {base:.3f} ms; " + ", ".join(
            f"{k} {v['median_ms']:.3f} ms" for k, v in rec["times_ms"].items() if k != "snn")
            + f"; {rec['sparse_layers']}/{len(rec['layers'])} convs sparse, mean input sparsity "
            f"{rec['mean_conv_input_sparsity']}")
        del snn, dense, sets, tv_sets
        if not env.cpu:
            torch.cuda.empty_cache()
        if checkpoint:
            checkpoint(doc)
    doc["complete"] = True
    return doc


# ------------------------------------------------------------------------------ summary (no torch)
FIG8_NOTE = ("Model-chosen vs exhaustive-best (paper Fig. 8): not measured in this folder; `snn-run calibrate "
             "--exhaustive --out` into it adds the comparison")


def layer_rows(doc: dict) -> list[dict]:
    """Per batch and level: speedup statistics over the distinct shapes of one layers document."""
    rows = []
    for B in doc["batches"]:
        for lv in doc["levels"]:
            k = level_key(lv)
            recs = [(s, s["batches"][str(B)]) for s in doc["shapes"] if str(B) in s["batches"]]
            recs = [(s, b, b["levels"][k]) for s, b in recs if k in b["levels"]]
            if not recs:
                continue
            fp32 = [r["speedup_fp32"] for _, _, r in recs]
            tf32 = [r["speedup_tf32"] for _, _, r in recs]
            epi = [b["epilogue"]["epilogue"]["median_us"] for _, b, _ in recs]
            epi_c = [b["epilogue"]["epilogue_count"]["median_us"] for _, b, _ in recs]
            both = [(r["dense_fp32_us"] + e) / (r["sparse_us"] + e) for (_, _, r), e in zip(recs, epi)]
            ours = [r["dense_fp32_us"] / (r["sparse_us"] + e) for (_, _, r), e in zip(recs, epi_c)]
            net_dense = sum(s["count"] * r["dense_fp32_us"] for s, _, r in recs)
            net_sparse = sum(s["count"] * r["sparse_us"] for s, _, r in recs)
            errs = [r.get("rel_err_vs_cudnn_fp32") for _, _, r in recs]
            rows.append({"batch": B, "level": lv, "shapes": len(recs),
                         "geomean_fp32": geomean(fp32), "mean_fp32": float(np.mean(fp32)),
                         "geomean_tf32": geomean(tf32), "geomean_fp32_epilogue_both": geomean(both),
                         "geomean_fp32_epilogue_ours": geomean(ours),
                         "weighted_fp32": net_dense / net_sparse if net_sparse else None,
                         "wins_fp32": sum(1 for x in fp32 if x > 1), "wins_tf32": sum(1 for x in tf32 if x > 1),
                         "max_rel_err": max((e for e in errs if e is not None), default=None),
                         "nan_outputs": sum(1 for _, _, r in recs if r.get("nan_in_output"))})
    return rows


def lowest_levels(doc: dict, key: str = "dense_fp32_us") -> list[dict]:
    out = []
    for s in doc["shapes"]:
        row = {"label": s["label"], "count": s["count"], "batches": {}}
        for B, b in s["batches"].items():
            pairs = {float(k): (r["sparse_us"], r[key]) for k, r in b["levels"].items()}
            row["batches"][B] = lowest_winning_level(pairs)
        out.append(row)
    return out


def _f(x, fmt="{:.2f}", none="–"):
    return none if x is None else fmt.format(x)


def strongest_dense(run: dict, tf32: bool = False) -> tuple[str | None, float | None]:
    """The fastest dense variant of one e2e run (eager or graph-replayed, torchvision or our executor
    all-dense), FP32 or TF32: every published e2e ratio is against it (issue 8)."""
    cands = [(v["median_ms"], k) for k, v in run.get("times_ms", {}).items()
             if (k.startswith("torchvision_") or k.startswith("dense_exec_")) and ("tf32" in k) == tf32]
    if not cands:
        return None, None
    ms, name = min(cands)
    return name, ms


def headline(layers: list[dict], e2e: list[dict], cal: list[dict]) -> list[str]:
    """One row per network and batch: what the issue's 'done when' asks for, details below."""
    nets = sorted({d["network"] for d in layers + e2e})
    if not nets:
        return []
    levels = sorted({lv for d in layers for lv in d["levels"]})
    ex = {(d["network"], e["batch"]): [] for d in cal for e in d.get("exhaustive") or []}
    for d in cal:
        for e in d.get("exhaustive") or []:
            if e.get("model_over_best"):
                ex[(d["network"], e["batch"])].append(e["model_over_best"])
    out = ["## Headline", "",
           "Layer columns: geometric-mean speedup of the sparse conv over cuDNN FP32 (best of NHWC/NCHW) over the "
           "distinct conv shapes measured, at each input sparsity; TF32 in brackets. End-to-end columns: snn's "
           "whole-network time against the strongest dense FP32 configuration measured in the same run (the "
           "fastest of torchvision's model and our executor all-dense, eager or CUDA-graph replayed), against the "
           "strongest TF32 one, and the energy per image of that FP32 configuration over snn's (> 1: snn uses "
           "less).", "",
           "| " + " | ".join(["network", "batch"] + [f"layers @{lv:.2f}" for lv in levels] + [
               "e2e vs best dense FP32", "e2e vs best dense TF32", "energy ratio", "model/exhaustive"]) + " |",
           "|---|---|" + "---|" * (len(levels) + 4)]
    for n in nets:
        ld = next((d for d in layers if d["network"] == n), None)
        ed = next((d for d in e2e if d["network"] == n), None)
        rows = layer_rows(ld) if ld else []
        batches = sorted({int(b) for b in (ld["batches"] if ld else [])} | {int(b) for b in (ed["runs"] if ed else {})})
        for B in batches:
            cells = []
            for lv in levels:
                r = next((r for r in rows if r["batch"] == B and abs(r["level"] - lv) < 1e-9), None)
                cells.append(f"{_f(r['geomean_fp32'])} ({_f(r['geomean_tf32'])})" if r else "–")
            run = (ed or {}).get("runs", {}).get(str(B), {})
            sp = run.get("speedup_snn_over", {})
            en = run.get("energy_ratio_over_snn", {})
            r_ex = ex.get((n, B))
            best32, best_tf = strongest_dense(run)[0], strongest_dense(run, tf32=True)[0]
            out.append(f"| {n} | {B} | " + "".join(c + " | " for c in cells) + f"{_f(sp.get(best32))} ({best32 or '–'}) | "
                       f"{_f(sp.get(best_tf))} ({best_tf or '–'}) | {_f(en.get(best32))} | "
                       f"{_f(float(np.mean(r_ex)), '{:.3f}') if r_ex else '–'} |")
    prof = sorted({str(d.get("sparsity_profile")) for d in e2e if d.get("sparsity_profile")})
    if prof:
        out += ["", f"End to end with **sparsity profile {', '.join(prof)}** (biases shifted to set the sparsity; "
                "random weights)."]
    return out + [""]


def summary_markdown(docs: list[dict]) -> str:
    """The Markdown summary of every bench/calibrate document found in one results folder."""
    lines = ["# snn benchmark summary", ""]
    envs = [d["environment"] for d in docs if d.get("environment")]
    if envs:
        e = envs[0]
        lines += [f"GPU: {e.get('gpu')} (driver {e.get('driver', '?')}), torch {e.get('torch')}, cuDNN "
                  f"{e.get('cudnn')}, CUDA {e.get('cuda_runtime')}; commit {e.get('git_commit') or '?'}; "
                  f"measured {e.get('utc')}.", ""]
    layers = [d for d in docs if d.get("kind") == "layers"]
    e2e = [d for d in docs if d.get("kind") == "e2e"]
    cal = [d for d in docs if d.get("kind") == "calibrate"]
    lines += headline(layers, e2e, cal)
    if layers:
        lines += ["## Layers: sparse path vs cuDNN (paper Figs. 10-11)", "",
                  "Per distinct conv shape; inputs are real activations on photos thresholded to the level. "
                  "*Speedup* = cuDNN time / our time, both the convolution alone (best of NHWC/NCHW for "
                  "cuDNN); *+epi both*: the bias+ReLU epilogue added to both sides (both paths run it); "
                  "*+epi ours*: our conv + epilogue with zero counting against cuDNN's conv alone (the "
                  "harshest view); *weighted*: whole-network conv time at that level (each shape times "
                  "its count), cuDNN over ours.", ""]
        for d in layers:
            if not d.get("complete", True):
                lines += [f"**{d['network']}: incomplete (the run was interrupted; the shapes below were measured).**", ""]
            lines += [f"### {d['network']}", "", f"Weights: {d['weights']}. Images: "
                      f"{d['images'].get('source')} ({d['images'].get('distinct', d['images'].get('n'))} distinct).", "",
                      "| batch | level | shapes | geomean vs FP32 | mean vs FP32 | geomean vs TF32 | +epi both | "
                      "+epi ours | weighted vs FP32 | wins FP32 | wins TF32 | max rel err |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for r in layer_rows(d):
                lines.append(f"| {r['batch']} | {r['level']:.2f} | {r['shapes']} | {_f(r['geomean_fp32'])} | "
                             f"{_f(r['mean_fp32'])} | {_f(r['geomean_tf32'])} | {_f(r['geomean_fp32_epilogue_both'])} | "
                             f"{_f(r['geomean_fp32_epilogue_ours'])} | {_f(r['weighted_fp32'])} | "
                             f"{r['wins_fp32']}/{r['shapes']} | {r['wins_tf32']}/{r['shapes']} | "
                             f"{_f(r['max_rel_err'], '{:.1e}')} |")
            lows = lowest_levels(d)
            bs = [str(b) for b in d["batches"]]
            lines += ["", f"Lowest measured level from which each shape beats cuDNN FP32 (levels "
                      f"{', '.join(f'{x:.2f}' for x in d['levels'])}; 'never': not even at the highest):", "",
                      "| shape | layers | " + " | ".join(f"batch {b}" for b in bs) + " |",
                      "|---|---|" + "---|" * len(bs)]
            for r in lows:
                lines.append(f"| {r['label']} | {r['count']} | " + " | ".join(
                    _f(r["batches"].get(b), none="never") if b in r["batches"] else "–" for b in bs) + " |")
            lim = limit_rows(d)
            if lim:
                lvs = sorted({k for r in lim for k in r["useful_tflops"]}, key=float)
                peak = d.get("fp32_peak_tflops")
                lines += ["", "Useful throughput (2 FLOPs per multiply-accumulate with a non-zero input, over our "
                          "time), " + (f"as a share of the FP32 peak measured in the same run ({peak:.1f} TFLOP/s, an "
                                       f"8192³ matrix product with TF32 off)" if peak else "no FP32 peak measured")
                          + "; last column: our time at the highest level (the fixed cost when that level is 0.99):",
                          "",
                          "| shape | batch | " + " | ".join(f"TFLOP/s @{k}" for k in lvs) + " | µs @ highest |",
                          "|---|---|" + "---|" * (len(lvs) + 1)]
                for r in lim:
                    share = {k: f" ({v:.0%})" for k, v in r["share"].items()}
                    cells = [_f(r["useful_tflops"][k], "{:.2f}") + share.get(k, "") if k in r["useful_tflops"] else "–"
                             for k in lvs]
                    lines.append(f"| {r['label']} | {r['batch']} | " + " | ".join(cells)
                                 + f" | {r['top_level_us']:.1f} |")
            if not any(c.get("exhaustive") for c in cal):
                lines += ["", FIG8_NOTE + ".", ""]
            else:
                lines += ["", "Model-chosen vs exhaustive-best: see the calibration section.", ""]
    if cal:
        lines += ["## Calibration (measured thresholds written into the manifest)", ""]
        for d in cal:
            rows = d.get("rows", [])
            never = sum(1 for r in rows if r["never"])
            static = sum(1 for r in rows if r.get("static"))
            th = [r["threshold"] for r in rows if not r["never"]]
            lines += [f"### {d['network']}", "", f"{len(rows)} layer/batch entries calibrated "
                      f"(batches {', '.join(map(str, d['batches']))}); kept dense on {never} (sparse never wins, or not by "
                      f"what a decision costs); "
                      f"median threshold where it does: {_f(median(th))}; static (sparse at any sparsity, no "
                      f"decision on the device: it wins at every level and, extrapolated to a dense input, "
                      f"stays within {DECISION_COST_US:g} µs of cuDNN): {static}.", ""]
            tuned = any(r.get("tuned_gain") for r in rows)
            if tuned:
                gains = [r["tuned_gain"] for r in rows if r.get("tuned_gain")]
                lines += [f"Candidate kernels measured (snn-codegen build --candidates): the model's pick took "
                          f"**{_f(geomean(gains), '{:.3f}')}×** the chosen kernel's time (geometric mean over layers "
                          f"and batches).", ""]
            lines += ["| shape | layers | batch | threshold |" + (" levels retuned (pick / chosen) |" if tuned else ""),
                      "|---|---|---|---|" + ("---|" if tuned else "")]
            grouped: dict = {}
            for r in rows:  # identical shapes share one measurement: one line each
                grouped.setdefault((r.get("shape", r["layer"]), r["batch"]), []).append(r)
            for (shape, b), rs in grouped.items():
                t = "never" if rs[0]["never"] else f"{rs[0]['threshold']:.2f}" + (" static" if rs[0].get("static") else "")
                extra = (f" {rs[0].get('tuned_levels', 0)} ({_f(rs[0].get('tuned_gain'), '{:.3f}')}×) |"
                         if tuned else "")
                lines.append(f"| {shape} | {len(rs)} | {b} | {t} |{extra}")
            lines.append("")
            ex = d.get("exhaustive") or []
            if ex:
                ratios = [e["model_over_best"] for e in ex if e.get("model_over_best")]
                lines += ["#### Model-chosen vs exhaustive-best (paper Fig. 8, sampled)", "",
                          f"Per layer: the model's config and up to {max(len(e['candidates']) for e in ex)} "
                          f"stage-1 survivors (the model's next best and the rest spread over stage 1), each built "
                          f"and timed on real activations at the level. Mean model/best time ratio: "
                          f"**{_f(float(np.mean(ratios)) if ratios else None, '{:.3f}')}** (1.0: the model picked "
                          f"the fastest of the sample).", "",
                          "| layer | batch | level | stage-1 survivors | timed | model µs | best µs | model/best | model's rank |",
                          "|---|---|---|---|---|---|---|---|---|"]
                for e in ex:
                    lines.append(f"| {e['label']} | {e['batch']} | {e['level']:.2f} | {e['stage1_survivors']} | "
                                 f"{e['timed']} | {_f(e['model_us'])} | {_f(e['best_us'])} | "
                                 f"{_f(e['model_over_best'], '{:.3f}')} | {e['model_rank'] or '–'} |")
                lines.append("")
    if e2e:
        lines += ["## End to end (paper Figs. 12-13)", ""]
        for d in e2e:
            prof = d.get("sparsity_profile")
            if not d.get("complete", True):
                lines += [f"**{d['network']}: incomplete (the run was interrupted).**", ""]
            lines += [f"### {d['network']}", "", f"Weights: {d['weights']}. " + (
                f"**Sparsity profile {prof}: {d['sparsity_profile_note']}.**" if prof else
                "Sparsity as the weights give it on the images."), ""]
            names = sorted({k for r in d["runs"].values() for k in r["times_ms"]}, key=lambda k: (k != "snn", k))
            lines += ["| batch | " + " | ".join(f"{n} ms" for n in names) + " | snn speedup over " + ", ".join(
                n for n in names if n != "snn") + " | energy mJ/image (snn / torchvision_fp32) | mean input "
                "sparsity | sparse convs | snn graph replay / kernel sum |", "|---|" + "---|" * (len(names) + 5)]
            for B, r in d["runs"].items():
                t = r["times_ms"]
                en = r.get("energy", {})
                es, ef = (en.get("snn") or {}).get("mj_per_image"), (en.get("torchvision_fp32") or {}).get("mj_per_image")
                lines.append(f"| {B} | " + " | ".join(_f(t[n]["median_ms"], "{:.3f}") if n in t else "–" for n in names)
                             + " | " + ", ".join(_f(r["speedup_snn_over"].get(n)) for n in names if n != "snn")
                             + f" | {_f(es, '{:.1f}')} / {_f(ef, '{:.1f}')} | {_f(r.get('mean_conv_input_sparsity'))} | "
                             f"{r.get('sparse_layers')}/{len(r.get('layers', []))} | "
                             f"{_f((r.get('kernel_sum') or {}).get('replay_over_kernel_sum'))} |")
            lines.append("")
    return "\n".join(lines) + "\n"


def load_results(folder: str | Path) -> list[dict]:
    docs = []
    for p in sorted(Path(folder).glob("*.json")):
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and d.get("kind") in ("layers", "e2e", "calibrate"):
            docs.append(d)
    return docs


def report(folder: str | Path, plots: bool = True) -> tuple[Path, list[Path], str | None]:
    """summary.md and the PNG plots of every result document in `folder`; the note says why plots
    were not drawn (matplotlib missing), else None."""
    from . import plots as plotmod
    docs = load_results(folder)
    if not docs:
        raise RunError(f"{folder}: no bench or calibrate results (*.json) found")
    md = Path(folder) / "summary.md"
    md.write_text(summary_markdown(docs))
    if not plots:
        return md, [], None
    if not plotmod.available():
        return md, [], ("matplotlib is not installed: no plots drawn (pip install matplotlib, then "
                        f"`snn-run bench report {folder}`)")
    return md, plotmod.plot_all(docs, folder), None
