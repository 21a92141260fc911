"""cuda-python driver wrapper: load cubins and launch their kernels on PyTorch's current stream.

torch owns the device: its primary context, its streams and all memory (kernels get data_ptr()s).
We only make sure that context is current on this thread, then use the driver API on it.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from .errors import RunError

TORCH_MISSING = "snn-run needs PyTorch with CUDA: pip install -e '.[gpu]'"
_DEFAULT_SMEM_LIMIT = 48 * 1024  # static + dynamic above this: a kernel must opt in (cuFuncSetAttribute)


def import_torch():
    try:
        import torch
    except ImportError:
        raise RunError(TORCH_MISSING) from None
    return torch


def torch_dtype(torch, precision: str):
    """The torch dtype of a precision's activations (codegen.bundle.PRECISIONS)."""
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


_DRIVER = None


def _driver():
    global _DRIVER
    if _DRIVER is None:
        try:
            from cuda.bindings import driver
        except ImportError:  # cuda-python < 12.6 layout
            from cuda import cuda as driver
        _DRIVER = driver
    return _DRIVER


class CudaError(RunError):
    pass


def gpu_missing() -> str | None:
    """Why this machine cannot run snn-run (no NVIDIA driver, no GPU), asked of the driver through
    cuda-python before anything imports torch; None when a GPU is there."""
    try:
        drv = _driver()
        err = drv.cuInit(0)[0]
        count = drv.cuDeviceGetCount()[1] if err == 0 else 0
    except Exception as e:  # no driver library to load
        return f"no NVIDIA driver found ({type(e).__name__})"
    if err != 0:
        return f"no usable NVIDIA GPU (cuInit: {getattr(err, 'name', err)})"
    return None if count else "no NVIDIA GPU found (the driver reports 0 devices)"


NO_GPU_HINT = ("snn-run runs on a machine with an NVIDIA GPU and its driver; `snn-codegen build` makes the bundle "
               "on any machine, to copy there")


def require_gpu() -> None:
    """One line saying there is no GPU, before anything asks for torch."""
    if why := gpu_missing():
        raise RunError(f"{why}: {NO_GPU_HINT}")


def check(result, what: str):
    """Unpack a cuda-python (CUresult, *values) tuple; raise CudaError naming the call on failure."""
    err, *vals = result if isinstance(result, tuple) else (result,)
    if err != 0:  # CUresult is an IntEnum; CUDA_SUCCESS == 0
        name = getattr(err, "name", f"CUresult {int(err)}")
        try:
            text = _driver().cuGetErrorString(err)[1]
            text = f" ({text.decode()})" if isinstance(text, bytes) else ""
        except Exception:  # no driver library to ask
            text = ""
        raise CudaError(f"{what}: {name}{text}")
    if not vals:
        return None
    return vals[0] if len(vals) == 1 else tuple(vals)


PORTABLE_CLUSTER = 8   # blocks a cluster may have without the function's non-portable attribute


class Device:
    """The current torch CUDA device, seen through the driver API. Modules and functions are cached."""

    def __init__(self):
        torch = import_torch()
        if not torch.cuda.is_available():
            raise RunError("no CUDA GPU found (torch.cuda.is_available() is False): snn-run needs an "
                           "NVIDIA GPU with a working driver and a CUDA build of PyTorch")
        torch.cuda.init()
        self.index = torch.cuda.current_device()
        torch.empty(1, device="cuda")  # torch creates its primary context lazily: force it now
        self.name = torch.cuda.get_device_name(self.index)
        self.compute_capability = tuple(torch.cuda.get_device_capability(self.index))
        self._torch = torch
        drv = self.drv = _driver()
        try:
            check(drv.cuInit(0), "cuInit")
        except RunError:
            raise
        except Exception as e:  # driver library not loadable
            raise RunError(f"cannot use the CUDA driver through cuda-python: {e}") from None
        ctx = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if ctx is None or int(ctx) == 0:  # same primary context torch uses, bound to this thread
            dev = check(drv.cuDeviceGet(self.index), "cuDeviceGet")
            ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self._modules: dict[str, object] = {}
        self._functions: dict[tuple[str, str], object] = {}
        self._smem_opt_in: dict[tuple[str, str], int] = {}
        self._static: dict[tuple[str, str], int] = {}
        self._large_clusters: set[tuple[str, str]] = set()
        # programmatic dependent launches: sm_90+, a cuda-python with cuLaunchKernelEx; SNN_PDL=0 turns them off
        self.pdl = (self.compute_capability >= (9, 0) and hasattr(drv, "cuLaunchKernelEx")
                    and os.environ.get("SNN_PDL", "1") != "0")
        if self.pdl:
            attr = self._pdl_attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1

    def module(self, cubin: str | Path):
        key = str(Path(cubin).resolve())
        mod = self._modules.get(key)
        if mod is None:
            try:
                image = Path(key).read_bytes()
            except OSError as e:
                raise RunError(f"cannot read cubin {cubin}: {e.strerror}") from None
            mod = check(self.drv.cuModuleLoadData(image), f"loading {cubin} (cuModuleLoadData)")
            self._modules[key] = mod
        return mod

    def function(self, cubin: str | Path, name: str):
        key = (str(Path(cubin).resolve()), name)
        fn = self._functions.get(key)
        if fn is None:
            fn = check(self.drv.cuModuleGetFunction(self.module(cubin), name.encode()),
                       f"function '{name}' in {cubin} (cuModuleGetFunction)")
            self._functions[key] = fn
        return key, fn

    def _static_smem(self, key, fn) -> int:
        """A function's static shared memory (a K split's mbarriers): the 48 KB without opt-in counts it too."""
        if key not in self._static:
            self._static[key] = check(self.drv.cuFuncGetAttribute(
                self.drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn), "cuFuncGetAttribute")
        return self._static[key]

    def launch(self, cubin: str | Path, name: str, grid, block, smem: int, args, pdl: bool = False,
               cluster: int = 0) -> None:
        """Launch `name` on torch's current stream; args are (value, ctypes type) pairs. pdl: the kernel waits
        for its stream predecessor itself (griddepcontrol.wait, manifest "pdl"), so it is launched as a
        programmatic dependent where the GPU has them (sm_90+): its launch and prologue overlap the previous
        kernel's tail, also inside a captured CUDA graph (a programmatic edge). cluster: blocks a cluster along z
        given at launch, where the kernel cannot compile its size in (above the portable 8: sm_90 allows 16 to a
        function that asks for a non-portable size, asked here once); 0 for every other kernel."""
        key, fn = self.function(cubin, name)
        if cluster > PORTABLE_CLUSTER and key not in self._large_clusters:
            check(self.drv.cuFuncSetAttribute(
                fn, self.drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                f"allowing clusters of {cluster} blocks for '{name}'")
            self._large_clusters.add(key)
        if smem and self._smem_opt_in.get(key, 0) < smem and smem + self._static_smem(key, fn) > _DEFAULT_SMEM_LIMIT:
            check(self.drv.cuFuncSetAttribute(
                fn, self.drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
                f"allowing {smem} bytes of shared memory for '{name}'")
            self._smem_opt_in[key] = smem
        vals = [t(v) for v, t in args]
        ptrs = (ctypes.c_void_p * max(1, len(vals)))(*[ctypes.addressof(v) for v in vals])
        stream = self.drv.CUstream(self._torch.cuda.current_stream().cuda_stream)
        gx, gy, gz = (list(grid) + [1, 1])[:3]
        bx, by, bz = (list(block) + [1, 1])[:3]
        what = f"launching '{name}' grid {list(grid)} block {list(block)} smem {smem}"
        attrs = [self._pdl_attr] if pdl and self.pdl else []
        if cluster > PORTABLE_CLUSTER:
            attr = self.drv.CUlaunchAttribute()
            attr.id = self.drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = 1, 1, cluster
            attrs.append(attr)
        if attrs:
            cfg = self.drv.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = gx, gy, gz
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = bx, by, bz
            cfg.sharedMemBytes, cfg.hStream = smem, stream
            cfg.attrs, cfg.numAttrs = attrs, len(attrs)
            check(self.drv.cuLaunchKernelEx(cfg, fn, ctypes.addressof(ptrs), 0), what)
        else:
            check(self.drv.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, smem, stream, ctypes.addressof(ptrs), 0),
                  what)
