"""Device timing and what a result records about the device.

Timing: CUDA events around each run, an L2 flush (a write of 2x the L2 size) before each run, the GPU
held back by a sleep kernel so host launch overhead stays out, warm-up, median of `reps` runs,
rotating input sets (Timer, event_times_us). Env holds torch, the device (or the CPU for a dry run) and
the environment a JSON document records; Nvml reads the driver, clocks and the energy counter;
kernel_sum adds up the GPU time of one call's kernels (CUPTI). torch is imported when an Env is made,
never at module import.
"""
from __future__ import annotations

import datetime
import os
import statistics
import subprocess
import time

from .common import git_commit

_CYCLES_PER_US = 2000  # above any H100/H200 SM clock: the sleep is long enough
_profiled = False       # CUPTI (torch.profiler) has run in this process: see exit_skipping_teardown


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


def graph_call_s(torch, fn, calls: int = 10, reps: int = 15) -> float:
    """Seconds a call of fn when `calls` of them run back to back in one CUDA graph, as a network's layers do
    (median of `reps` replays over `calls`); fn must be capturable (no host sync, no new allocation pattern)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    t = event_median_s(torch, g.replay, reps, warmup=2) / calls
    del g
    return t


def idle_call_ms(torch, fn, reps: int = 30) -> tuple[float, float]:
    """(ms until fn() returns, ms until its work is done) from an idle GPU, medians of `reps`: a graph's launch is
    host time the GPU waits out before the graph's first node runs (runtime/graph.py, the split)."""
    host = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        host.append(((t1 - t0) * 1e3, (time.perf_counter() - t0) * 1e3))
    return tuple(statistics.median(h[i] for h in host) for i in (0, 1))


def wall_times_ms(fn, inputs, reps: int, warmup: int, sync) -> list[float]:
    """Wall time (ms) of `reps` whole calls fn(x), x rotating over inputs, each between two sync() calls,
    after `warmup` untimed ones: the host's part counts, as it does for a user."""
    for i in range(warmup):
        fn(inputs[i % len(inputs)])
    sync()
    out = []
    for i in range(reps):
        x = inputs[i % len(inputs)]
        sync()
        t = time.perf_counter()
        fn(x)
        sync()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def fp32_peak_tflops(torch) -> float:
    """The measured FP32 ceiling (METHOD.md): an 8192^3 matrix product with TF32 off, median of 10 timings."""
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 8192
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    return round(2 * n ** 3 / event_median_s(torch, lambda: torch.mm(a, b), reps=10) / 1e12, 2)


class Env:
    """torch, the device (CUDA, or the CPU for a dry run), and what the JSON records about them."""

    def __init__(self, cpu_dry_run: bool = False):
        from ..cuda import import_torch, require_gpu
        if not cpu_dry_run:
            require_gpu()
        self.torch = torch = import_torch()
        self.cpu = cpu_dry_run
        if cpu_dry_run:
            self.device, self.dev = torch.device("cpu"), None
            self.name, self.cc = "cpu (dry run: timings mean nothing)", (9, 0)
        else:
            from ..cuda import Device
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
            from ..executor import TorchBackend
            return TorchBackend()
        from ..kernels import CudaBackend
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


def activity_kind(name: str) -> str:
    """What a GPU activity of a forward pass is, from its name: snn's sparse convs (sconv_*), dense FP32 convs
    (dconv_*, and the image's direct conv, dirconv_*), pairs of 1x1 convs in one launch (dpair_*) and tensor-core
    convs (tconv_*), epilogues and selectors, memsets and copies, cuDNN's convolutions, everything else (pooling,
    concat, classifier)."""
    n = name.lower()
    if n.startswith("sconv_"):
        return "sparse conv"
    if n.startswith(("dconv_", "dirconv_")):
        return "dense conv (snn)"
    if n.startswith("dpair_"):
        return "conv pair (snn)"
    if n.startswith("tconv_"):
        return "tensor-core conv (snn)"
    if n.startswith("snn_epilogue"):
        return "epilogue"
    if n.startswith("snn_select"):
        return "selector"
    if "memset" in n:
        return "memset"
    if "memcpy" in n:
        return "memcpy"
    if any(t in n for t in ("conv", "xmma", "implicit", "cudnn", "gemm", "winograd", "fft")):
        return "cuDNN conv / gemm"
    return "other"


def cuda_events(torch, fn, iters: int = 1) -> list:
    """Every GPU activity (kernel, memset, memcpy) of `iters` calls of `fn`, from CUPTI through torch.profiler: its
    events (`name`, `time_range`), the host's left out."""
    from torch.profiler import ProfilerActivity, profile
    global _profiled
    _profiled = True
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    return [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]


def cuda_activities(torch, fn, iters: int) -> dict[str, list]:
    """cuda_events by name: {name: [count, total microseconds]} over all the calls."""
    acts: dict[str, list] = {}
    for e in cuda_events(torch, fn, iters):
        a = acts.setdefault(e.name, [0, 0.0])
        a[0] += 1
        a[1] += e.time_range.elapsed_us()
    return acts


def exit_skipping_teardown(code: int = 0) -> None:
    """Where CUPTI ran in this process, end it now (output flushed) without the interpreter's teardown: processes
    that profiled through torch.profiler have aborted in native code after Python had finished
    (`free(): invalid pointer`, exit code 134; README, Known limits). Call it once everything is written."""
    if not _profiled:
        return
    import sys
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # a closed or broken stream: nothing left to save
            pass
    os._exit(code)


def kernel_sum(torch, fn, iters: int = 5) -> dict:
    """GPU time of every kernel/memset/memcpy of one call of `fn` (cuda_activities):
    what the graph replay would take with no gaps between its nodes (bench e2e sets the two side by side),
    with the count and time of each activity_kind."""
    try:
        fn()
        torch.cuda.synchronize()
        total, count, kinds = 0.0, 0, {}
        for name, (n, us) in cuda_activities(torch, fn, iters).items():
            total += us
            count += n
            k = kinds.setdefault(activity_kind(name), [0, 0.0])
            k[0] += n
            k[1] += us
        return {"kernel_sum_ms": round(total / 1e3 / iters, 4), "activities_per_call": count / iters,
                "by_kind": {k: {"per_call": n / iters, "ms": round(us / 1e3 / iters, 4)}
                            for k, (n, us) in sorted(kinds.items(), key=lambda kv: -kv[1][1])}}
    except Exception as e:  # profiler or CUPTI unavailable: say so
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
