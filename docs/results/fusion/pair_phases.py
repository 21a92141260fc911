"""Where a pair kernel's time goes (codegen/pair.py), on the chain of ResNet-152's layer 3 at batch 1: the block's
sparse 3x3 (256 @14, the config the network runs it on) adding into raw sums, then the pair kernel (1x1 256->1024 and
the next block's 1024->256) staging them with the 3x3's epilogue, ten such blocks back to back in a CUDA graph.

For each pair config of CONFIGS: the kernel against float64 (check.check_pair), the chain's time a block
(measure.timing.graph_call_s, median of 15 replays, twice) and the pair's alone (ten back to back), then one replay of
the chain with a copy of both kernels that stamps %globaltimer and clock64 (thread 0 of every block) at the pair's
phase boundaries: the programmatic wait, the first conv's loop, x's epilogue, the W2 share's arrival, the second
conv, the cluster's sum, y's store. Printed: per config the median block's cycles a phase.

With `sconv`: the chain for each sparse 3x3 config of SCONVS (the pair on SCONV_PAIR, the config the network's layer-3
pairs run), each 3x3 checked against float64 first, timed as a block of the chain and alone (ten back to back).

With `variants`: the same for copies of the network's layer-3 pair (LOOP_CONFIG) with parts of the first conv's loop
left out (VARIANTS: its copies of the next chunk, its FFMAs, the input's epilogue), each alone and together, which
says what the loop's time is made of. A copy that leaves something out computes wrong sums (not checked).

    [TAGS=tag,...] python3 pair_phases.py OUT_DIR   # -> OUT_DIR/phases.json, the table on stdout
    python3 pair_phases.py OUT_DIR variants  # -> OUT_DIR/variants.json, the table on stdout
    python3 pair_phases.py OUT_DIR sconv     # -> OUT_DIR/sconv.json, the table on stdout
    python3 pair_phases.py OUT_DIR ncu TAG   # only runs config TAG's chain six times eagerly (under ncu)
"""
import json
import os
import sys
from dataclasses import replace

import numpy as np
import torch

from snn.codegen import pair
from snn.codegen.config import KernelConfig
from snn.codegen.emit import render_sparse, render_sparse_ws
from snn.codegen.spec import ConvShape
from snn.runtime.check import KernelRunner, relu_input
from snn.runtime.executor import Epilogue, InputEpilogue
from snn.runtime.measure.timing import graph_call_s

# the configs compared: the one the network ran before the warp split, then each change alone and together
CONFIGS = [pair.PairConfig(32, 64, 128, 1, 2), pair.PairConfig(32, 64, 128, 1, 2, True),
           pair.PairConfig(32, 64, 128, 1, 2, False, 32), pair.PairConfig(32, 64, 128, 1, 2, True, 32),
           # two and four warps a scheduler: the first conv's K over 4 groups of two or four warps (kg)
           pair.PairConfig(32, 64, 128, 2, 2, True, 32, 4), pair.PairConfig(32, 64, 256, 1, 2, True, 32, 4),
           pair.PairConfig(32, 64, 256, 2, 2, True, 32, 4),
           # 64-channel chunks: half the chunks, waits and barriers, twice the bytes a copy stage
           pair.PairConfig(32, 64, 128, 1, 2, True, 32, 0, 64), pair.PairConfig(32, 64, 256, 1, 2, True, 32, 4, 64),
           # 28-pixel tiles: 7 whole tiles of the 14x14 map (the first conv over a group a warp, or 4 groups of two)
           pair.PairConfig(28, 64, 256, 1, 2, True, 64, 0, 64), pair.PairConfig(28, 64, 256, 1, 2, False, 64, 4, 64),
           # the second with three stages, and with 32-channel chunks
           pair.PairConfig(28, 64, 256, 1, 3, False, 64, 4, 64), pair.PairConfig(28, 64, 256, 1, 2, False, 64, 4)]
# TAGS (comma-separated config tags): only those of CONFIGS
S3 = ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1))    # layer 3's 3x3, then its pair (1x1 256->1024, 1024->256)
PAIR = (ConvShape(256, 1024, 14, 14, 1, 1, (1, 1), (0, 0)), ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)))
SCONV = KernelConfig(2, 7, 8, 32, 1, 7, 1)   # th2 tw7 tc8, 32 threads nt 1, 7 x 1 warps
# the one-row warp tiles, also timed alone on ResNet-152's other stride-1 3x3 shapes at batch 1 beside the plan's pick
ROW_TILES = [KernelConfig(*f) for f in (
    (1, 7, 8, 32, 2, 7, 2), (1, 7, 8, 32, 1, 7, 2), (1, 7, 4, 32, 2, 7, 2), (1, 7, 8, 32, 4, 7, 2),
    (1, 7, 16, 32, 2, 7, 2), (1, 7, 4, 32, 1, 7, 2), (1, 7, 8, 32, 2, 7, 1), (1, 7, 8, 32, 2, 2, 7),
    (1, 7, 8, 32, 2, 4, 2), (1, 7, 4, 32, 4, 7, 2))]
OTHER_3X3 = [(64, 56), (128, 28), (256, 14), (512, 7)]   # C = N, H = W
# the 3x3's configs the sconv mode compares: the network's first, then the cost model's next candidates at 0.7 and
# larger tiles, more output channels a thread, fewer or more channels a block
SCONVS = [SCONV] + ROW_TILES + [KernelConfig(*f) for f in (
    (7, 2, 8, 32, 1, 1, 7), (2, 7, 8, 32, 1, 4, 2), (4, 4, 8, 32, 1, 2, 4), (2, 4, 16, 32, 2, 4, 2),
    (2, 7, 8, 32, 1), (2, 7, 8, 64, 1), (2, 7, 4, 32, 1, 7, 1), (2, 7, 16, 32, 1, 7, 1), (2, 7, 8, 32, 2, 7, 1),
    (2, 7, 16, 32, 2, 7, 1), (2, 7, 8, 32, 4, 7, 1), (2, 7, 8, 32, 1, 7, 2), (2, 7, 8, 32, 2, 7, 2),
    (2, 14, 8, 32, 1, 7, 1))]
SCONV_PAIR = pair.PairConfig(32, 64, 256, 1, 2, True, 32, 4, 64)
LOOP_CONFIG = pair.PairConfig(32, 64, 128, 1, 2, True, 32)   # the config the network's layer-3 pairs run
# source substitutions in the first conv's loop (templates/dense_pair.cu.j2): a changed template fails at `variant`
NEXT = "if (nxt < NK1) { load_a(nxt % STAGES, nxt); load_b(nxt % STAGES, nxt); }"
FMA = "for (int kk = 0; kk < KPS; kk += 4) {"
VARIANTS = {"all": [],
            "no A copies": [(NEXT, "if (nxt < NK1) { load_b(nxt % STAGES, nxt); }")],
            "no B copies": [(NEXT, "if (nxt < NK1) { load_a(nxt % STAGES, nxt); }")],
            "no copies": [(NEXT, "")],
            "no FFMAs": [(FMA, "for (int kk = 0; kk < 0; kk += 4) {")],
            "no copies, no FFMAs": [(NEXT, ""), (FMA, "for (int kk = 0; kk < 0; kk += 4) {")],
            "no input epilogue": [("epi_a(it % STAGES, it);", "")]}
PHASES = ["entry", "wait", "conv1 loop", "x epilogue", "W2 wait", "conv2", "cluster sum", "y store"]
RECORDS = 16384

STAMPS = r'''
__device__ unsigned long long snn_stamps[%d * 17];
__device__ unsigned int snn_ticket;
__device__ __forceinline__ unsigned long long snn_gt() { unsigned long long g; asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(g)); return g; }
#define SNN_ST(i) if (threadIdx.x == 0 && threadIdx.y == 0) { sg[i] = snn_gt(); sc[i] = clock64(); }
#define SNN_DUMP if (threadIdx.x == 0 && threadIdx.y == 0) { unsigned r_ = atomicAdd(&snn_ticket, 1u); if (r_ < %d) { \
  for (int i_ = 0; i_ < 8; ++i_) { snn_stamps[r_ * 17 + i_] = sg[i_]; snn_stamps[r_ * 17 + 8 + i_] = sc[i_]; } \
  snn_stamps[r_ * 17 + 16] = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); } }
''' % (RECORDS, RECORDS)
WAIT = 'asm volatile("griddepcontrol.wait;" ::: "memory");\n#endif\n'
DEPS = '#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n    asm volatile("griddepcontrol.launch_dependents'


def at(src, marker, text, before=False):
    """src with text inserted after (before) the one occurrence of marker: a changed template fails here."""
    assert src.count(marker) == 1, f"stamp marker {marker!r} found {src.count(marker)} times"
    i = src.index(marker) + (0 if before else len(marker))
    return src[:i] + text + src[i:]


def stamped(k, points, tail):
    """A copy of kernel k (renamed) stamping at the (marker, before) points, then dumping before `tail`."""
    src = at(k.source, 'extern "C"', STAMPS, before=True)
    body = src.index("\n{\n", src.index("__global__")) + 3      # the kernel's opening brace
    src = src[:body] + "    unsigned long long sg[8] = {0}, sc[8] = {0}; SNN_ST(0)\n" + src[body:]
    for i, (marker, before) in enumerate(points, 1):
        src = at(src, marker, f"    SNN_ST({i})\n", before)
    i = src.rindex(tail)
    src = src[:i] + "\n    SNN_ST(7) SNN_DUMP" + src[i:]
    return renamed(k, src, "_stamped")


def renamed(k, src, suffix):
    """Kernel k with source src, its function renamed k.name + suffix (a cubin of its own)."""
    name = k.name + suffix
    return replace(k, name=name, source=src.replace(k.name, name), steps=[dict(s, function=name) for s in k.steps])


def variant(k, tag, subs):
    """A copy of pair kernel k (renamed) with the source substitutions subs: (text, replacement), each found once."""
    src = k.source
    for a, b in subs:
        assert src.count(a) == 1, f"variant {tag!r}: {a!r} found {src.count(a)} times"
        src = src.replace(a, b)
    return renamed(k, src, "_" + "".join(w[0] for w in tag.replace(",", "").split()))


def stamped_pair(k):
    return stamped(k, [(WAIT, False), ("    float* const red = snn_smem;", True), ("// x complete\n", False),
                       ("    // the second conv over this block's share", True), (DEPS, True),
                       ("snn_ksum_wait(bar_s);\n", False)], "\n}\n#undef C1")


def stamped_sconv(k):
    return stamped(k, [(WAIT, False)], "\n}")


class Chain:
    """Layer 3's chain and its operands: the 3x3's input about 0.72 zeros, x's about 0.75 (layer 3's trained-like
    profile); the 3x3 adds into one of two regions of raw sums while the pair clears the other for the next block."""

    def __init__(self, runner, gen):
        self.runner = runner
        self.y = relu_input(torch, (1, 14, 14, 256), 0.72, gen)
        self.w3 = torch.randn((256, 3, 3, 256), generator=gen, device="cuda") * (256 * 9 * 0.28) ** -0.5
        self.w1 = torch.randn((256, 1, 1, 1024), generator=gen, device="cuda") * (256 * 0.25) ** -0.5
        self.w2 = torch.randn((1024, 1, 1, 256), generator=gen, device="cuda") * (1024 * 0.6) ** -0.5
        self.sums = [torch.zeros((1, 14, 14, 256), device="cuda") for _ in range(2)]
        shift = torch.randn(256, generator=gen, device="cuda") * 0.1 - 0.4
        b1 = torch.randn(1024, generator=gen, device="cuda") * 0.1
        b2 = torch.randn(256, generator=gen, device="cuda") * 0.1 - 0.45
        res = torch.rand((1, 14, 14, 1024), generator=gen, device="cuda")
        self.x = torch.empty((1, 14, 14, 1024), device="cuda")
        z = torch.zeros(4, dtype=torch.int64, device="cuda")
        self.epi1, self.epi2 = Epilogue(b1, res.permute(0, 3, 1, 2), True, z, 0), Epilogue(b2, None, True, z, 1)
        self.in_epi = InputEpilogue(shift, z, 2)

    def conv3(self, i, sk):
        """The 3x3 adding its raw sums into region i % 2."""
        a = self.sums[i % 2].permute(0, 3, 1, 2)
        entry = {"cubin": self.runner.records[sk.name]["cubin"], "steps": sk.steps, "epilogue": False}
        self.runner.backend.sparse_conv(sk.name, entry, self.y.permute(0, 3, 1, 2), self.w3, a, {}, None, into=a)

    def pair(self, i, pk):
        """The pair on region i % 2's sums (the 3x3's epilogue while staging), clearing the other region."""
        self.runner.run_pair(pk, self.sums[i % 2], self.w1, self.x, self.w2, self.y, self.epi1, self.epi2,
                             self.in_epi, zero=self.sums[(i + 1) % 2])

    def block(self, i, sk, pk):
        self.conv3(i, sk)
        self.pair(i, pk)


def main() -> None:
    out = sys.argv[1]
    torch.backends.cudnn.allow_tf32 = False
    runner = KernelRunner()
    gen = torch.Generator(device="cuda").manual_seed(0)
    s3, (first, second) = S3, PAIR
    if len(sys.argv) > 2 and sys.argv[2] == "sconv":
        return sconv(out, runner, gen)
    ks = render_sparse_ws(s3, 1, SCONV)
    kss = stamped_sconv(ks)
    variants = len(sys.argv) > 2 and sys.argv[2] == "variants"
    if variants:
        base = pair.emitted(first, second, 1, LOOP_CONFIG)
        pairs = [(tag, variant(base, tag, subs)) for tag, subs in VARIANTS.items()]
    else:
        tags = set(filter(None, os.environ.get("TAGS", "").split(",")))
        pairs = [(cfg.tag(), pair.emitted(first, second, 1, cfg)) for cfg in CONFIGS if not tags or cfg.tag() in tags]
    pairs = [(tag, k, stamped_pair(k)) for tag, k in pairs]
    bad = runner.compile([ks, kss] + [k for _, k, kst in pairs] + [kst for _, k, kst in pairs])
    if bad:
        print("compile problems:", bad, flush=True)
    chain = Chain(runner, gen)
    block = chain.block

    if len(sys.argv) > 3 and sys.argv[2] == "ncu":
        k = next(k for tag, k, _ in pairs if tag == sys.argv[3])
        for i in range(6):
            block(i, ks, k)
        torch.cuda.synchronize()
        return
    drv = runner.dev.drv

    def symbol(k, name):
        err, ptr, _ = drv.cuModuleGetGlobal(runner.dev.module(runner.records[k.name]["cubin"]), name)
        assert int(err) == 0, err
        return ptr

    rows = []
    for tag, k, kst in pairs:
        if k.name in bad:   # the stamped copy may spill a little where the kernel takes every register: still run
            continue
        chk = runner.check_pair(k, first, second, 1, 0.7, gen) if not variants or tag == "all" else \
            {"ok": None, "err_over_allowed": None}
        times = [graph_call_s(torch, lambda: [block(i, ks, k) for i in range(2)], calls=5) * 1e6 / 2 for _ in range(2)]
        alone = graph_call_s(torch, lambda: chain.pair(0, k)) * 1e6
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(10):
                block(i, kss, kst)
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        for kk in (kss, kst):
            drv.cuMemsetD32(symbol(kk, b"snn_ticket"), 0, 1)
        g.replay()
        torch.cuda.synchronize()
        n = np.zeros(1, dtype=np.uint32)
        drv.cuMemcpyDtoH(n.ctypes.data, symbol(kst, b"snn_ticket"), 4)
        rec = np.zeros(RECORDS * 17, dtype=np.uint64)
        drv.cuMemcpyDtoH(rec.ctypes.data, symbol(kst, b"snn_stamps"), rec.nbytes)
        rec = rec[:int(min(n[0], RECORDS)) * 17].reshape(-1, 17).astype(np.int64)
        del g
        cycles = {f"{PHASES[a]} -> {PHASES[a + 1]}": int(np.median(rec[:, 9 + a] - rec[:, 8 + a])) for a in range(7)}
        rows.append({"config": tag, "kernel": k.name, "ok": chk["ok"], "err_over_allowed": chk["err_over_allowed"],
                     "stamped_copy_problems": bad.get(kst.name, []),
                     "block_us": [round(c, 2) for c in times], "pair_alone_us": round(alone, 2), "blocks": len(rec),
                     "median_cycles": cycles,
                     "wait_to_exit_ns": int(np.median(rec[:, 7] - rec[:, 1]))})
        print(json.dumps(rows[-1]), flush=True)
    with open(f"{out}/{'variants' if variants else 'phases'}.json", "w") as f:
        json.dump(rows, f, indent=1)
    cols = ["wait -> conv1 loop", "conv1 loop -> x epilogue", "W2 wait -> conv2", "conv2 -> cluster sum",
            "cluster sum -> y store"]
    print("\nlayer 3 at batch 1: a block (3x3 + pair) and the pair alone in us (ten back to back in a CUDA graph); "
          "the pair's median block in cycles a phase (ten blocks, one replay)"
          + (f"; {LOOP_CONFIG.tag()} with parts of the first conv's loop left out" if variants else "") + "\n")
    print(f"| {'first conv loop' if variants else 'config'} | float64 | block us (two runs) | pair alone us | "
          + " | ".join(c.split(" -> ")[1] for c in cols) + " | wait to exit ns |\n|" + "---|" * (5 + len(cols)))
    for r in rows:
        checked = "-" if r["ok"] is None else "ok" if r["ok"] else "FAIL"
        print(f"| {r['config']} | {checked} | {r['block_us'][0]:.2f} / {r['block_us'][1]:.2f} | "
              f"{r['pair_alone_us']:.2f} | " + " | ".join(str(r["median_cycles"][c]) for c in cols)
              + f" | {r['wait_to_exit_ns']} |")


def sconv(out, runner, gen) -> None:
    """The chain with each 3x3 config of SCONVS and the pair on SCONV_PAIR: a block's time and the 3x3's alone."""
    s3, (first, second) = S3, PAIR
    kp = pair.emitted(first, second, 1, SCONV_PAIR)
    kss = []
    for cfg in SCONVS:
        try:
            kss.append((cfg.tag(), render_sparse(s3, 1, cfg)))
        except ValueError as e:
            print(f"{cfg.tag()}: not rendered ({e})", flush=True)
    bad = runner.compile([kp] + [k for _, k in kss])
    chain = Chain(runner, gen)

    def conv3_alone(sk):   # with a memset of its sums, which it adds into
        chain.sums[0].zero_()
        chain.conv3(0, sk)

    rows = []
    for tag, k in kss:
        if k.name in bad or kp.name in bad:
            rows.append({"config": tag, "kernel": k.name, "bad": bad.get(k.name, bad.get(kp.name))})
            continue
        chk = runner.check_conv(k, s3, 1, 0.72, gen)
        times = [graph_call_s(torch, lambda: [chain.block(i, k, kp) for i in range(2)], calls=5) * 1e6 / 2
                 for _ in range(2)]
        alone = graph_call_s(torch, lambda: conv3_alone(k)) * 1e6
        rows.append({"config": tag, "kernel": k.name, "ok": chk["ok"], "err_over_allowed": chk["err_over_allowed"],
                     "block_us": [round(c, 2) for c in times], "sconv_alone_us": round(alone, 2),
                     "grid": k.steps[-1].get("grid"), "block": k.steps[-1].get("block")})
        print(json.dumps(rows[-1]), flush=True)
    alone = shapes_alone(runner, gen)
    with open(f"{out}/sconv.json", "w") as f:
        json.dump({"chain": rows, "alone": alone}, f, indent=1)
    print(f"\nlayer 3 at batch 1: a block (the 3x3 on each config, then the pair on {SCONV_PAIR.tag()}) in us, ten "
          "back to back in a CUDA graph, and the 3x3 alone (with a memset of its sums)\n")
    print("| 3x3 config | float64 | grid | block | block us (two runs) | 3x3 alone us |\n|---|---|---|---|---|---|")
    for r in sorted((r for r in rows if "ok" in r), key=lambda r: min(r["block_us"])):
        print(f"| {r['config']} | {'ok' if r['ok'] else 'FAIL'} | {r['grid']} | {r['block']} | "
              f"{r['block_us'][0]:.2f} / {r['block_us'][1]:.2f} | {r['sconv_alone_us']:.2f} |")
    print("\nResNet-152's stride-1 3x3 shapes at batch 1, 0.72 zeros: each config alone in us (ten back to back in a "
          "CUDA graph, with a memset of its sums where it splits C); plan: the build's pick at 0.7\n")
    print("| shape | config | float64 | us |\n|---|---|---|---|")
    for r in alone:
        print(f"| {r['shape']} | {r['config']}{' (plan)' if r['plan'] else ''} | {'ok' if r['ok'] else 'FAIL'} | "
              f"{r['us']:.2f} |")


def shapes_alone(runner, gen) -> list[dict]:
    """Each stride-1 3x3 shape of OTHER_3X3 on the plan's pick at 0.7 and on ROW_TILES, alone."""
    from snn.codegen.gpu import load_gpu
    from snn.codegen.plan import plan_shape
    gpu = load_gpu("h200")
    rows = []
    for c, hw in OTHER_3X3:
        shape = ConvShape(c, c, hw, hw, 3, 3, (1, 1), (1, 1))
        plan = plan_shape(shape, gpu, 1, [0.7])[0.7].config
        ks = []
        for cfg in [plan] + [r for r in ROW_TILES if r != plan]:
            try:
                ks.append((cfg, render_sparse(shape, 1, cfg)))
            except ValueError:
                continue
        bad = runner.compile([k for _, k in ks])
        x = relu_input(torch, (1, hw, hw, c), 0.72, gen)
        w = torch.randn((c, 3, 3, c), generator=gen, device="cuda") * (c * 9 * 0.28) ** -0.5
        o = torch.zeros((1, hw, hw, c), device="cuda")
        for cfg, k in ks:
            if k.name in bad:
                continue
            chk = runner.check_conv(k, shape, 1, 0.72, gen)
            entry = {"cubin": runner.records[k.name]["cubin"], "steps": k.steps, "epilogue": False}

            def run(k=k, entry=entry):
                o.zero_()
                runner.backend.sparse_conv(k.name, entry, x.permute(0, 3, 1, 2), w, o.permute(0, 3, 1, 2), {}, None,
                                           into=o.permute(0, 3, 1, 2))
            rows.append({"shape": shape.tag(), "config": cfg.tag(), "plan": cfg == plan, "ok": chk["ok"],
                         "us": round(graph_call_s(torch, run) * 1e6, 2)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main()
