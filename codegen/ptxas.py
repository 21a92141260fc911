"""Parse ptxas' `-v` report: per function, registers, static shared memory, stack frame and spills.

One cubin may hold several functions (the COO* conversion and the convolution, or a non-inlined
device function); each is recorded under its own name. Entry functions (kernels) carry registers and
smem; plain device functions only their frame and spills.

    ptxas info    : Compiling entry function 'k2' for 'sm_90'
    ptxas info    : Function properties for k2
        256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 32 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM0 = re.compile(r"(\d+) bytes cmem\[0\]")
_BARRIERS = re.compile(r"used (\d+) barriers")


@dataclass
class FunctionResources:
    name: str
    entry: bool = False           # a __global__ kernel (has registers/smem); False: a device function
    registers: int = 0
    smem_static: int = 0          # bytes of static __shared__ memory
    stack: int = 0                # bytes of stack frame (local memory): must be 0 for our kernels
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0
    cmem0: int = 0                # kernel-parameter constant bank (printed by ptxas on some arches)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "FunctionResources":
        return cls(**d)

    def problem(self) -> str | None:
        """Why this function breaks the register-tile promise, or None."""
        bad = [f"{v} bytes {what}" for what, v in (("stack frame", self.stack), ("spill stores", self.spill_stores),
                                                   ("spill loads", self.spill_loads)) if v]
        return ", ".join(bad) or None


def parse_ptxas(text: str) -> dict[str, FunctionResources]:
    """All functions of one ptxas report, in report order. Lines of other tools are ignored."""
    funcs: dict[str, FunctionResources] = {}
    current: FunctionResources | None = None
    props_for: FunctionResources | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = funcs.setdefault(m.group(1), FunctionResources(m.group(1)))
            current.entry = True
            props_for = None
        elif m := _PROPS.search(line):
            props_for = funcs.setdefault(m.group(1), FunctionResources(m.group(1)))
        elif m := _FRAME.search(line):
            if props_for is not None:
                props_for.stack, props_for.spill_stores, props_for.spill_loads = map(int, m.groups())
                props_for = None
        elif m := _USED.search(line):
            # "Used N registers" closes the entry function opened by "Compiling entry function".
            if current is not None:
                current.registers = int(m.group(1))
                current.smem_static = int(s.group(1)) if (s := _SMEM.search(line)) else 0
                current.cmem0 = int(c.group(1)) if (c := _CMEM0.search(line)) else 0
                current.barriers = int(b.group(1)) if (b := _BARRIERS.search(line)) else 0
                current = None
    return funcs


def summarize(funcs: dict[str, FunctionResources]) -> dict:
    """The manifest's per-kernel resource fields: the worst over the cubin's functions, plus each one."""
    entries = [f for f in funcs.values() if f.entry] or list(funcs.values())
    return {
        "registers": max((f.registers for f in entries), default=0),
        "smem_static": max((f.smem_static for f in entries), default=0),
        "spill_stores": max((f.spill_stores for f in funcs.values()), default=0),
        "spill_loads": max((f.spill_loads for f in funcs.values()), default=0),
        "stack": max((f.stack for f in funcs.values()), default=0),
        "functions": {f.name: f.to_dict() for f in funcs.values()},
    }


def problems(funcs: dict[str, FunctionResources]) -> list[str]:
    """'function: what is wrong' for each function with a stack frame or spills."""
    return [f"{f.name}: {p}" for f in funcs.values() if (p := f.problem())]
