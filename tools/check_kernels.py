#!/usr/bin/env python3
"""GPU check and micro-benchmark of the generated kernels, independent of runtime/.

Renders kernels with codegen/emit.py, compiles them with nvcc (content-addressed cubin cache),
loads them with cuda-python (cuModuleLoadData / cuModuleGetFunction / cuLaunchKernel on torch's
current stream; torch tensors own all memory) and
  check    compares every kernel against torch conv2d in float64 (outputs poisoned with NaN first,
           inputs ReLU-like with sparsity drawn from 0.4-0.95, never all zero), the COO* conversion
           against codegen/reference.py, and the epilogue against torch;
  bench    times the sparse path (its steps: memset + launch) against cuDNN FP32 and TF32, L2
           flushed before every run, CUDA events, median of many runs, several configs per layer;
  sanitize runs `check` on a few kernels under compute-sanitizer memcheck.
With --groups, check/sanitize cover in-block channel split kernels (emit.render_sparse(groups=G > 1))
and bench times G = 1 against G > 1 on BENCH_LAYERS + GROUP_EXTRA_LAYERS (see group_bench_candidates),
writing groups_table.md next to the JSON. tools/bench_groups.sh is the device command.

    PYTHONPATH=. python tools/check_kernels.py all --out docs/results/kernels
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from snn.codegen import emit  # noqa: E402
from snn.codegen import reference as ref  # noqa: E402
from snn.codegen.ptxas import parse_ptxas  # noqa: E402
from snn.codegen.config import KernelConfig  # noqa: E402
from snn.codegen.plan import clear_caches, pads_within, plan_shape, ws_space  # noqa: E402
from snn.codegen.plan import space as plan_space  # noqa: E402
from snn.codegen.gpu import load_gpu  # noqa: E402
from snn.codegen.spec import ConvShape, load_spec  # noqa: E402

NVCC_FLAGS = ["-O3", "-std=c++17", "-Xptxas", "-v"]

# The eight layers of issue 7 (3x3, stride 1, pad 1).
BENCH_LAYERS = [("resnet152 64->64 @56", 64, 64, 56), ("resnet152 128->128 @28", 128, 128, 28),
                ("resnet152 256->256 @14", 256, 256, 14), ("resnet152 512->512 @7", 512, 512, 7),
                ("densenet201 128->32 @56", 128, 32, 56), ("densenet201 128->32 @28", 128, 32, 28),
                ("densenet201 128->32 @14", 128, 32, 14), ("densenet201 128->32 @7", 128, 32, 7)]
# ResNet-152 1x1 layers added to the groups bench (C, N, H; stride 1, no padding).
GROUP_EXTRA_LAYERS = [("resnet152 1x1 1024->256 @14", 1024, 256, 14), ("resnet152 1x1 256->1024 @14", 256, 1024, 14),
                      ("resnet152 1x1 512->128 @28", 512, 128, 28), ("resnet152 1x1 128->512 @28", 128, 512, 28)]
# Batch-1 winners of run3 (v2 = the current kernels) on BENCH_LAYERS: always among the G = 1 candidates.
RUN3_JSON = ROOT / "docs" / "results" / "kernels" / "run3-perf-v2" / "v2" / "all.json"


# ------------------------------------------------------------------ compile

def nvcc_version() -> str:
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1] if out else "?"


def cache_key(src: str, arch: str, ver: str) -> str:
    return hashlib.sha256("\0".join([src, arch, " ".join(NVCC_FLAGS), ver]).encode()).hexdigest()[:24]


def prune_cache(sources: dict[str, str], cache: Path, arch: str) -> int:
    """Delete the cache entries no source of this run maps to (keeps a carried cache small)."""
    ver = nvcc_version()
    keep = {cache_key(src, arch, ver) for src in sources.values()}
    gone = [f for f in cache.iterdir() if f.suffix in (".cubin", ".ptxas") and f.stem not in keep]
    for f in gone:
        f.unlink()
    return len(gone)


def compile_all(sources: dict[str, str], cache: Path, arch: str, jobs: int) -> dict[str, tuple[bytes, dict]]:
    """name -> (cubin, ptxas report of that function); cached by hash of source, flags, arch, nvcc."""
    cache.mkdir(parents=True, exist_ok=True)
    ver = nvcc_version()

    def one(item):
        name, src = item
        key = cache_key(src, arch, ver)
        cub, rep = cache / f"{key}.cubin", cache / f"{key}.ptxas"
        if not (cub.exists() and rep.exists()):
            with tempfile.TemporaryDirectory() as tmp:
                cu = Path(tmp) / f"{name}.cu"
                cu.write_text(src)
                r = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", *NVCC_FLAGS, str(cu), "-o", str(cu) + "bin"],
                                   capture_output=True, text=True)
                if r.returncode:
                    raise RuntimeError(f"nvcc failed on {name}:\n{r.stderr[-2000:]}")
                rep.write_text(r.stderr)
                os.replace(str(cu) + "bin", cub)
        fr = parse_ptxas(rep.read_text()).get(name)
        report = fr.to_dict() if fr else {}
        return name, (cub.read_bytes(), report)

    with ThreadPoolExecutor(jobs) as ex:
        return dict(ex.map(one, sources.items()))


# ------------------------------------------------------------------ launching through the driver API

class Driver:
    def __init__(self, torch):
        from cuda.bindings import driver as cu
        self.cu, self.torch = cu, torch
        torch.cuda.init()
        torch.empty(1, device="cuda")  # torch creates and makes current the primary context
        self._check(cu.cuInit(0))
        self.modules, self.functions, self.smem_opt_in = {}, {}, {}

    def _check(self, res):
        err = res[0] if isinstance(res, tuple) else res
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA driver error {err}")
        return res[1] if isinstance(res, tuple) and len(res) == 2 else res

    def load(self, name: str, cubin: bytes):
        if name not in self.functions:
            mod = self._check(self.cu.cuModuleLoadData(cubin))
            self.modules[name] = mod
            self.functions[name] = self._check(self.cu.cuModuleGetFunction(mod, name.encode()))
        return self.functions[name]

    def stream(self):
        return self.cu.CUstream(self.torch.cuda.current_stream().cuda_stream)

    def launch(self, name, grid, block, smem, args):
        """args: torch tensors (pointer), or (value, numpy dtype) for scalars; None is a null pointer."""
        keep = []
        for a in args:
            if a is None:
                keep.append(np.array([0], dtype=np.uint64))
            elif isinstance(a, tuple):
                keep.append(np.array([a[0]], dtype=a[1]))
            else:
                keep.append(np.array([a.data_ptr()], dtype=np.uint64))
        params = np.array([k.ctypes.data for k in keep], dtype=np.uint64)
        if smem > 48 * 1024 and self.smem_opt_in.get(name, 0) < smem:  # dynamic shared memory above 48 KB: opt in
            self._check(self.cu.cuFuncSetAttribute(
                self.functions[name], self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
            self.smem_opt_in[name] = smem
        self._check(self.cu.cuLaunchKernel(self.functions[name], *grid, *block, smem, self.stream(),
                                           params.ctypes.data, 0))

    def run_steps(self, steps, buffers):
        for st in steps:
            if st["op"] == "memset":
                t = buffers[st["buffer"]]
                self._check(self.cu.cuMemsetD32Async(t.data_ptr(), 0, t.numel() * t.element_size() // 4,
                                                     self.stream()))
            elif st["op"] == "launch":
                self.launch(st["function"], st["grid"], st["block"], st["smem"], [buffers[a] for a in st["args"]])
            else:
                raise ValueError(st)


# ------------------------------------------------------------------ data

def relu_input(torch, shape_bhwc, sparsity, gen):
    x = torch.rand(shape_bhwc, generator=gen, device="cuda") + 0.05
    x = torch.where(torch.rand(shape_bhwc, generator=gen, device="cuda") < sparsity, torch.zeros_like(x), x)
    if not bool((x != 0).any()):
        x.view(-1)[0] = 1.0  # never all zero
    return x.contiguous()


def torch_conv64(torch, x_bhwc, w_crsn, shape: ConvShape):
    F = torch.nn.functional
    x = x_bhwc.double().permute(0, 3, 1, 2)
    w = w_crsn.double().permute(3, 0, 1, 2)  # CRSN -> NCRS
    y = F.conv2d(x, w, stride=shape.stride, padding=shape.padding)
    return y.permute(0, 2, 3, 1).contiguous()


# ------------------------------------------------------------------ check

def check_kernels(torch, drv, items, seed=0, log=print):
    """items: list of (EmittedKernel, shape, batch). Returns rows of results."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    rows = []
    for k, shape, batch in items:
        sp = 0.4 + 0.55 * float(torch.rand(1, generator=gen, device="cuda"))
        x = relu_input(torch, (batch, shape.H, shape.W, shape.C), sp, gen)
        w = torch.randn((shape.C, shape.R, shape.S, shape.N), generator=gen, device="cuda")
        out = torch.full((batch, shape.P, shape.Q, shape.N), float("nan"), device="cuda")
        drv.run_steps(k.steps, {"input": x, "weight": w, "output": out})
        torch.cuda.synchronize()
        want = torch_conv64(torch, x, w, shape)
        err = float((out.double() - want).abs().max())
        scale = float(want.abs().max())
        nan = int(torch.isnan(out).sum())
        ok = nan == 0 and err <= 1e-5 * scale + 1e-5
        rows.append({"kernel": k.name, "batch": batch, "sparsity": round(sp, 3), "max_abs_err": err,
                     "max_abs_ref": scale, "nan": nan, "ok": ok})
        log(f"{'ok ' if ok else 'BAD'} {k.name} sparsity={sp:.2f} err={err:.2e} ref={scale:.1f} nan={nan}")
    return rows


def check_coo(torch, drv, items, seed=1, log=print):
    rows = []
    rng = np.random.default_rng(seed)
    for k, shape, batch, cfg in items:
        x_np = ref.relu_sparse_input(rng, (batch, shape.H, shape.W, shape.C), 0.7)
        x = torch.from_numpy(x_np).cuda()
        lay = emit.coo_layout(shape, batch, cfg)
        cnt = torch.full((lay["tiles"],), -1, dtype=torch.int32, device="cuda")
        vals = torch.full((lay["tiles"], lay["capacity"]), float("nan"), device="cuda")
        pos = torch.full((lay["tiles"], lay["capacity"]), -1, dtype=torch.int32, device="cuda")
        drv.run_steps(k.steps, {"input": x, "coo_count": cnt, "coo_vals": vals, "coo_pos": pos})
        torch.cuda.synchronize()
        c_ref, v_ref, p_ref = ref.coo_convert(x_np, shape, cfg)
        c_gpu, v_gpu, p_gpu = cnt.cpu().numpy(), vals.cpu().numpy(), pos.cpu().numpy().view(np.uint32)
        ok = bool((c_gpu == c_ref).all())
        if ok:
            for t in range(len(c_ref)):
                n = c_ref[t]
                ok &= bool((v_gpu[t, :n] == v_ref[t, :n]).all() and (p_gpu[t, :n] == p_ref[t, :n]).all())
        rows.append({"kernel": k.name, "batch": batch, "tiles": lay["tiles"], "nonzeros": int(c_ref.sum()), "ok": ok})
        log(f"{'ok ' if ok else 'BAD'} {k.name} tiles={lay['tiles']} nnz={int(c_ref.sum())}")
    return rows


def check_epilogue(torch, drv, log=print):
    rows = []
    gen = torch.Generator(device="cuda")
    gen.manual_seed(2)
    for C, total_px, residual, relu, alias in [(64, 3 * 56 * 56, True, True, False), (64, 1000, False, True, True),
                                              (3, 777, True, False, False), (30, 49, False, True, False)]:
        x = torch.randn(total_px * C, generator=gen, device="cuda")
        scale, shift = torch.randn(C, generator=gen, device="cuda"), torch.randn(C, generator=gen, device="cuda")
        res = torch.randn(total_px * C, generator=gen, device="cuda") if residual else None
        want = x.view(-1, C) * scale + shift
        if residual:
            want = want + res.view(-1, C)
        if relu:
            want = want.clamp_min(0)
        want = want.reshape(-1)
        out = x if alias else torch.full_like(x, float("nan"))
        zeros = torch.zeros(1, dtype=torch.int64, device="cuda")
        blocks = min(1024, math.ceil(x.numel() / 256))
        drv.launch("snn_epilogue", (blocks, 1, 1), (256, 1, 1), 0,
                   [x, scale, shift, res, out, zeros, (x.numel(), np.int64), (C, np.int32), (int(relu), np.int32)])
        torch.cuda.synchronize()
        err = float((out - want).abs().max())
        nz = int((out == 0).sum())
        ok = err < 1e-5 and int(zeros.item()) == nz and (not relu or nz > 0)
        rows.append({"C": C, "elements": x.numel(), "residual": residual, "relu": relu, "alias": alias,
                     "max_abs_err": err, "zeros": int(zeros.item()), "zeros_expected": nz, "ok": ok})
        log(f"{'ok ' if ok else 'BAD'} epilogue C={C} n={x.numel()} res={residual} relu={relu} alias={alias} "
            f"err={err:.1e} zeros={int(zeros.item())}/{nz}")
    return rows


# ------------------------------------------------------------------ bench

def time_fn(torch, fn, flush, warmup=5, reps=30):
    """Median µs of fn() with L2 evicted before each run; runtime.measure.timing.event_times_us keeps the host's
    launch latency out of the events (before session 7 a flush alone did, and batch-1 times could include it)."""
    from snn.runtime.measure.timing import event_times_us
    for _ in range(warmup):
        fn()
    return statistics.median(event_times_us(torch, [fn], flush.zero_, reps, torch.cuda.synchronize)[0])


def bench_candidates(shape: ConvShape, batch: int) -> list[KernelConfig]:
    """The configs timed per layer (perf round v3; run1 had tiles 4x8/7x7/4x4, 32-128 threads x nt
    1-2, tc 16/32/C at batch 1 and 32/min(C,128) at batch 32). Batch 1: tc 4/8/16/32 (v2: tc = C
    never won, tc 8 nearly always); batch > 1: 8x8 tiles too (fewer tiles per image: less
    L2 -> SM weight traffic, B * tiles * C*N*R*S*4 bytes whatever tc and nt), tc 32/64/min(C,128)."""
    tiles = [(4, 8), (7, 7), (4, 4)] if batch == 1 else [(4, 8), (7, 7), (8, 8)]
    ntb = [(32, 1), (64, 1), (32, 2), (64, 2), (128, 1)]
    tcs = [4, 8, 16, 32] if batch == 1 else [32, 64, min(shape.C, 128)]
    out = []
    for th, tw in tiles:
        th, tw = min(th, shape.P), min(tw, shape.Q)
        for threads, nt in ntb:
            if threads * nt > max(shape.N, 32) or th * tw * nt > 112:
                continue
            for tc in tcs:
                if tc <= shape.C:
                    out.append(KernelConfig(th, tw, tc, threads, nt))
    return sorted(set(out))


RUN9_JSON = ROOT / "docs" / "results" / "kernels" / "run9-vec" / "bench.json"
RUN8_JSON = ROOT / "docs" / "results" / "kernels" / "run8-model" / "bench.json"


def previous_best(paths=(RUN9_JSON, RUN8_JSON), top: int = 3) -> dict[tuple[str, int], list[KernelConfig]]:
    """(shape tag, batch) -> the `top` configs with the lowest mean time over the levels of the first
    bench JSON that timed that layer and batch (run9: the vec kernels; run8: every layer)."""
    out: dict[tuple[str, int], list[KernelConfig]] = {}
    for path in paths:
        if not path.exists():
            continue
        times: dict[tuple[str, int], dict[str, list[float]]] = {}
        for r in json.loads(path.read_text())["bench"]:
            for name, t in r["all_us"].items():
                if not name.endswith("_s"):  # the strided twins of run9
                    times.setdefault((r["shape"], r["batch"]), {}).setdefault(name, []).append(t)
        for key, per in times.items():
            if key not in out:
                ranked = sorted(per, key=lambda n: statistics.mean(per[n]))
                out[key] = [KernelConfig.from_dict(_parse_config(n)) for n in ranked[:top]]
    return out


def nt8_candidates(shape: ConvShape, batch: int) -> list[KernelConfig]:
    """Thread-contiguous nt 8 configs (v8): 8 output channels a thread, so a pixel's body is 8+ FMAs, which
    ptxas keeps as a branch (4-FMA bodies it predicates: they issue for zero inputs too). Needs N >= 256."""
    if shape.N % 8 or shape.N < 256:
        return []
    one = shape.R * shape.S == 1
    tiles = [(1, 14), (1, 7), (2, 4)] if one else [(2, 4), (1, 7)]
    tcs = [8, 16] if batch == 1 else [64, 128]
    out = set()
    for th, tw in tiles:
        th, tw = min(th, shape.P), min(tw, shape.Q)
        for threads in (32, 64):
            if threads * 8 > shape.N or (threads > 32 and th * tw * 8 > 64):
                continue
            for tc in tcs:
                if tc <= shape.C:
                    out.add(KernelConfig(th, tw, tc, threads, 8))
    return sorted(out)


def inner_bench_kernels(layers, batches) -> dict:
    """bench --inner: per layer and batch, the previous benches' best configs and the nt 8 ones, each with
    and without hoisted value loads. (Run10/run11 also timed nt 8 with its first channel mapping and weights
    copied through L1: see their run.sh for the commits.)"""
    prev = previous_best()
    out = {}
    for _, sh in layers:
        for b in batches:
            ks = {}
            for c in prev.get((sh.tag(), b), []):
                for kw in ({"hoist": False}, {"hoist": True}):
                    k = emit.render_sparse(sh, b, c, **kw)
                    ks[k.name] = k
            for c in nt8_candidates(sh, b):
                for kw in ({"hoist": False}, {"hoist": True}):
                    k = emit.render_sparse(sh, b, c, **kw)
                    ks[k.name] = k
            out[(sh, b)] = list(ks.values())
    return out


ONE_BY_ONE_LAYERS = GROUP_EXTRA_LAYERS + [("resnet152 1x1 2048->512 @7", 2048, 512, 7),
                                         ("resnet152 1x1 512->2048 @7", 512, 2048, 7)]


def tune1x1_kernels(layers, batches) -> dict:
    """bench --tune1x1: around the nt 8 winner of run11 (1x7 tiles, tc 128, 32 threads, nt 8), one factor at
    a time (tile, threads, tc, hoisted loads, weight ring depth, channels per chunk) and a few combinations,
    plus the nt 4 1x14 kernel that won before, on the ResNet-152 1x1 layers."""
    out = {}
    for _, sh in layers:
        for b in batches:
            base = KernelConfig(1, min(7, sh.Q), 128, 32, 8)
            variants = [(base, {}), (base, {"hoist": True}), (base, {"wd": 8}), (base, {"wd": 16}),
                        (base, {"kc": 64}), (base, {"kc": 128}), (base, {"hoist": True, "wd": 16}),
                        (base, {"hoist": True, "wd": 16, "kc": 64})]
            for tile in ((2, 4), (1, 4), (2, 7), (1, 14)):
                variants.append((KernelConfig(min(tile[0], sh.P), min(tile[1], sh.Q), 128, 32, 8), {}))
            variants += [(KernelConfig(1, min(7, sh.Q), 128, 64, 8), {}), (KernelConfig(1, min(7, sh.Q), 64, 32, 8), {}),
                         (KernelConfig(1, min(7, sh.Q), 256, 32, 8), {})]
            four = KernelConfig(1, min(14, sh.Q), 128, 32, 4)
            variants += [(four, {}), (four, {"wd": 16}), (four, {"hoist": True})]
            ks = {}
            for cfg, kw in variants:
                if cfg.tc > sh.C or cfg.threads * cfg.nt > sh.N:
                    continue
                try:
                    k = emit.render_sparse(sh, b, cfg, **kw)
                except ValueError:  # e.g. the ring or chunk past the shared-memory budget
                    continue
                ks[k.name] = k
            out[(sh, b)] = list(ks.values())
    return out


WS_TILES = {256: [(4, 4, 4), (4, 7, 4), (4, 8, 4), (2, 4, 8), (4, 2, 8), (4, 4, 8)],
            128: [(4, 4, 4), (4, 7, 4), (4, 8, 4), (4, 8, 2)],
            64: [(4, 8, 2), (4, 4, 2), (8, 8, 1)], 32: [(4, 8, 1), (8, 8, 1), (4, 4, 1)]}
WS_VARIANTS = [{"kc": 8}, {"kc": 4}, {"hoist": True}]  # fewer barriers a channel; loads before tests
WS_WARPS = [(2, 2), (1, 2), (2, 1), (2, 4), (4, 2)]


def ws_candidates(shape: ConvShape, batch: int) -> list[tuple[KernelConfig, tuple[int, int]]]:
    """bench --ws: warp-tiled blocks (emit.render_sparse_ws). Per layer the warp tiles of WS_TILES for its N,
    every warp arrangement of <= 8 warps whose block tile wastes <= 30 % per axis, and the two largest
    channel tiles tc (C, C/2, C/4, >= 32) that still give >= 2 blocks per SM."""
    tiles = WS_TILES[min(256, max(32, 1 << (shape.N.bit_length() - 1)))]
    out = []
    for th, tw, nt in tiles:
        if 7 in (th, tw) and shape.P % 7:
            continue
        th, tw = min(th, shape.P), min(tw, shape.Q)
        for wh, ww in WS_WARPS:
            bth, btw = wh * th, ww * tw
            if not (pads_within(shape.P, bth, 0.3) and pads_within(shape.Q, btw, 0.3)):
                continue
            tcs = []
            for tc in (shape.C, shape.C // 2, shape.C // 4):
                if tc < 32 or shape.C % tc:
                    continue
                cfg = KernelConfig(th, tw, tc, 32, nt)
                blocks = -(-shape.P // bth) * -(-shape.Q // btw) * -(-shape.N // (32 * nt)) * (shape.C // tc) * batch
                tcs.append((cfg, blocks))
            keep = [c for c, n in tcs if n >= 264][:2] or [c for c, _ in tcs[-1:]]
            out += [(c, (wh, ww)) for c in keep]
    return out


def ws_bench_kernels(layers, batches) -> dict:
    """bench --ws: the previous benches' two best configs per layer and batch (as the build renders them)
    against the warp-tiled candidates."""
    prev = previous_best(top=2)
    out = {}
    for _, sh in layers:
        for b in batches:
            ks = {}
            for c in prev.get((sh.tag(), b), []):
                k = emit.render_sparse(sh, b, c)
                ks[k.name] = k
            for c, warps in ws_candidates(sh, b):
                variants = [{}]
                if c.nt >= 4 and warps in ((2, 2), (4, 2)):
                    variants += WS_VARIANTS
                for kw in variants:
                    try:
                        k = emit.render_sparse_ws(sh, b, dataclasses.replace(c, wh=warps[0], ww=warps[1]), **kw)
                    except ValueError:
                        continue
                    ks[k.name] = k
            out[(sh, b)] = list(ks.values())
    return out


WS_EXACT_TILES = {256: [(4, 4, 4), (2, 7, 4), (7, 2, 4)], 128: [(4, 4, 4), (2, 7, 4), (7, 2, 4)],
                  64: [(4, 4, 2), (2, 7, 2), (4, 7, 2)], 32: [(4, 8, 1), (2, 7, 1), (4, 7, 1), (8, 7, 1)]}
WS_EXACT_WARPS = [(2, 2), (2, 4), (2, 1), (7, 1), (1, 7), (7, 2), (2, 7), (4, 1)]


def ws_exact_kernels(layers, batches) -> dict:
    """bench --ws-exact (run19): warp-tiled blocks that tile the output exactly (7 / 14 / 28 rows from 2x7, 4x4 x 7
    warps, ...) against run18's best warp-tiled configs, which pad 14 and 28 to 16 and 32."""
    out = {}
    for _, sh in layers:
        for b in batches:
            ks = {}
            for th, tw, nt in WS_EXACT_TILES[min(256, max(32, 1 << (sh.N.bit_length() - 1)))]:
                th, tw = min(th, sh.P), min(tw, sh.Q)
                for wh, ww in WS_EXACT_WARPS:
                    if not (pads_within(sh.P, th * wh, 0.15) and pads_within(sh.Q, tw * ww, 0.15)) or wh * ww * 32 > 512:
                        continue
                    for tc in ((64, 128) if b >= 32 else (32, 64)):
                        cfg = KernelConfig(th, tw, min(tc, sh.C), 32, nt, wh, ww)
                        try:
                            k = emit.render_sparse(sh, b, cfg)
                        except ValueError:
                            continue
                        ks[k.name] = k
            out[(sh, b)] = list(ks.values())
    return out


RUN20_JSON = ROOT / "docs" / "results" / "kernels" / "run20-model" / "bench" / "bench.json"
WS_INNER_VARIANTS = ["", "pre2", "pre4", "cpre4", "cpre8", "nz"]


def ws_inner_kernels(layers, batches, top: int = 3, variants=tuple(WS_INNER_VARIANTS)) -> dict:
    """bench --ws-inner (run22): run20's `top` warp-tiled configs per layer and batch (lowest mean time over its
    levels), each with the channel loop's variants (emit.render_sparse_ws(variant=...)): value loads k pixels
    ahead of their tests (pre<k>; cpre<k> only where non-zero) and one jump per non-zero pixel (nz)."""
    times: dict[tuple[str, int], dict[str, list[float]]] = {}
    for r in json.loads(RUN20_JSON.read_text())["bench"]:
        for name, t in r["all_us"].items():
            if "_w" in name.rsplit("_b", 1)[0]:
                times.setdefault((r["shape"], r["batch"]), {}).setdefault(name, []).append(t)
    out = {}
    for _, sh in layers:
        for b in batches:
            per = times.get((sh.tag(), b), {})
            ks = {}
            for name in sorted(per, key=lambda n: statistics.mean(per[n]))[:top]:
                cfg = KernelConfig.from_dict(_parse_config(name))
                for v in variants:
                    k = emit.render_sparse_ws(sh, b, cfg, variant=v)
                    ks[k.name] = k
            out[(sh, b)] = list(ks.values())
    return out


WS_B1_TILES = {32: ((2, 7, 1), (4, 4, 1), (4, 8, 1), (2, 4, 1)),
               64: ((2, 7, 2), (2, 7, 4), (4, 4, 2), (4, 4, 4), (2, 4, 2), (2, 4, 4)),
               1: ((1, 7, 4), (1, 7, 8), (2, 7, 4))}  # 1x1 convs
WS_B1_WARPS = ((2, 2), (4, 2), (2, 4), (7, 1), (4, 1), (2, 1), (1, 2))


def ws_configs(shape: ConvShape, tiles, warps, tcs) -> list[KernelConfig]:
    """The configs of plan.ws_space(shape, one_by_one=True) among warp tiles (th, tw, nt; clipped to P and Q)
    x warp arrangements x channel tiles (clipped to C), in that order (ws_space already leaves out what the
    emitter cannot build)."""
    space = set(ws_space(shape, one_by_one=True))
    return [c for th, tw, nt in tiles for wh, ww in warps for tc in tcs
            for c in [KernelConfig(min(th, shape.P), min(tw, shape.Q), min(tc, shape.C), 32, nt, wh, ww)]
            if c in space]


def ws_b1_grid(shape: ConvShape) -> list[KernelConfig]:
    """bench --ws-b1: warp-tiled configs at batch 1, where the plan had none before session 7. Small channel
    tiles (tc 8 / 16 / 32: the classic kernel's batch-1 winners have tc 4-8) in blocks of 2-8 warps, whose block
    tiles re-read the weights fewer times than the classic kernel's 4x4 / 2x7 tiles."""
    tiles = WS_B1_TILES[1 if shape.R * shape.S == 1 else 32 if shape.N <= 32 else 64]
    return sorted(set(ws_configs(shape, tiles, WS_B1_WARPS, (8, 16, 32))))


def b1_plans(shape: ConvShape, levels) -> dict[str, dict[float, KernelConfig]]:
    """The "snn" plan's batch-1 picks per level as built before session 7 ("now": plan.space.WS_MIN_BATCH = 8, classic
    kernels only) and with warp-tiled configs allowed at batch 1 ("ws_b1": WS_MIN_BATCH = 1, the default since)."""
    gpu, keep, out = load_gpu("h100"), plan_space.WS_MIN_BATCH, {}
    try:
        for key, min_batch in (("now", 8), ("ws_b1", 1)):
            plan_space.WS_MIN_BATCH = min_batch
            clear_caches()
            out[key] = {lv: c.config for lv, c in plan_shape(shape, gpu, 1, levels, "snn").items()}
    finally:
        plan_space.WS_MIN_BATCH = keep
        clear_caches()
    return out


def ws_b1_kernels(layers, levels) -> dict:
    """bench --ws-b1: per layer, both b1_plans' picks at `levels` and ws_b1_grid."""
    out = {}
    for _, sh in layers:
        ks = {}
        for cfg in [c for plan in b1_plans(sh, levels).values() for c in plan.values()] + ws_b1_grid(sh):
            k = emit.render_sparse(sh, 1, cfg)
            ks[k.name] = k
        out[(sh, 1)] = list(ks.values())
    return out


def variant_bests(all_us: dict[str, float]) -> dict[str, float]:
    """Kernel name -> µs of one bench row, reduced to each channel-loop variant's best ("" is the base loop)."""
    best: dict[str, float] = {}
    for n, t in all_us.items():
        m = re.search(r"_v(\w+)$", n)
        v = m.group(1) if m else ""
        best[v] = min(best.get(v, math.inf), t)
    return best


def ws_inner_table(rows) -> str:
    """Markdown: per layer, batch and level, each variant's best time over the configs against the base loop's."""
    names = sorted({v for r in rows for v in variant_bests(r["all_us"]) if v})
    lines = ["| layer | B | sparsity | base µs | " + " | ".join(names) + " | cuDNN FP32 µs |",
             "| --- | --- | --- | --- | " + " | ".join("---" for _ in names) + " | --- |"]
    for r in rows:
        best = variant_bests(r["all_us"])
        base = best.get("", math.nan)
        cells = [f"{best[v] / base:.3f}" if v in best else "-" for v in names]
        lines.append(f"| {r['layer']} | {r['batch']} | {r['sparsity']} | {base:.1f} | " + " | ".join(cells)
                     + f" | {r['cudnn_fp32_us']:.1f} |")
    return "\n".join(lines)


def ws_table(rows) -> str:
    """Markdown: per layer, batch and level, the best previous kernel against the best warp-tiled one."""
    is_ws = re.compile(r"_w\d+x\d+_").search
    lines = ["| layer | B | sparsity | previous µs | warp-tiled µs | ws / previous | best warp-tiled | cuDNN FP32 µs | "
             "×FP32 | cuDNN TF32 µs |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    ratios, vs = {}, {}
    for r in rows:
        prev = min((t for n, t in r["all_us"].items() if not is_ws(n)), default=math.nan)
        ws = sorted((t, n) for n, t in r["all_us"].items() if is_ws(n))
        t, n = ws[0] if ws else (math.nan, "-")
        ratios.setdefault(r["batch"], []).append(math.log(t / prev))
        vs.setdefault((r["batch"], r["sparsity"]), []).append(math.log(r["cudnn_fp32_us"] / min(t, prev)))
        lines.append(f"| {r['layer']} | {r['batch']} | {r['sparsity']} | {prev:.1f} | {t:.1f} | {t / prev:.3f} | "
                     f"{n.split('_', 6)[-1]} | {r['cudnn_fp32_us']:.1f} | {r['cudnn_fp32_us'] / min(t, prev):.2f} | "
                     f"{r['cudnn_tf32_us']:.1f} |")
    for b, v in sorted(ratios.items()):
        lines.append(f"\nbatch {b}: geomean warp-tiled / previous = {math.exp(statistics.mean(v)):.3f} over {len(v)} cells")
    for (b, lv), v in sorted(vs.items()):
        lines.append(f"batch {b}, {lv}: geomean ×FP32 (best of both) = {math.exp(statistics.mean(v)):.3f}")
    return "\n".join(lines)


def top_table(rows, top: int = 6) -> str:
    """Markdown: per layer, batch and level, cuDNN and the `top` fastest kernels (name tail and µs)."""
    lines = ["| layer | B | sparsity | cuDNN FP32 µs | TF32 µs | fastest kernels (µs) |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        best = sorted(r["all_us"].items(), key=lambda x: x[1])[:top]
        lines.append(f"| {r['layer']} | {r['batch']} | {r['sparsity']} | {r['cudnn_fp32_us']:.1f} | {r['cudnn_tf32_us']:.1f} | "
                     + ", ".join(f"{n.split('_', 6)[-1]} {t:.1f}" for n, t in best) + " |")
    return "\n".join(lines)


def inner_table(rows) -> str:
    """Markdown: per layer, batch and level, the best time of each family (previous best configs and nt 8 ones,
    as they are / hoisted / weights through L1) against cuDNN."""
    # hoisted: suffix "_h" at batch > 1; at batch 1 hoisting is the default and "_nh" marks the plain kernel
    # (run10/run11 predate that default and named the hoisted ones "_h" at every batch: their tables were
    # made with that naming)
    def hoisted(n, b):
        return n.endswith("_h") or (b == 1 and "_b1" in n and not n.endswith(("_nh", "_ca")))

    fams = [("previous", lambda n, b: "n8_" not in n and not hoisted(n, b) and not n.endswith("_ca")),
            ("previous + hoist", lambda n, b: "n8_" not in n and hoisted(n, b)),
            ("previous + L1 weights", lambda n, b: "n8_" not in n and n.endswith("_ca")),  # run11 only
            ("nt 8", lambda n, b: "n8_" in n and not hoisted(n, b) and not n.endswith("_ca")),
            ("nt 8 + hoist", lambda n, b: "n8_" in n and hoisted(n, b)),
            ("nt 8 + L1 weights", lambda n, b: "n8_" in n and n.endswith("_ca"))]  # run11 only
    lines = ["| layer | B | sparsity | " + " | ".join(f"{f} µs" for f, _ in fams) +
             " | best / previous | best kernel | cuDNN FP32 µs | ×FP32 | cuDNN TF32 µs |",
             "| --- | --- | --- |" + " --- |" * (len(fams) + 5)]
    ratios = {}
    for r in rows:
        best = {f: min((t for n, t in r["all_us"].items() if sel(n, r["batch"])), default=math.nan) for f, sel in fams}
        t = r["sparse_best_us"]
        ratios.setdefault(r["batch"], []).append(math.log(t / best["previous"]))
        lines.append(f"| {r['layer']} | {r['batch']} | {r['sparsity']} | " +
                     " | ".join(f"{best[f]:.1f}" for f, _ in fams) +
                     f" | {t / best['previous']:.3f} | {r['best_kernel'].split('_', 6)[-1]} | {r['cudnn_fp32_us']:.1f} | "
                     f"{r['speedup_vs_fp32']:.2f} | {r['cudnn_tf32_us']:.1f} |")
    for b, v in sorted(ratios.items()):
        lines.append(f"\nbatch {b}: geomean best / previous best = {math.exp(statistics.mean(v)):.3f} over {len(v)} cells")
    return "\n".join(lines)


def _groups_feasible(shape: ConvShape, cfg: KernelConfig, g: int, max_threads: int = 512) -> bool:
    """Whether a G-group block of `cfg` is one default_groups could propose (threads, registers, smem)."""
    if g < 2 or g > emit.MAX_GROUPS or cfg.threads * g > max_threads:
        return False
    need = cfg.th * cfg.tw * cfg.nt + shape.R * shape.S * cfg.nt + emit.GROUP_REG_MARGIN
    if emit.register_cap(cfg.threads * g, 1) < min(need, 255):
        return False
    try:
        emit.check_groups(shape, cfg, g)
    except ValueError:
        return False
    return True


def groups_for(shape: ConvShape, batch: int, cfg: KernelConfig) -> int:
    """emit.default_groups (G * tc >= C: no memset), else the largest feasible G of 8/4/2 (fewer
    channel tiles, global atomics and memset kept), else 1."""
    g = emit.default_groups(shape, batch, cfg)
    if g > 1:
        return g
    for g in (8, 4, 2):
        if g * cfg.tc < shape.C and _groups_feasible(shape, cfg, g):
            return g
    return 1


def group_bench_candidates(shape: ConvShape, batch: int) -> list[tuple[KernelConfig, str, int]]:
    """(config, loop, G) timed per layer by `bench --groups`: G = 1 on a small grid (tc 4/8 at batch 1,
    8/16 at batch 8; run3's batch-1 winners added by the caller), and for tc 4/8/16 (8/16/32 at
    batch > 1) the same tiles with G = groups_for (covering C where emit.default_groups can)."""
    one_by_one = shape.R * shape.S == 1
    tiles = [(4, 8), (7, 7)] if one_by_one or batch > 1 else [(4, 8), (4, 4)]
    ntb = [(32, 1), (64, 1), (64, 2)] if shape.N <= 128 else [(128, 1), (64, 2)]
    tcs1 = [4, 8] if batch == 1 else [8, 16]
    tcsg = [4, 8, 16] if batch == 1 else [8, 16, 32]
    out = []
    for th, tw in tiles:
        th, tw = min(th, shape.P), min(tw, shape.Q)
        for threads, nt in ntb:
            if threads * nt > max(shape.N, 32) or th * tw * nt > 112:
                continue
            for loop in emit.LOOPS:
                for tc in tcs1:
                    if tc < shape.C:
                        out.append((KernelConfig(th, tw, tc, threads, nt), loop, 1))
                for tc in tcsg:
                    cfg = KernelConfig(th, tw, tc, threads, nt)
                    if tc < shape.C and (g := groups_for(shape, batch, cfg)) > 1:
                        out.append((cfg, loop, g))
    return sorted(set(out))


def group_check_items():
    """G > 1 kernels on every distinct ResNet-50 conv shape (example_configs' tiles, tc 8 and 16, G from
    groups_for), both loops at batch 1, the mask loop at batch 3; plus ragged / strided small shapes."""
    net = load_spec(ROOT / "network_specs" / "resnet50.yaml")
    items, seen = [], set()
    shapes = net.conv_shapes() + [ConvShape(20, 40, 9, 11, 3, 3, (2, 2), (1, 1)), ConvShape(40, 36, 13, 13, 1, 1, (1, 1), (0, 0))]
    for sh in shapes:
        base = emit.example_configs(sh)[0]
        for tc in (4, 8, 16):
            cfg = KernelConfig(base.th, base.tw, min(tc, sh.C), base.threads, base.nt)
            g = groups_for(sh, 1, cfg)
            if g == 1 or (sh, cfg) in seen or (tc == 4 and sh.C > 64):
                continue
            seen.add((sh, cfg))
            for loop in emit.LOOPS:
                items.append((emit.render_sparse(sh, 1, cfg, loop=loop, groups=g), sh, 1))
            items.append((emit.render_sparse(sh, 3, cfg, groups=groups_for(sh, 3, cfg)), sh, 3))
    return items


def _group_of(name: str) -> int:
    import re
    m = re.search(r"_b\d+_g(\d+)", name)
    return int(m.group(1)) if m else 1


def groups_table(rows) -> str:
    """Markdown: per layer, batch and level, the best G = 1 and the best G > 1 time (kernel), cuDNN."""
    lines = ["| layer | B | sparsity | best G=1 µs | best G>1 µs | G>1 / G=1 | cuDNN FP32 µs | TF32 µs | G=1 kernel | G>1 kernel |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    ratios = {}
    for r in rows:
        one = [(t, n) for n, t in r["all_us"].items() if _group_of(n) == 1]
        many = [(t, n) for n, t in r["all_us"].items() if _group_of(n) > 1]
        t1, n1 = min(one) if one else (math.nan, "-")
        tg, ng = min(many) if many else (math.nan, "-")
        short = lambda n: n.split("_", 6)[-1] if n != "-" else n  # noqa: E731
        lines.append(f"| {r['layer']} | {r['batch']} | {r['sparsity']} | {t1:.1f} | {tg:.1f} | {tg / t1:.2f} | "
                     f"{r['cudnn_fp32_us']:.1f} | {r['cudnn_tf32_us']:.1f} | {short(n1)} | {short(ng)} |")
        if one and many:
            ratios.setdefault((r["batch"], r["sparsity"]), []).append(tg / t1)
    lines += ["", "| B | sparsity | geomean best G>1 / best G=1 | layers where G>1 wins |", "| --- | --- | --- | --- |"]
    for (b, lv), xs in sorted(ratios.items()):
        gm = math.exp(statistics.mean(math.log(x) for x in xs))
        lines.append(f"| {b} | {lv} | {gm:.3f} | {sum(x < 1 for x in xs)}/{len(xs)} |")
    return "\n".join(lines)


def vec_table(rows) -> str:
    """Markdown: per layer, batch and level, the best nt 2/4 kernel each way, and the geometric mean of
    vec / plain over every config timed both ways."""
    lines = ["| layer | B | sparsity | best plain µs | best vec µs | vec / plain | pairs: geomean vec / plain | cuDNN FP32 µs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    every = []
    for r in rows:
        # the strided twins are named "_s" (run9-vec, made while vec was opt-in, named the vec ones "_v")
        plain = {n[:-2]: t for n, t in r["all_us"].items() if n.endswith("_s")}
        vec = {n: t for n, t in r["all_us"].items() if not n.endswith("_s")}
        pairs = [math.log(vec[n] / plain[n]) for n in vec if n in plain]
        if not pairs:
            continue
        every += pairs
        tp, tv = min(plain.values()), min(vec.values())
        lines.append(f"| {r['layer']} | {r['batch']} | {r['sparsity']} | {tp:.1f} | {tv:.1f} | {tv / tp:.3f} | "
                     f"{math.exp(statistics.mean(pairs)):.3f} ({len(pairs)}) | {r['cudnn_fp32_us']:.1f} |")
    lines.append(f"\nAll {len(every)} pairs: geomean vec / plain = {math.exp(statistics.mean(every)):.3f}")
    return "\n".join(lines)


def _parse_config(name: str) -> dict:
    import re
    m = re.search(r"_th(\d+)tw(\d+)tc(\d+)_t(\d+)n(\d+)(?:_w(\d+)x(\d+))?_b", name)
    d = dict(zip(("th", "tw", "tc", "threads", "nt"), map(int, m.groups()[:5])))
    if m.group(6):
        d.update(wh=int(m.group(6)), ww=int(m.group(7)))
    return d


def best_of(path: Path) -> dict[tuple[str, int], set[str]]:
    """(shape tag, batch) -> the kernels that won any level in a previous bench JSON (re-timing an
    older version's winners in the same session as the new one)."""
    out: dict[tuple[str, int], set[str]] = {}
    for r in json.loads(path.read_text())["bench"]:
        out.setdefault((r["shape"], r["batch"]), set()).add(r["best_kernel"])
    return out


def bench(torch, drv, kernels, layers, batches, levels, log=print, reps=30):
    F = torch.nn.functional
    # 256 MB: zeroing it evicts L2 and keeps the GPU busy ~90 us, longer than the host needs to queue
    # the timed launch, so host launch latency does not land inside the events.
    flush = torch.empty(256 * 1024 * 1024 // 4, device="cuda")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(3)
    rows = []
    for label, shape in layers:
        for batch in batches:
            if not kernels.get((shape, batch)):  # e.g. --vec on a layer with no nt 2/4 config
                continue
            w = torch.randn((shape.C, shape.R, shape.S, shape.N), generator=gen, device="cuda")
            w_ncrs = w.permute(3, 0, 1, 2).contiguous()
            xd = torch.randn((batch, shape.C, shape.H, shape.W), generator=gen, device="cuda").clamp_min(0)
            dense = {}
            for tf32 in (False, True):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                torch.backends.cudnn.allow_tf32 = tf32
                best = math.inf
                for fmt in (torch.contiguous_format, torch.channels_last):
                    xi, wi = xd.contiguous(memory_format=fmt), w_ncrs.contiguous(memory_format=fmt)
                    best = min(best, time_fn(torch, lambda: F.conv2d(xi, wi, stride=shape.stride,
                                                                     padding=shape.padding), flush, reps=reps))
                dense["tf32" if tf32 else "fp32"] = best
            torch.backends.cudnn.allow_tf32 = False
            for level in levels:
                x = relu_input(torch, (batch, shape.H, shape.W, shape.C), level, gen)
                out = torch.empty((batch, shape.P, shape.Q, shape.N), device="cuda")
                buf = {"input": x, "weight": w, "output": out}
                want = torch_conv64(torch, x, w, shape)
                tol = 1e-5 * float(want.abs().max()) + 1e-5
                per, bad = [], []
                for k in kernels[(shape, batch)]:
                    out.fill_(float("nan"))
                    t = time_fn(torch, lambda: drv.run_steps(k.steps, buf), flush, reps=reps)
                    if not float((out.double() - want).abs().max()) <= tol:  # NaN fails too
                        bad.append(k.name)
                        continue
                    per.append((t, k.name))
                per.sort()
                useful = 2.0 * float((x != 0).sum()) / (shape.H * shape.W * shape.C * batch) * shape.macs * batch
                t_best, k_best = per[0]
                row = {"layer": label, "shape": shape.tag(), "batch": batch, "sparsity": level,
                       "cudnn_fp32_us": round(dense["fp32"], 2), "cudnn_tf32_us": round(dense["tf32"], 2),
                       "sparse_best_us": round(t_best, 2), "best_kernel": k_best,
                       "speedup_vs_fp32": round(dense["fp32"] / t_best, 3),
                       "speedup_vs_tf32": round(dense["tf32"] / t_best, 3),
                       "useful_tflops": round(useful / t_best / 1e6, 2), "candidates": len(per), "bad_kernels": bad,
                       "all_us": {n: round(t, 2) for t, n in per}}
                rows.append(row)
                if bad:
                    log(f"BAD results from {bad}")
                log(f"{label} b={batch} s={level}: sparse {t_best:.1f} us ({k_best}) | cuDNN fp32 "
                    f"{dense['fp32']:.1f} tf32 {dense['tf32']:.1f} | x{row['speedup_vs_fp32']:.2f} vs fp32, "
                    f"x{row['speedup_vs_tf32']:.2f} vs tf32")
    return rows


def ceilings(torch, log=print) -> dict:
    """The two measured ceilings of METHOD.md: device-to-device copy (bytes read + written) and an
    FP32 matrix product (TF32 off), median of events over repeated runs."""
    from snn.runtime.measure.timing import event_median_s, fp32_peak_tflops
    src = torch.empty(1 << 28, device="cuda").uniform_()   # 1 GiB
    dst = torch.empty_like(src)
    t_copy = event_median_s(torch, lambda: dst.copy_(src), reps=20)
    del src, dst
    out = {"copy_TBps": round(2 * (1 << 28) * 4 / t_copy / 1e12, 3), "fp32_mm_TFLOPs": fp32_peak_tflops(torch)}
    log(f"ceilings: {out}")
    return out


def table(after: dict, before: dict | None = None, levels=(0.5, 0.7, 0.9, 0.99)) -> str:
    """Markdown: per layer and batch, cuDNN FP32/TF32 and our best time (before -> after) at each
    level, then geometric means of the speedups. `before`: an earlier bench JSON (same layers)."""
    old = {(r["layer"], r["batch"], r["sparsity"]): r for r in (before or {}).get("bench", [])}
    rows = after["bench"]
    lines = ["| layer | B | cuDNN FP32 µs | TF32 µs | " + " | ".join(
        f"{lv}: {'before → ' if before else ''}after µs (×FP32)" for lv in levels) + " |",
        "| --- | --- | --- | --- | " + " | ".join("---" for _ in levels) + " |"]
    seen = []
    for r in rows:
        key = (r["layer"], r["batch"])
        if key in seen:
            continue
        seen.append(key)
        cells = []
        for lv in levels:
            a = next((x for x in rows if (x["layer"], x["batch"], x["sparsity"]) == (*key, lv)), None)
            if a is None:
                cells.append("")
                continue
            b = old.get((*key, lv))
            pre = f"{b['sparse_best_us']:.1f} → " if b else ""
            cells.append(f"{pre}{a['sparse_best_us']:.1f} ({a['speedup_vs_fp32']:.2f})")
        lines.append(f"| {key[0]} | {key[1]} | {r['cudnn_fp32_us']:.1f} | {r['cudnn_tf32_us']:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "| B | sparsity | after ×FP32 | after ×TF32 | " + ("before ×FP32 (same session's cuDNN) |" if before else ""),
              "| --- | --- | --- | --- |" + (" --- |" if before else "")]
    for b in sorted({r["batch"] for r in rows}):
        for lv in levels:
            sel = [r for r in rows if r["batch"] == b and r["sparsity"] == lv]
            if not sel:
                continue
            g = lambda xs: math.exp(statistics.mean(math.log(x) for x in xs))
            line = f"| {b} | {lv} | {g([r['speedup_vs_fp32'] for r in sel]):.2f} | {g([r['speedup_vs_tf32'] for r in sel]):.2f} |"
            if before:
                olds = [old.get((r["layer"], b, lv)) for r in sel]
                if all(olds):
                    line += f" {g([r['cudnn_fp32_us'] / o['sparse_best_us'] for r, o in zip(sel, olds)]):.2f} |"
            lines.append(line)
    return "\n".join(lines)


# ------------------------------------------------------------------ main

def check_items(batches_extra=(3,), vec: bool = False):
    """example_configs on every ResNet-50 conv shape, both loops, + batch 3; vec: the thread-contiguous
    variant of the nt 2/4 ones (and of ragged / strided shapes), the others left out."""
    net = load_spec(ROOT / "network_specs" / "resnet50.yaml")
    shapes = net.conv_shapes()
    if vec:
        shapes += [ConvShape(20, 40, 9, 11, 3, 3, (2, 2), (1, 1)), ConvShape(40, 36, 13, 13, 1, 1, (1, 1), (0, 0))]
    items = []
    for sh in shapes:
        for i, cfg in enumerate(emit.example_configs(sh)):
            if vec and not emit.vec_eligible(sh, cfg):
                continue
            for loop in emit.LOOPS:  # without vec: each config's default mapping (contiguous where eligible)
                items.append((emit.render_sparse(sh, 1, cfg, loop=loop, vec=True if vec else None), sh, 1))
            if i == 0 or vec:
                for b in batches_extra:
                    items.append((emit.render_sparse(sh, b, cfg, vec=True if vec else None), sh, b))
    if vec:  # nt 8 (two vectors a tap and pixel) and hoisted value loads, atomics and direct stores both
        for sh in (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)),
                   ConvShape(256, 512, 56, 56, 1, 1, (2, 2), (0, 0)), ConvShape(40, 256, 9, 11, 3, 3, (2, 2), (1, 1))):
            for cfg in (KernelConfig(2, 4, min(32, sh.C), 32, 8), KernelConfig(1, 7, sh.C, 32, 8)):
                cfg = KernelConfig(min(cfg.th, sh.P), min(cfg.tw, sh.Q), cfg.tc, cfg.threads, cfg.nt)
                for hoist in (False, True):
                    items.append((emit.render_sparse(sh, 3, cfg, hoist=hoist), sh, 3))
    return items


def ws_check_items():
    """Warp-tiled kernels (emit.render_sparse_ws): ragged C (a chunk past C), N (past the last block's
    channels) and P/Q (warps past the output), atomics and direct stores, nt 1/2/4/8, hoisted loads,
    a 5x5 filter, batch 1 and 3."""
    cases = [(ConvShape(36, 40, 9, 11, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 32, 32, 1, 2, 2), {}),
             (ConvShape(36, 40, 9, 11, 3, 3, (1, 1), (1, 1)), KernelConfig(2, 4, 36, 32, 1, 4, 2), {}),
             (ConvShape(64, 72, 7, 7, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 16, 32, 2, 1, 2), {}),
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 64, 32, 4, 2, 2), {}),
             (ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 256, 32, 4, 2, 4), {}),
             (ConvShape(512, 512, 7, 7, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 128, 32, 8, 2, 2), {"hoist": True}),
             (ConvShape(128, 32, 28, 28, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 8, 128, 32, 1, 2, 4), {}),
             (ConvShape(128, 128, 28, 28, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 7, 32, 32, 4, 2, 2), {"kc": 8}),
             (ConvShape(16, 32, 12, 12, 5, 5, (1, 1), (2, 2)), KernelConfig(4, 4, 16, 32, 1, 2, 2), {})]
    return [(emit.render_sparse_ws(sh, b, cfg, **kw), sh, b) for sh, cfg, kw in cases for b in (1, 3)]


def coo_items():
    out = []
    for sh, cfg in [(ConvShape(64, 64, 56, 56, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 8, 32, 64, 1)),
                    (ConvShape(3, 64, 224, 224, 7, 7, (2, 2), (3, 3)), KernelConfig(4, 4, 3, 64, 1)),
                    (ConvShape(256, 512, 56, 56, 1, 1, (2, 2), (0, 0)), KernelConfig(7, 7, 64, 128, 1)),
                    (ConvShape(20, 8, 9, 11, 3, 3, (1, 1), (1, 1)), KernelConfig(4, 4, 16, 32, 1))]:
        for b in (1, 2):
            out.append((emit.render_coo(sh, b, cfg), sh, b, cfg))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["check", "bench", "sanitize", "all", "compile", "table"])
    ap.add_argument("json", nargs="?", type=Path, help="table: the bench/all JSON to tabulate")
    ap.add_argument("--before", type=Path, default=None, help="table: an earlier JSON to show as before")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "kernels")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("SNN_CACHE_DIR", "~/.cache/snn/cubins")).expanduser())
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--limit", type=int, default=0, help="check only the first N kernels (sanitize uses this)")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--levels", default="0.5,0.7,0.9,0.99")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--best-of", type=Path, default=None,
                    help="bench only the kernels that won in this earlier bench JSON (same names)")
    ap.add_argument("--prune", action="store_true",
                    help="compile: delete cache entries that none of this run's kernels uses")
    ap.add_argument("--candidates", type=Path, default=None,
                    help="bench: the layers, batches, levels and kernels of a `fit_costmodel.py picks` JSON "
                         "(its grid and both models' picks)")
    ap.add_argument("--vec", action="store_true",
                    help="thread-contiguous output channels: check those kernels; with --candidates bench the nt 2/4 "
                         "configs both ways")
    ap.add_argument("--inner", action="store_true",
                    help="bench the previous benches' best configs and nt 8 ones in the variants of inner_bench_kernels "
                         "on BENCH_LAYERS + the ResNet-152 1x1 layers (inner_table.md)")
    ap.add_argument("--tune1x1", action="store_true",
                    help="bench tune1x1_kernels on the ResNet-152 1x1 layers (top_table.md)")
    ap.add_argument("--ws", action="store_true",
                    help="warp-tiled kernels: check ws_check_items; bench ws_bench_kernels against the previous best on "
                         "BENCH_LAYERS (ws_table.md)")
    ap.add_argument("--ws-exact", action="store_true",
                    help="bench ws_exact_kernels (warp-tiled blocks tiling the output exactly) on BENCH_LAYERS (top_table.md)")
    ap.add_argument("--ws-inner", action="store_true",
                    help="bench ws_inner_kernels (run20's best warp-tiled configs with the channel loop's variants) on "
                         "BENCH_LAYERS (ws_inner_table.md)")
    ap.add_argument("--ws-variants", default=",".join(WS_INNER_VARIANTS),
                    help="--ws-inner: the variants, comma-separated ('' is the base loop; default: run22's)")
    ap.add_argument("--ws-b1", action="store_true",
                    help="bench ws_b1_kernels (warp-tiled configs at batch 1 against the plan's picks) on BENCH_LAYERS "
                         "and the ResNet-152 1x1 layers (top_table.md)")
    ap.add_argument("--groups", action="store_true",
                    help="in-block channel split: check G > 1 kernels; bench G = 1 vs G > 1 (+ ResNet-152 1x1 layers)")
    a = ap.parse_args(argv)
    if a.mode == "table":
        print(table(json.loads(a.json.read_text()), json.loads(a.before.read_text()) if a.before else None))
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    items = group_check_items() if a.groups else ws_check_items() if a.ws else check_items(vec=a.vec)
    coo = coo_items()
    batches = [int(b) for b in a.batches.split(",")]
    levels = [float(v) for v in a.levels.split(",")]
    layers = [(lab, ConvShape(c, n, h, h, 3, 3, (1, 1), (1, 1))) for lab, c, n, h in BENCH_LAYERS]
    if a.tune1x1:
        layers = [(lab, ConvShape(c, n, h, h, 1, 1, (1, 1), (0, 0))) for lab, c, n, h in ONE_BY_ONE_LAYERS]
    elif a.groups or a.candidates or a.inner:
        extra = ONE_BY_ONE_LAYERS if a.candidates else GROUP_EXTRA_LAYERS
        layers += [(lab, ConvShape(c, n, h, h, 1, 1, (1, 1), (0, 0))) for lab, c, n, h in extra]
    if a.candidates:
        spec = json.loads(a.candidates.read_text())
        batches, levels = spec["batches"], spec["levels"]
        tags: dict[tuple[str, int], set[str]] = {}
        for g in spec["groups"]:
            tags.setdefault((g["shape"], g["batch"]), set()).update(g["grid"] + [g["plan_now"], g["plan_previous"]])
        by_tag = {sh.tag(): sh for _, sh in layers}
        layers = [(lab, sh) for lab, sh in layers if any(k[0] == sh.tag() for k in tags)]
        bench_k = {(by_tag[t], b): [emit.render_sparse(by_tag[t], b, KernelConfig.from_dict(_parse_config(f"_{c}_b")))
                                    for c in sorted(cs)] for (t, b), cs in tags.items()}
        if a.vec:  # the eligible configs both ways, nothing else
            bench_k = {key: [k2 for k in ks for cfg in [KernelConfig.from_dict(_parse_config(k.name))]
                             if emit.vec_eligible(key[0], cfg)
                             for k2 in (k, emit.render_sparse(key[0], key[1], cfg, vec=False))]
                       for key, ks in bench_k.items()}
    elif a.groups:
        run3 = best_of(RUN3_JSON) if RUN3_JSON.exists() else {}
        bench_k = {}
        for _, sh in layers:
            for b in batches:
                ks = {}
                for cfg, loop, g in group_bench_candidates(sh, b):
                    k = emit.render_sparse(sh, b, cfg, loop=loop, groups=g)
                    ks[k.name] = k
                for name in run3.get((sh.tag(), b), ()):  # the current best G = 1 kernels, re-timed
                    cfg = KernelConfig.from_dict(_parse_config(name))
                    k = emit.render_sparse(sh, b, cfg, loop="switch" if name.endswith("_switch") else "mask")
                    ks[k.name] = k
                bench_k[(sh, b)] = list(ks.values())
    elif a.inner:
        bench_k = inner_bench_kernels(layers, batches)
    elif a.tune1x1:
        bench_k = tune1x1_kernels(layers, batches)
    elif a.ws_exact:
        bench_k = ws_exact_kernels(layers, batches)
    elif a.ws_inner:
        bench_k = ws_inner_kernels(layers, batches, variants=a.ws_variants.split(","))
    elif a.ws_b1:
        batches = [1]
        layers += [(lab, ConvShape(c, n, h, h, 1, 1, (1, 1), (0, 0))) for lab, c, n, h in ONE_BY_ONE_LAYERS]
        bench_k = ws_b1_kernels(layers, levels)
        (a.out / "b1_plans.json").write_text(json.dumps(
            {sh.tag(): {k: {str(lv): c.tag() for lv, c in p.items()} for k, p in b1_plans(sh, levels).items()}
             for _, sh in layers}, indent=1))
    elif a.ws:
        bench_k = ws_bench_kernels(layers, batches)
    if not (a.groups or a.candidates or a.inner or a.tune1x1 or a.ws or a.ws_exact or a.ws_inner or a.ws_b1):
        bench_k = {(sh, b): [emit.render_sparse(sh, b, cfg, loop=loop) for cfg in bench_candidates(sh, b)
                             for loop in emit.LOOPS] for _, sh in layers for b in batches}
    if a.best_of:
        won = best_of(a.best_of)
        bench_k = {key: [k for k in ks if k.name in won.get((key[0].tag(), key[1]), set())]
                   for key, ks in bench_k.items()}
    if a.limit:
        items, coo = items[:a.limit], coo[:2]
    sources = {k.name: k.source for k, *_ in items + coo}
    if a.mode in ("bench", "all", "compile"):
        sources.update({k.name: k.source for ks in bench_k.values() for k in ks})
    sources["snn_epilogue"] = emit.render_epilogue()[1]
    binaries = compile_all(sources, a.cache, a.arch, a.jobs)
    spills = {n: r for n, (_, r) in binaries.items() if r.get("stack") or r.get("spill_stores") or r.get("spill_loads")}
    print(f"compiled/cached {len(binaries)} kernels in {time.time() - t0:.1f}s; with spills/stack: {len(spills)}",
          flush=True)
    if a.mode == "compile":
        if a.prune:
            print(f"pruned {prune_cache(sources, a.cache, a.arch)} stale cache files")
        return 0
    import torch
    drv = Driver(torch)
    for n, (cub, _) in binaries.items():
        drv.load(n, cub)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "nvcc": nvcc_version(), "arch": a.arch,
              "command": " ".join(["python", "tools/check_kernels.py", *(argv or sys.argv[1:])]),
              "ptxas": {n: r for n, (_, r) in binaries.items()}, "spills": spills}
    failed = bool(spills)
    if a.mode in ("check", "all", "sanitize"):
        result["check"] = check_kernels(torch, drv, items)
        result["coo"] = check_coo(torch, drv, coo)
        result["epilogue"] = check_epilogue(torch, drv)
        bad = [r for part in ("check", "coo", "epilogue") for r in result[part] if not r["ok"]]
        print(f"check: {sum(len(result[p]) for p in ('check', 'coo', 'epilogue')) - len(bad)} ok, {len(bad)} bad",
              flush=True)
        failed |= bool(bad)
    if a.mode in ("bench", "all"):
        result["ceilings"] = ceilings(torch)
        torch.backends.cudnn.benchmark = True
        rows = bench(torch, drv, bench_k, layers, batches, levels, reps=a.reps)
        result["bench"] = rows
        with open(a.out / "bench.csv", "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=[k for k in rows[0] if k != "all_us"])
            wr.writeheader()
            for r in rows:
                wr.writerow({k: v for k, v in r.items() if k != "all_us"})
        summary = {}
        for b in batches:
            for lv in levels:
                sel = [r for r in rows if r["batch"] == b and r["sparsity"] == lv]
                summary[f"b{b}_s{lv}"] = {
                    "geomean_vs_fp32": round(math.exp(statistics.mean(math.log(r["speedup_vs_fp32"]) for r in sel)), 3),
                    "geomean_vs_tf32": round(math.exp(statistics.mean(math.log(r["speedup_vs_tf32"]) for r in sel)), 3)}
        result["summary"] = summary
        for wanted, key, make in ((a.vec, "vec_table", vec_table),
                                  (a.tune1x1 or a.ws_exact or a.ws_b1, "top_table", top_table),
                                  (a.inner, "inner_table", inner_table), (a.groups, "groups_table", groups_table),
                                  (a.ws, "ws_table", ws_table), (a.ws_inner, "ws_inner_table", ws_inner_table)):
            if wanted:  # the mode's own table, in the JSON and as KEY.md
                result[key] = make(rows)
                (a.out / f"{key}.md").write_text(result[key] + "\n")
                print(result[key])
        failed |= any(r["bad_kernels"] for r in rows)
        print(json.dumps(summary, indent=1))
    if a.mode != "sanitize":
        (a.out / f"{a.mode}.json").write_text(json.dumps(result, indent=1))
    print(f"done in {time.time() - t0:.1f}s, {'FAILED' if failed else 'all ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
