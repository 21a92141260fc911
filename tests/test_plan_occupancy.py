"""Stage 1 (codegen/plan/occupancy.py): the occupancy calculator, pinned on hand-worked values (arithmetic in
the comments) for the H100 and the V100 and cross-checked against CUDA's own cuda_occupancy.h where a C++
compiler is found; and stage 1's cut over a shape's configs."""
import dataclasses
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np

import pytest

from snn.codegen.config import KernelConfig
from snn.codegen.gpu import known_gpus, load_gpu
from snn.codegen.plan import config_space, estimate_resources, stages
from snn.codegen.plan.explain import explain_layer
from snn.codegen.plan.occupancy import OCCUPANCY_MIN_BATCHED, occupancy, occupancy_array, occupancy_min
from snn.codegen.spec import ConvShape

from plan_examples import CFG, SHAPE

H100 = load_gpu("h100")
V100 = load_gpu("v100")


def test_h100_register_limited_exactly_half():
    # 128 threads = 4 warps; 64 regs -> 64*32 = 2048 regs per warp (already a multiple of 256).
    # Registers: a sub-partition holds 65536/4 = 16384 -> 16384 // 2048 = 8 warps; 4 of them -> 32
    #            warps per SM -> 32 // 4 = 8 blocks.
    # Shared:    20000 + 1024 reserved = 21024 -> up to a multiple of 128 = 21120; 233472 // 21120 = 11.
    # Warps:     64 // 4 = 16.  Blocks: 32.
    # -> 8 blocks, 32 warps, 32/64 = 50 %.
    o = occupancy(H100, 128, 64, 20000)
    assert o.limits == {"warps": 16, "blocks": 32, "registers": 8, "shared": 11}
    assert (o.blocks_per_sm, o.warps_per_sm, o.occupancy, o.limiter) == (8, 32, 0.5, "registers")
    assert (o.regs_per_warp, o.smem_per_block) == (2048, 21120)


def test_h100_one_register_more_loses_a_block_per_quarter():
    # 256 threads = 8 warps; 65 regs -> 65*32 = 2080 -> up to a multiple of 256 = 2304 per warp.
    # 16384 // 2304 = 7 warps per sub-partition -> 28 per SM -> 28 // 8 = 3 blocks = 24 warps = 37.5 %.
    o = occupancy(H100, 256, 65, 0)
    assert (o.blocks_per_sm, o.occupancy, o.limiter, o.regs_per_warp) == (3, 0.375, "registers", 2304)


def test_h100_shared_memory_limited():
    # 64 threads = 2 warps, 32 regs (1024 per warp -> 16 warps per quarter -> 64 per SM -> 32 blocks).
    # Shared: 49152 + 1024 = 50176 = 392 * 128; 233472 // 50176 = 4 blocks -> 8 warps = 12.5 %.
    o = occupancy(H100, 64, 32, 48 * 1024)
    assert o.limits["registers"] == 32 and o.limits["shared"] == 4
    assert (o.blocks_per_sm, o.occupancy, o.limiter) == (4, 0.125, "shared")


def test_h100_block_limit_and_largest_block():
    # 32 threads, 32 regs, no smem: warps allow 64 blocks, registers 64, the SM only 32 -> 50 %.
    o = occupancy(H100, 32, 32, 0)
    assert (o.blocks_per_sm, o.occupancy, o.limiter) == (32, 0.5, "blocks")
    # The opt-in maximum 232448 + 1024 reserved = 233472 = the whole SM: one block; a byte more cannot launch.
    assert occupancy(H100, 128, 32, 232448).blocks_per_sm == 1
    assert occupancy(H100, 128, 32, 232449).blocks_per_sm == 0


def test_v100_register_limited():
    # 256 threads = 8 warps; 40 regs -> 1280 per warp (5 * 256). 16384 // 1280 = 12 warps per quarter
    # -> 48 per SM -> 48 // 8 = 6 blocks. Shared: 10000 -> multiple of 256 = 10240 (no reserved part on
    # sm_70); 98304 // 10240 = 9. Warps 64 // 8 = 8. -> 6 blocks, 48 warps, 75 %.
    o = occupancy(V100, 256, 40, 10000)
    assert o.limits == {"warps": 8, "blocks": 32, "registers": 6, "shared": 9}
    assert (o.blocks_per_sm, o.warps_per_sm, o.occupancy, o.smem_per_block) == (6, 48, 0.75, 10240)


def test_v100_shared_memory_limited():
    # 128 threads, 32 regs (registers allow 64 warps = 16 blocks). Shared: 30000 -> 30208 (118 * 256);
    # 98304 // 30208 = 3 blocks -> 12 warps = 18.75 %.
    o = occupancy(V100, 128, 32, 30000)
    assert (o.blocks_per_sm, o.occupancy, o.limiter) == (3, 0.1875, "shared")


def test_v100_per_thread_and_per_block_register_limits():
    # 255 is the most a thread may have; 256 cannot launch.
    assert occupancy(V100, 128, 255, 0).blocks_per_sm > 0
    assert occupancy(V100, 128, 256, 0).blocks_per_sm == 0
    # 1024 threads = 32 warps x 64 regs = 32 x 2048 = 65536 = regs_per_block: one block, 50 %.
    assert (occupancy(V100, 1024, 64, 0).blocks_per_sm, occupancy(V100, 1024, 64, 0).occupancy) == (1, 0.5)
    # 72 regs -> 2304 per warp x 32 warps = 73728 > 65536: cannot launch.
    assert occupancy(V100, 1024, 72, 0).blocks_per_sm == 0


def test_turing_has_half_the_warps():
    # RTX 2080 Ti: 32 warps and 16 blocks per SM. 256 threads, 64 regs: warps allow 4 blocks, registers
    # 8 warps per quarter = 32 = 4 blocks -> 32 of 32 warps = 100 %.
    o = occupancy(load_gpu("rtx2080ti"), 256, 64, 0)
    assert (o.blocks_per_sm, o.occupancy) == (4, 1.0)


def test_vectorised_matches_scalar():
    rng = np.random.default_rng(0)
    threads = rng.integers(1, 9, 500) * 32
    regs = rng.integers(16, 256, 500)
    smem = rng.integers(0, 100_000, 500)
    bps, occ = occupancy_array(H100, threads, regs, smem)
    for t, r, s, b, o in zip(threads, regs, smem, bps, occ):
        one = occupancy(H100, int(t), int(r), int(s))
        assert (one.blocks_per_sm, one.occupancy) == (b, o)


HEADER = Path("/usr/local/cuda/include/cuda_occupancy.h")
REFERENCE = r"""
#include <cstdio>
#include <cstdlib>
#include <cuda_occupancy.h>
int main(int argc, char** argv) {
  cudaOccDeviceProp p;
  p.computeMajor = atoi(argv[1]); p.computeMinor = atoi(argv[2]); p.numSms = atoi(argv[3]);
  p.maxThreadsPerMultiprocessor = atoi(argv[4]); p.regsPerMultiprocessor = atoi(argv[5]);
  p.regsPerBlock = atoi(argv[6]); p.sharedMemPerMultiprocessor = atoi(argv[7]);
  p.sharedMemPerBlock = atoi(argv[8]); p.sharedMemPerBlockOptin = atoi(argv[9]);
  p.reservedSharedMemPerBlock = atoi(argv[10]); p.maxThreadsPerBlock = atoi(argv[11]); p.warpSize = 32;
  int t, r, s;
  while (scanf("%d %d %d", &t, &r, &s) == 3) {
    cudaOccFuncAttributes a; a.maxThreadsPerBlock = 1024; a.numRegs = r; a.sharedSizeBytes = 0;
    a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
    a.maxDynamicSharedSizeBytes = p.sharedMemPerBlockOptin; a.numBlockBarriers = 0;
    cudaOccDeviceState st; cudaOccResult res;
    cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&res, &p, &a, &st, t, s);
    printf("%d\n", e == CUDA_OCC_SUCCESS ? res.activeBlocksPerMultiprocessor : 0);
  }
}
"""


@pytest.mark.skipif(not HEADER.exists() or shutil.which("g++") is None, reason="needs CUDA's cuda_occupancy.h and g++")
def test_matches_cuda_occupancy_header(tmp_path):
    src, exe = tmp_path / "occ.cpp", tmp_path / "occ"
    src.write_text(REFERENCE)
    subprocess.run(["g++", "-O1", f"-I{HEADER.parent}", str(src), "-o", str(exe)], check=True, capture_output=True)
    rnd = random.Random(7)
    for name in known_gpus():
        g = load_gpu(name)
        cases = [(rnd.choice(range(32, 1025, 32)) if rnd.random() < 0.8 else rnd.randint(1, 1024), rnd.randint(16, 255),
                  rnd.choice([0, rnd.randint(0, g.smem_per_block_optin + 2048)])) for _ in range(1500)]
        args = [str(x) for x in (*g.compute_capability, g.sms, g.max_threads_per_sm, g.regs_per_sm, g.regs_per_block,
                                 g.smem_per_sm, g.smem_per_block, g.smem_per_block_optin, g.smem_reserved_per_block,
                                 g.max_threads_per_block)]
        out = subprocess.run([str(exe), *args], input="\n".join(f"{t} {r} {s}" for t, r, s in cases),
                             capture_output=True, text=True, check=True).stdout.split()
        mine = [occupancy(g, t, r, s).blocks_per_sm for t, r, s in cases]
        assert mine == [int(x) for x in out], name


# ---- stage 1 ---------------------------------------------------------------------------------------

def test_stage1_threshold_by_model_and_batch():
    """"snn" relaxes stage 1 to OCCUPANCY_MIN_BATCHED at batch > 1; batch 1 and the other models keep 50 %."""
    assert occupancy_min("snn", 1) == occupancy_min("paper", 8) == occupancy_min("pipes", 32) == 0.5
    assert occupancy_min("snn", 8) == OCCUPANCY_MIN_BATCHED == 0.25
    batched, paper = set(stages(SHAPE, H100, 2, 0.5)["stage1"]), set(stages(SHAPE, H100, 2, 0.5, "paper")["stage1"])
    assert paper < batched
    for c in stages(SHAPE, H100, 2, 0.5)["launchable"]:
        occ = occupancy(H100, c.block_threads(), *estimate_resources(SHAPE, c)).occupancy
        # warp-tiled configs are "snn"'s only
        assert (occ >= 0.25) == (c in batched) and (occ >= 0.5 and not c.warp_tiled) == (c in paper)


def test_stage1_keeps_exactly_the_configs_at_50_percent():
    # th4 tw7 nt1: 28 + 9 + 26 = 63 regs -> 2016 -> 2048 per warp -> 8 warps per quarter -> 50 %: kept.
    # th4 tw8 nt1: 32 + 9 + 26 = 67 regs -> 2144 -> 2304 per warp -> 7 per quarter -> 28 warps = 7 blocks = 43.75 %: dropped.
    # as the space lists them (the H100's channel splits that fit a cluster carry `cluster`)
    st = {k: [dataclasses.replace(c, cluster=False) for c in v] for k, v in stages(SHAPE, H100, 1, 0.5).items()}
    keep, drop = KernelConfig(4, 7, 16, 128, 1), KernelConfig(4, 8, 16, 128, 1)
    assert occupancy(H100, 128, *estimate_resources(SHAPE, keep)).occupancy == 0.5
    assert occupancy(H100, 128, *estimate_resources(SHAPE, drop)).occupancy == 0.4375
    assert keep in st["stage1"] and drop in st["launchable"] and drop not in st["stage1"]
    # 0.5625 for the worked config: 51 regs -> 1632 -> 1792 per warp -> 9 per quarter -> 36 warps = 9 blocks of 4
    assert CFG in st["stage1"]
    s1 = set(st["stage1"])
    for c in st["launchable"]:
        occ = occupancy(H100, c.block_threads(), *estimate_resources(SHAPE, c)).occupancy
        assert (occ >= 0.5) == (c in s1)


def test_stage1_relaxes_when_nothing_reaches_50_percent():
    # The 7x7 stem: a weight ring slot is 49*64*4 = 12.5 KB per block of 64 threads: no config reaches 50 %.
    stem = ConvShape(3, 64, 224, 224, 7, 7, (2, 2), (3, 3))
    info = explain_layer(stem, H100, 1, 0.5)
    assert info["stage1_relaxed"] and info["counts"]["stage1_occupancy"] > 0
    best = max(occupancy(H100, c.threads, *estimate_resources(stem, c)).occupancy for c in config_space(stem))
    assert all(r["occupancy"] == best for r in info["top"])
