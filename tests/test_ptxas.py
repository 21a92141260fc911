"""ptxas -v report parsing: captured reports of several shapes, and live ones from the real nvcc."""
import shutil
import subprocess

import pytest

from snn.codegen.ptxas import FunctionResources, parse_ptxas, problems, summarize

SM90 = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Function properties for k2
    256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem
ptxas info    : Compile time = 23.348 ms
ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
ptxas info    : Compile time = 0.854 ms
"""

# A non-inlined device function (_Z1ff) reports its own frame between two entries.
DEVICE_FN = """\
ptxas info    : Compiling entry function 'k3' for 'sm_90'
ptxas info    : Function properties for k3
    160 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 0 barriers, 160 bytes cumulative stack size
ptxas info    : Compile time = 2.427 ms
ptxas info    : Function properties for _Z1ff
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z7mangledPf' for 'sm_90'
ptxas info    : Function properties for _Z7mangledPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
"""

SPILLS_SM80 = """\
ptxas info    : Overriding maximum register limit 256 for 'heavy' with  24 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'heavy' for 'sm_80'
ptxas info    : Function properties for heavy
    1080 bytes stack frame, 2360 bytes spill stores, 2420 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 1080 bytes cumulative stack size, 4096 bytes smem, 368 bytes cmem[0]
"""


def test_entries_with_smem_and_stack():
    f = parse_ptxas(SM90)
    assert list(f) == ["k2", "k1"]
    assert f["k2"] == FunctionResources("k2", True, 32, 1024, 256, 0, 0, 1, 0)
    assert f["k1"] == FunctionResources("k1", True, 10, 0, 0, 0, 0, 0, 0)
    assert problems(f) == ["k2: 256 bytes stack frame"]


def test_device_function_recorded_separately():
    f = parse_ptxas(DEVICE_FN)
    assert set(f) == {"k3", "_Z1ff", "_Z7mangledPf"}
    assert not f["_Z1ff"].entry and f["_Z1ff"].registers == 0
    assert f["k3"].stack == 160 and f["k3"].registers == 30
    assert f["_Z7mangledPf"].registers == 8 and f["_Z7mangledPf"].entry


def test_spills_and_cmem():
    f = parse_ptxas(SPILLS_SM80)["heavy"]
    assert (f.registers, f.smem_static, f.stack, f.spill_stores, f.spill_loads, f.cmem0) == (24, 4096, 1080, 2360, 2420, 368)
    assert problems({"heavy": f}) == ["heavy: 1080 bytes stack frame, 2360 bytes spill stores, 2420 bytes spill loads"]


def test_summary_takes_worst_function():
    s = summarize(parse_ptxas(SM90))
    assert (s["registers"], s["smem_static"], s["stack"], s["spill_stores"]) == (32, 1024, 256, 0)
    assert set(s["functions"]) == {"k1", "k2"}


def test_empty_or_foreign_text():
    assert parse_ptxas("") == {}
    assert parse_ptxas("nvcc warning : something\n") == {}


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


@needs_nvcc
def test_live_report(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("""
extern "C" __global__ void clean(const float* a, float* b) { b[threadIdx.x] = a[threadIdx.x] * 2.f; }
extern "C" __global__ void framed(const float* a, float* b, int n) {
  __shared__ float s[300];
  float loc[64];
  for (int i = 0; i < n; i++) loc[i % 64] = a[i];
  s[threadIdx.x] = loc[threadIdx.x % 64];
  __syncthreads();
  b[threadIdx.x] = s[299 - threadIdx.x];
}
""")
    out = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"),
                          str(src)], capture_output=True, text=True, check=True)
    f = parse_ptxas(out.stderr)
    assert set(f) == {"clean", "framed"}
    assert f["clean"].problem() is None and f["clean"].registers > 0
    assert f["framed"].smem_static == 1200 and f["framed"].stack >= 256
    assert [p.split(":")[0] for p in problems(f)] == ["framed"]
