// Where a programmatic launch puts a grid of fewer blocks than SMs: ResNet-152's batch-8 pair (the 1x1 256->1024
// conv, 392 blocks of 128 threads with 63 KB of shared memory, then the 1x1 1024->256 on 100 blocks of 256 threads
// with 52 KB) as work-free kernels that each hold their SM for a fixed time, ten pairs in a CUDA graph, replayed
// (CUDA events, median of 50). With programmatic launches the second grid is placed while the first still holds
// the SMs; if its blocks then double up on the SMs that free first, it takes two of its blocks' time. Each variant
// also records how many of the second grid's blocks shared an SM (%smid at start).
//
//   nvcc -O3 -arch=sm_90 -o placement_probe placement_probe.cu && ./placement_probe
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

__device__ __forceinline__ void spin(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}

// a kernel that holds its SM for `cycles`, then lets the next one launch and leaves
__global__ void hold(long long cycles, int* smids, bool pdl) {
    if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x == 0 && smids) { unsigned s; asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); smids[blockIdx.x] = s; }
    spin(cycles);
    if (pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

void launch(cudaStream_t s, int blocks, int threads, size_t smem, long long cycles, int* smids, bool pdl) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks); cfg.blockDim = dim3(threads); cfg.dynamicSmemBytes = smem; cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, hold, cycles, smids, pdl));
}

int main() {
    CK(cudaFuncSetAttribute(hold, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    int* smids; CK(cudaMalloc(&smids, 100 * sizeof(int)));
    const long long first = 20000, second = 40000;   // ~10 and ~20 us at 1.98 GHz
    printf("| second grid | launches | us a pair | second grid's blocks on a shared SM |\n|---|---|---|---|\n");
    for (size_t smem2 : {(size_t)52 * 1024, (size_t)116 * 1024}) {
        for (bool pdl : {false, true}) {
            cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            cudaGraph_t g; cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            for (int i = 0; i < 10; ++i) {
                launch(s, 392, 128, 63 * 1024, first, nullptr, pdl);
                launch(s, 100, 256, smem2, second, i == 9 ? smids : nullptr, pdl);
            }
            CK(cudaStreamEndCapture(s, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            for (int i = 0; i < 5; ++i) CK(cudaGraphLaunch(ge, s));
            cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
            std::vector<float> t;
            for (int i = 0; i < 50; ++i) {
                CK(cudaEventRecord(a, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(b, s));
                CK(cudaEventSynchronize(b)); float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms * 100.f);
            }
            std::sort(t.begin(), t.end());
            std::vector<int> h(100); CK(cudaMemcpy(h.data(), smids, 400, cudaMemcpyDeviceToHost));
            std::vector<int> per(256, 0); for (int x : h) per[x]++;
            int shared = 0; for (int c : per) if (c > 1) shared += c;
            printf("| 100 x 256 threads, %zu KB | %s | %.2f | %d |\n", smem2 / 1024, pdl ? "programmatic" : "plain",
                   t[t.size() / 2], shared);
            CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g)); CK(cudaStreamDestroy(s));
        }
    }
    return 0;
}
