"""What a kernel boundary costs by itself on this GPU, against a grid-wide barrier inside one persistent kernel: the
launch-and-wait part of the ~2.6 us a boundary takes out of ResNet-152's batch-1 graph (docs/performance.md), and
whether one kernel over several layers, its blocks meeting at a barrier, could do better.

- chain: `chain_step` (132 blocks of 256 threads, each thread reads the float the previous step wrote and writes
  the next) back to back in a CUDA graph, plain launches or programmatic ones (griddepcontrol.wait first), those
  with the trigger (griddepcontrol.launch_dependents) at the start or implicit at the end; us a step: the
  difference between a graph of 110 steps and one of 10, over 100 (measure.timing.graph_call_s);
- barrier: one launch of `grid_barrier` (112 or 132 blocks, every block resident) meeting at a barrier n times
  (one atomic add a block, release, then a spin on an acquire load); us a barrier: n = 1001 against n = 1, over 1000
  (CUDA events, median of 20).

    python3 boundary_probe.py OUT.json      (the table on stdout)
"""
import ctypes
import json
import sys

import torch

from snn.codegen.emit import EmittedKernel
from snn.runtime.check import KernelRunner
from snn.runtime.measure.timing import event_median_s, graph_call_s

BARRIER = r"""
extern "C" __global__ void grid_barrier(int n, unsigned* counter, const float* sink, float* out) {
    float acc = threadIdx.x;
    for (int i = 0; i < n; ++i) {
        __syncthreads();
        if (threadIdx.x == 0) {
            const unsigned target = (unsigned)(i + 1) * gridDim.x;
            unsigned v;
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(counter) : "memory");
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
            } while (v < target);
        }
        __syncthreads();
        acc += sink[(blockIdx.x + i) % gridDim.x];   // a read after each barrier, as a layer's first load would be
    }
    if (acc == -1.f) out[0] = acc;
}
"""
CHAIN = r"""
extern "C" __global__ void chain_step(const float* in, float* out, int trigger_early) {
    if (trigger_early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i] + 1.f;
}
"""
BLOCKS, THREADS = 132, 256
I32, PTR = ctypes.c_int, ctypes.c_void_p


def main() -> None:
    runner = KernelRunner()
    kernels = [EmittedKernel("grid_barrier", BARRIER, [], {}), EmittedKernel("chain_step", CHAIN, [], {})]
    bad = runner.compile(kernels)
    if bad:
        sys.exit(f"compile problems: {bad}")
    dev, cub = runner.dev, {k.name: runner.records[k.name]["cubin"] for k in kernels}
    out = {"gpu": torch.cuda.get_device_name(), "chain_us": {}, "barrier_us": {}}

    a, b = (torch.ones(BLOCKS * THREADS, device="cuda") for _ in range(2))
    for pdl, early in ((False, 0), (True, 0), (True, 1)):
        state = [a, b]

        def step():
            src, dst = state
            dev.launch(cub["chain_step"], "chain_step", (BLOCKS, 1, 1), (THREADS, 1, 1), 0,
                       [(src.data_ptr(), PTR), (dst.data_ptr(), PTR), (early, I32)], pdl)
            state.reverse()
        out["chain_us"][f"{'programmatic' if pdl else 'plain'} launches{', trigger at the start' if early else ''}"] = \
            marginal_us(lambda k: graph_call_s(torch, step, calls=k) * k, 10, 110)

    sink = torch.ones(BLOCKS, device="cuda")
    res = torch.zeros(1, device="cuda")
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    for blocks in (112, BLOCKS):
        def run(n, blocks=blocks):
            counter.zero_()
            dev.launch(cub["grid_barrier"], "grid_barrier", (blocks, 1, 1), (THREADS, 1, 1), 0,
                       [(n, I32), (counter.data_ptr(), PTR), (sink.data_ptr(), PTR), (res.data_ptr(), PTR)])
        out["barrier_us"][f"{blocks} blocks"] = marginal_us(lambda n: event_median_s(torch, lambda: run(n), 20),
                                                            1, 1001)
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
    print(table(out))


def marginal_us(total_s, lo: int, hi: int) -> float:
    """Microseconds one more step adds: total_s(n) is the seconds of n steps; its slope from lo to hi steps."""
    t_lo = total_s(lo)
    return round((total_s(hi) - t_lo) / (hi - lo) * 1e6, 3)


def table(out: dict) -> str:
    rows = [f"| boundary, {k} | {v:.3f} |" for k, v in out["chain_us"].items()]
    rows += [f"| grid barrier, {k} | {v:.3f} |" for k, v in out["barrier_us"].items()]
    return (f"{out['gpu']}: us a kernel boundary (a step of {BLOCKS} x {THREADS} threads in a CUDA graph) and a "
            "grid-wide barrier inside one kernel\n\n| what | us |\n|---|---|\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
