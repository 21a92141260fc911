"""The CPU tests' nvcc runner: many kernel sources for sm_90 in a few translation units, compiled in
parallel, ptxas' report per function back (no cubins kept, no cache).

It exists for speed: each nvcc run pays a fixed start-up (front end, headers) of about 0.3 s, so several
kernels a unit compile about 1.6x faster than one nvcc run per kernel through codegen/compile.py's
Compiler (measured on 30 ResNet-50 kernels, 2 jobs), which the build needs (one cubin per kernel, the
content-addressed cache) and the tests do not. Same flags as the build (compile.NVCC_FLAGS)."""
import shlex
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from snn.codegen.compile import NVCC_FLAGS
from snn.codegen.ptxas import parse_ptxas


def compile_units(sources: list[str], jobs: int) -> dict[str, dict]:
    """Several kernels per unit (each template #undefs its constants), `jobs` units compiled at once,
    balanced longest-first by source length (a proxy for ptxas time: the unrolled pixel bodies)."""
    units = [[] for _ in range(jobs)]
    for src in sorted(sources, key=len, reverse=True):
        min(units, key=lambda u: sum(map(len, u))).append(src)
    with tempfile.TemporaryDirectory() as tmp:
        def compile_unit(i):
            cu = Path(tmp) / f"unit{i}.cu"
            cu.write_text("\n".join(units[i]))
            r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", *shlex.split(NVCC_FLAGS),
                                str(cu), "-o", str(cu.with_suffix(".cubin"))], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-3000:]
            return {n: f.to_dict() for n, f in parse_ptxas(r.stderr).items()}
        report = {}
        with ThreadPoolExecutor(jobs) as ex:
            for part in ex.map(compile_unit, range(jobs)):
                report.update(part)
    return report
