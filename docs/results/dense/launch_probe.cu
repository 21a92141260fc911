// What a kernel boundary costs at batch 1: chains of 20 launches of work-free kernels shaped like the dense
// kernel's batch-1 grids (112 blocks of 128 threads), captured into a CUDA graph and replayed (CUDA events,
// median of 200 replays), against the same number of barriers inside one kernel (cluster and grid-wide).
//
//   nvcc -O3 -arch=sm_90 -o launch_probe launch_probe.cu && ./launch_probe
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

constexpr int CHAIN = 20;

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_go() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// every variant stores one float a thread so that the chain has a data dependence the wait must honour
__global__ void k_plain(float* out) { out[blockIdx.x * blockDim.x + threadIdx.x] += 1.f; }
__global__ void k_pdl(float* out) { pdl_wait(); pdl_go(); out[blockIdx.x * blockDim.x + threadIdx.x] += 1.f; }
__global__ void __cluster_dims__(1, 1, 8) k_cl8(float* out) {
    pdl_wait(); pdl_go(); out[(blockIdx.z * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] += 1.f; }
__global__ void __cluster_dims__(1, 1, 8) k_cl8_sync(float* out) {
    pdl_wait(); pdl_go();
    cg::this_cluster().sync();
    out[(blockIdx.z * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] += 1.f;
    cg::this_cluster().sync();
}
// the dense kernel's prologue: two 16 KB weight chunks requested before the wait, then the cluster's sums
__global__ void __cluster_dims__(1, 1, 8) k_cl8_prologue(float* out, const float4* w) {
    extern __shared__ float4 sm[];
    const float4* src = w + (size_t)(blockIdx.z * gridDim.x + blockIdx.x) * 2048;
    for (int i = threadIdx.x; i < 2048; i += blockDim.x) sm[i] = src[i];
    pdl_wait(); pdl_go();
    __syncthreads();
    cg::this_cluster().sync();
    out[(blockIdx.z * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] += sm[threadIdx.x].x;
    cg::this_cluster().sync();
}
// a cluster of 16 (non-portable)
__global__ void k_cl16_sync(float* out) {
    pdl_wait(); pdl_go();
    cg::this_cluster().sync();
    out[(blockIdx.z * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] += 1.f;
    cg::this_cluster().sync();
}


// the K split's sums as the dense kernel takes them (pull): each block's partial tile (128 float4) in its shared
// memory, a cluster sync, each block sums its share from all eight, a relaxed cluster barrier before leaving
__global__ void __cluster_dims__(1, 1, 8) k_sum_pull(float4* out) {
    __shared__ float4 red[128];
    cg::cluster_group cl = cg::this_cluster();
    pdl_wait(); pdl_go();
    red[threadIdx.x] = make_float4(threadIdx.x, 1.f, 2.f, 3.f);
    cl.sync();
    const int rank = blockIdx.z;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    if (threadIdx.x < 16)
        for (int r = 0; r < 8; ++r) {
            const float4 x = cl.map_shared_rank(red, r)[rank * 16 + threadIdx.x];
            o.x += x.x; o.y += x.y; o.z += x.z; o.w += x.w;
        }
    if (threadIdx.x < 16) out[(blockIdx.x * 8 + rank) * 16 + threadIdx.x] = o;
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}
// push with one barrier: each block stores its shares into their owners' shared memory, one cluster sync, each
// block sums what it received (no barrier before leaving: nobody reads another block's memory after the sync)
__global__ void __cluster_dims__(1, 1, 8) k_sum_push(float4* out) {
    __shared__ float4 in[8][16];
    cg::cluster_group cl = cg::this_cluster();
    pdl_wait(); pdl_go();
    const float4 v = make_float4(threadIdx.x, 1.f, 2.f, 3.f);
    cl.map_shared_rank(&in[0][0], threadIdx.x / 16)[blockIdx.z * 16 + threadIdx.x % 16] = v;
    cl.sync();
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    if (threadIdx.x < 16)
        for (int r = 0; r < 8; ++r) { const float4 x = in[r][threadIdx.x]; o.x += x.x; o.y += x.y; o.z += x.z; o.w += x.w; }
    if (threadIdx.x < 16) out[(blockIdx.x * 8 + blockIdx.z) * 16 + threadIdx.x] = o;
}
// push through an mbarrier: st.async into the owner's memory, completing bytes on its mbarrier; the owner waits
// on its own mbarrier only. One cluster barrier publishes the mbarriers' init, arrived at the start and waited
// for before the first remote store (free where a main loop runs in between)
__global__ void __cluster_dims__(1, 1, 8) k_sum_mbar(float4* out) {
    __shared__ float4 in[8][16];
    __shared__ __align__(8) unsigned long long bar;
    const unsigned bar_a = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_a));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar_a), "r"(8 * 16 * 16) : "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
    pdl_wait(); pdl_go();
    const float4 v = make_float4(threadIdx.x, 1.f, 2.f, 3.f);
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    const unsigned owner = threadIdx.x / 16;
    unsigned dst, rbar;
    const unsigned local_dst = (unsigned)__cvta_generic_to_shared(&in[blockIdx.z][threadIdx.x % 16]);
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(local_dst), "r"(owner));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(bar_a), "r"(owner));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];"
                 :: "r"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(rbar) : "memory");
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar_a) : "memory");
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    if (threadIdx.x < 16)
        for (int r = 0; r < 8; ++r) { const float4 x = in[r][threadIdx.x]; o.x += x.x; o.y += x.y; o.z += x.z; o.w += x.w; }
    if (threadIdx.x < 16) out[(blockIdx.x * 8 + blockIdx.z) * 16 + threadIdx.x] = o;
}

// CHAIN barriers inside one kernel: cluster-wide, and grid-wide (a counter in global memory, every block resident)
__global__ void __cluster_dims__(1, 1, 8) k_cluster_barriers(float* out) {
    for (int i = 0; i < CHAIN; ++i) {
        out[(blockIdx.z * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] += 1.f;
        cg::this_cluster().sync();
    }
}
__global__ void k_grid_barriers(float* out, unsigned* counter) {
    const unsigned nb = gridDim.x * gridDim.y * gridDim.z;
    for (int i = 0; i < CHAIN; ++i) {
        out[blockIdx.x * blockDim.x + threadIdx.x] += 1.f;
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(counter, 1u);
            const unsigned target = nb * (i + 1);
            while (true) {
                unsigned v;
                asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(counter));
                if (v >= target) break;
            }
        }
        __syncthreads();
    }
}

template <class F>
float time_graph(F launch_all, int reps = 200) {
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    launch_all(s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 20; ++i) CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(a, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms * 1000.f);
    }
    std::sort(t.begin(), t.end());
    CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g)); CK(cudaStreamDestroy(s));
    return t[t.size() / 2];
}

template <class K, class... A>
void launch(cudaStream_t s, K kernel, dim3 grid, int threads, size_t smem, int cluster, bool pdl, A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid; cfg.blockDim = dim3(threads); cfg.dynamicSmemBytes = smem; cfg.stream = s;
    cudaLaunchAttribute at[2]; int n = 0;
    if (pdl) { at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[n].val.programmaticStreamSerializationAllowed = 1; ++n; }
    if (cluster) { at[n].id = cudaLaunchAttributeClusterDimension; at[n].val.clusterDim.x = 1; at[n].val.clusterDim.y = 1; at[n].val.clusterDim.z = cluster; ++n; }
    cfg.attrs = at; cfg.numAttrs = n;
    CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

int main() {
    float* out; CK(cudaMalloc(&out, 1 << 24)); CK(cudaMemset(out, 0, 1 << 24));
    float4* w; CK(cudaMalloc(&w, 112 * 2048 * 16)); CK(cudaMemset(w, 0, 112 * 2048 * 16));
    unsigned* counter; CK(cudaMalloc(&counter, 4));
    CK(cudaFuncSetAttribute(k_cl8_prologue, cudaFuncAttributeMaxDynamicSharedMemorySize, 84 * 1024));
    CK(cudaFuncSetAttribute(k_cl16_sync, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    const dim3 g112(14, 1, 8), flat(112);
    struct Row { const char* what; float us; };
    std::vector<Row> rows;
    auto chain = [&](const char* what, auto one) {
        const float us = time_graph([&](cudaStream_t s) { for (int i = 0; i < CHAIN; ++i) one(s); });
        rows.push_back({what, us / CHAIN});
    };
    chain("plain launch, 112 x 128", [&](cudaStream_t s) { launch(s, k_plain, flat, 128, 0, 0, false, out); });
    chain("programmatic launch (wait + launch_dependents)", [&](cudaStream_t s) { launch(s, k_pdl, flat, 128, 0, 0, true, out); });
    chain("programmatic, cluster of 8", [&](cudaStream_t s) { launch(s, k_cl8, g112, 128, 0, 0, true, out); });
    chain("programmatic, cluster of 8, two cluster syncs", [&](cudaStream_t s) { launch(s, k_cl8_sync, g112, 128, 0, 0, true, out); });
    chain("... + 32 KB of weights staged, 84 KB shared", [&](cudaStream_t s) { launch(s, k_cl8_prologue, g112, 128, 84 * 1024, 0, true, out, (const float4*)w); });
    chain("programmatic, cluster of 16, two cluster syncs", [&](cudaStream_t s) { launch(s, k_cl16_sync, dim3(7, 1, 16), 128, 0, 16, true, out); });
    chain("K-split sums, pull: cluster sync + relaxed barrier", [&](cudaStream_t s) { launch(s, k_sum_pull, g112, 128, 0, 0, true, (float4*)out); });
    chain("K-split sums, push: one cluster sync", [&](cudaStream_t s) { launch(s, k_sum_push, g112, 128, 0, 0, true, (float4*)out); });
    chain("K-split sums, push: st.async + mbarrier", [&](cudaStream_t s) { launch(s, k_sum_mbar, g112, 128, 0, 0, true, (float4*)out); });
    chain("plain launch, cluster of 8, two cluster syncs", [&](cudaStream_t s) { launch(s, k_cl8_sync, g112, 128, 0, 0, false, out); });
    {
        const float us = time_graph([&](cudaStream_t s) { launch(s, k_cluster_barriers, g112, 128, 0, 0, false, out); });
        rows.push_back({"one kernel, a cluster barrier per step", us / CHAIN});
    }
    {
        const float us = time_graph([&](cudaStream_t s) {
            CK(cudaMemsetAsync(counter, 0, 4, s));
            launch(s, k_grid_barriers, flat, 128, 0, 0, false, out, counter);
        });
        rows.push_back({"one kernel, a grid barrier per step (memset included)", us / CHAIN});
    }
    // the three sums' results: block (x, rank) thread i holds 8 * (rank * 16 + i), 8, 16, 24
    for (int v = 0; v < 3; ++v) {
        CK(cudaMemset(out, 0, 1 << 24));
        cudaStream_t s = 0;
        if (v == 0) launch(s, k_sum_pull, g112, 128, 0, 0, false, (float4*)out);
        if (v == 1) launch(s, k_sum_push, g112, 128, 0, 0, false, (float4*)out);
        if (v == 2) launch(s, k_sum_mbar, g112, 128, 0, 0, false, (float4*)out);
        std::vector<float> h(14 * 8 * 16 * 4);
        CK(cudaMemcpy(h.data(), out, h.size() * 4, cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int b = 0; b < 14 * 8; ++b)
            for (int i = 0; i < 16; ++i) {
                const float* o = &h[(b * 16 + i) * 4];
                bad += o[0] != 8.f * ((b % 8) * 16 + i) || o[1] != 8.f || o[2] != 16.f || o[3] != 24.f;
            }
        printf("sum variant %d: %d wrong values\n", v, bad);
    }
    printf("| what | us a step |\n|---|---|\n");
    for (auto& r : rows) printf("| %s | %.2f |\n", r.what, r.us);
    return 0;
}
