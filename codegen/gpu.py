"""GPU descriptions: the datasheet numbers the occupancy calculator and the cost model need.

`load_gpu("h100")` reads codegen/gpus/h100.yaml; `load_gpu("auto")` asks the installed GPU through
cuda-python (cuDeviceGetAttribute) and fills what the driver cannot tell (FP32 lanes per SM,
allocation granularities, L2 bandwidth) from the table entry with the same compute capability.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from .errors import UserError

GPU_DIR = Path(__file__).parent / "gpus"


@dataclass(frozen=True)
class GPU:
    name: str                      # short name, used in paths: generated/<network>/<name>/
    full_name: str
    arch: str                      # nvcc -arch, e.g. "sm_90"
    compute_capability: tuple[int, int]
    sms: int
    warp_size: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int
    regs_per_block: int
    reg_alloc_unit: int            # registers per warp are rounded up to this
    reg_sub_partitions: int        # warps get registers from one of these SM quarters
    max_regs_per_thread: int
    smem_per_sm: int               # bytes, at the largest shared-memory carveout
    smem_per_block: int            # bytes a block may use without the opt-in attribute
    smem_per_block_optin: int      # bytes a block may use with cudaFuncAttributeMaxDynamicSharedMemorySize
    smem_alloc_unit: int
    smem_reserved_per_block: int   # bytes the driver adds to every block (1 KiB since sm_80)
    fp32_lanes_per_sm: int
    boost_clock_mhz: float
    dram_bandwidth_gbs: float
    l2_bytes: int
    l2_bandwidth_gbs: float        # approximate: not on datasheets
    # plan channel splits of <= 8 blocks as thread-block clusters (sm_90+; `snn-codegen build --clusters`): an
    # option, not the GPU's description, and off by default: measured slower on the H100 (docs/kernels.md)
    clusters: bool = False
    # also offer the dense FP32 kernel's 3xTF32 tiles (`snn-codegen build --tf32x3`, sm_80+: codegen/dense.py
    # MMA_TILES): products on the tensor cores at FP32's accuracy, not its rounding; an option, off by default
    tf32x3: bool = False

    @property
    def max_threads(self) -> int:
        """max_ths of the paper: threads resident on the whole GPU at 100 % occupancy."""
        return self.sms * self.max_threads_per_sm

    @property
    def peak_fp32_flops(self) -> float:
        """comp_thr of the paper: FMA = 2 flops on every FP32 lane every boost clock."""
        return 2.0 * self.fp32_lanes_per_sm * self.sms * self.boost_clock_mhz * 1e6

    @property
    def has_clusters(self) -> bool:
        """Thread-block clusters and distributed shared memory (sm_90+)."""
        return tuple(self.compute_capability) >= (9, 0)

    @property
    def has_tf32(self) -> bool:
        """TF32 tensor cores through mma.sync (sm_80+): the dense kernel's 3xTF32 tiles."""
        return tuple(self.compute_capability) >= (8, 0)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["compute_capability"] = list(self.compute_capability)
        return d


OPTIONS = ("clusters", "tf32x3")                 # build options the GPU carries, not its description's fields
FIELDS = tuple(f.name for f in dataclasses.fields(GPU) if f.name not in OPTIONS)   # a description's fields
_INT_FIELDS = tuple(f.name for f in dataclasses.fields(GPU) if f.type == "int")


def known_gpus() -> list[str]:
    """Names accepted by load_gpu besides 'auto' (one per codegen/gpus/*.yaml)."""
    return sorted(p.stem for p in GPU_DIR.glob("*.yaml"))


def load_gpu(name: str) -> GPU:
    """A GPU by table name ('h100'), by path to a YAML file of the same fields, or 'auto'."""
    if not isinstance(name, str) or not name:
        raise UserError(f"--gpu needs a name, one of: {', '.join(known_gpus())}, auto")
    if name == "auto":
        return gpu_from_attributes(query_device())
    if name.endswith((".yaml", ".yml")) and Path(name).is_file():
        return _load_file(Path(name))
    key = name.lower()
    if key not in known_gpus():
        raise UserError(f"unknown GPU '{name}': known GPUs are {', '.join(known_gpus())} (or 'auto' to ask the installed one)")
    return _load_table(key)


@lru_cache(maxsize=None)
def _load_table(key: str) -> GPU:
    return _load_file(GPU_DIR / f"{key}.yaml")


def _load_file(path: Path) -> GPU:
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"{path}: cannot read GPU description: {' '.join(str(e).split())}") from None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: a GPU description must be a mapping of {', '.join(FIELDS)}")
    missing = [f for f in FIELDS if f not in doc]
    unknown = sorted(set(map(str, doc)) - set(FIELDS))
    if missing:
        raise UserError(f"{path}: missing field(s) {', '.join(missing)}")
    if unknown:
        raise UserError(f"{path}: unknown field(s) {', '.join(unknown)}")
    cc = doc["compute_capability"]
    if not (isinstance(cc, list) and len(cc) == 2 and all(isinstance(v, int) for v in cc)):
        raise UserError(f"{path}: field 'compute_capability' must be a list [major, minor]")
    for f in FIELDS:
        v = doc[f]
        if f in ("name", "full_name", "arch"):
            if not isinstance(v, str) or not v:
                raise UserError(f"{path}: field '{f}' must be a non-empty string")
        elif f != "compute_capability":
            ok = isinstance(v, int) if f in _INT_FIELDS else isinstance(v, (int, float))
            if isinstance(v, bool) or not ok or v < 0 or (v == 0 and f != "smem_reserved_per_block"):
                kind = "an integer" if f in _INT_FIELDS else "a number"
                raise UserError(f"{path}: field '{f}' must be {kind} > 0, got {v!r}")
    doc["compute_capability"] = (cc[0], cc[1])
    return GPU(**doc)


# ------------------------------------------------------------------------------------------------
# --gpu auto

# What cuDeviceGetAttribute tells us, as GPU fields (values converted in gpu_from_attributes).
_ATTRIBUTES = {
    "cc_major": "COMPUTE_CAPABILITY_MAJOR", "cc_minor": "COMPUTE_CAPABILITY_MINOR",
    "sms": "MULTIPROCESSOR_COUNT", "warp_size": "WARP_SIZE",
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK", "max_threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR",
    "max_blocks_per_sm": "MAX_BLOCKS_PER_MULTIPROCESSOR", "regs_per_sm": "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "regs_per_block": "MAX_REGISTERS_PER_BLOCK", "smem_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "smem_per_block": "MAX_SHARED_MEMORY_PER_BLOCK", "smem_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "smem_reserved_per_block": "RESERVED_SHARED_MEMORY_PER_BLOCK", "clock_khz": "CLOCK_RATE",
    "memory_clock_khz": "MEMORY_CLOCK_RATE", "memory_bus_bits": "GLOBAL_MEMORY_BUS_WIDTH",
    "l2_bytes": "L2_CACHE_SIZE",
}

# FP32 lanes per SM by compute capability (not queryable; CUDA programming guide, arithmetic throughput).
_FP32_LANES = {(7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
               (9, 0): 128, (10, 0): 128, (10, 3): 128, (12, 0): 128, (12, 1): 128}


def _no_device(reason: str) -> UserError:
    return UserError(f"--gpu auto: no usable CUDA device ({reason}); pass --gpu NAME, one of: {', '.join(known_gpus())}")


def query_device(ordinal: int = 0) -> dict[str, Any]:
    """Ask the driver about device `ordinal`: the attributes above plus 'device_name'."""
    try:
        from cuda.bindings import driver as drv
    except ImportError:
        try:
            from cuda import cuda as drv  # cuda-python < 12.6
        except ImportError:
            raise _no_device("cuda-python is not installed") from None

    def check(result):
        err, *vals = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            _, msg = drv.cuGetErrorName(err) if hasattr(drv, "cuGetErrorName") else (None, b"")
            raise _no_device(msg.decode() if isinstance(msg, bytes) and msg else f"CUresult {int(err)}")
        return vals[0] if len(vals) == 1 else vals

    try:
        check(drv.cuInit(0))
        if check(drv.cuDeviceGetCount()) <= ordinal:
            raise _no_device("the driver sees no GPU")
        dev = check(drv.cuDeviceGet(ordinal))
        out: dict[str, Any] = {"device_name": check(drv.cuDeviceGetName(128, dev)).split(b"\0")[0].decode()}
        for key, attr in _ATTRIBUTES.items():
            out[key] = int(check(drv.cuDeviceGetAttribute(getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{attr}"), dev)))
    except UserError:
        raise
    except Exception as e:  # driver library missing, etc.: one line, not a traceback
        raise _no_device(" ".join(str(e).split()) or type(e).__name__) from None
    return out


def gpu_from_attributes(attrs: dict[str, Any]) -> GPU:
    """A GPU from queried attributes; the fields the driver cannot report come from the table
    entry with the same compute capability (else the same major), the FP32 lanes from _FP32_LANES."""
    cc = (attrs["cc_major"], attrs["cc_minor"])
    table = [_load_table(k) for k in known_gpus()]
    same = [g for g in table if g.compute_capability == cc] or [g for g in table if g.compute_capability[0] == cc[0]]
    lanes = _FP32_LANES.get(cc) or (same[0].fp32_lanes_per_sm if same and same[0].compute_capability == cc else None)
    if not same or lanes is None:
        raise UserError(f"--gpu auto: compute capability {cc[0]}.{cc[1]} ({attrs.get('device_name', '?')}) is not in the "
                        f"table; add a codegen/gpus/*.yaml for it or pass --gpu NAME, one of: {', '.join(known_gpus())}")
    ref = min(same, key=lambda g: abs(g.sms - attrs["sms"]))  # e.g. H100 SXM over H200 when both match
    dram = 2.0 * attrs["memory_clock_khz"] * 1e3 * attrs["memory_bus_bits"] / 8 / 1e9  # double data rate
    exact = [g for g in same if g.compute_capability == cc and g.sms == attrs["sms"]
             and abs(g.dram_bandwidth_gbs - dram) < 0.1 * g.dram_bandwidth_gbs]
    name = exact[0].name if exact else re.sub(r"[^a-z0-9]+", "-", attrs["device_name"].lower()).strip("-") or "gpu"
    return dataclasses.replace(
        ref, name=name, full_name=attrs["device_name"], arch=f"sm_{cc[0]}{cc[1]}", compute_capability=cc,
        sms=attrs["sms"], warp_size=attrs["warp_size"], max_threads_per_block=attrs["max_threads_per_block"],
        max_threads_per_sm=attrs["max_threads_per_sm"],
        max_warps_per_sm=attrs["max_threads_per_sm"] // attrs["warp_size"],
        max_blocks_per_sm=attrs["max_blocks_per_sm"], regs_per_sm=attrs["regs_per_sm"],
        regs_per_block=attrs["regs_per_block"], smem_per_sm=attrs["smem_per_sm"],
        smem_per_block=attrs["smem_per_block"], smem_per_block_optin=attrs["smem_per_block_optin"],
        smem_reserved_per_block=attrs["smem_reserved_per_block"], fp32_lanes_per_sm=lanes,
        boost_clock_mhz=attrs["clock_khz"] / 1e3, dram_bandwidth_gbs=round(dram, 1), l2_bytes=attrs["l2_bytes"],
        # L2 bandwidth is not reported: scale the reference GPU's by SM count and clock
        l2_bandwidth_gbs=round(ref.l2_bandwidth_gbs * attrs["sms"] / ref.sms
                               * (attrs["clock_khz"] / 1e3) / ref.boost_clock_mhz, 1))
