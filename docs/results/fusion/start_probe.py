"""What delays a graph's second node: ResNet-152's one-graph pass at batch 1 starts its image conv ~11 us after the
counters' reset, where the pass split in two graphs started it after ~2 us (fusion/h200/call/ at 1113e07 against
9adb311, in git history). Stamp kernels (%globaltimer at their start) in synthetic graphs: a fill, stamp 0, stamp 1,
N small kernels, stamp 2, each kernel node a programmatic dependent of the one before or a plain one; per graph the
host's launch time, the stamp 0 -> 1 gap and the replay (CUDA events), from an idle GPU and behind a sleep kernel
(the GPU busy while the host submits). Then the network's own graph, its replay from idle and behind the sleep.

    python3 start_probe.py NET PHOTO_DIR OUT.json        (the tables on stdout)
"""
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from snn.runtime.cuda import Device
from snn.runtime.executor import Executor
from snn.runtime.graph import GraphRunner
from snn.runtime.measure.timing import exit_skipping_teardown

import trained

SRC = r"""
extern "C" __global__ void stamp(unsigned long long* out, int i) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (threadIdx.x == 0) out[i] = t;
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
extern "C" __global__ void nop(float* x) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x == 0) x[blockIdx.x] += 1.f;
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
"""
REPS = 30
SLEEP = 2_000_000   # cycles of torch.cuda._sleep: ~1 ms, longer than any launch

net_name, photos, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
t = trained.load(net_name, 1, photos)
torch = t.torch
dev = Device()
tmp = tempfile.mkdtemp()
cubin = os.path.join(tmp, "s.cubin")
open(os.path.join(tmp, "s.cu"), "w").write(SRC)
subprocess.run(["nvcc", "-arch=sm_%d%d" % dev.compute_capability, "-cubin", "-o", cubin, os.path.join(tmp, "s.cu")],
               check=True)
stamps = torch.zeros(8, dtype=torch.int64, device="cuda")
buf = torch.zeros(64, device="cuda")
cnt = torch.zeros(4096, dtype=torch.int64, device="cuda")
P = ctypes.c_void_p


def st(i, pdl):
    dev.launch(cubin, "stamp", (1,), (32,), 0, [(stamps.data_ptr(), P), (i, ctypes.c_int)], pdl=pdl)


def body(n, pdl):
    cnt.zero_()
    st(0, pdl)
    st(1, pdl)
    for _ in range(n):
        dev.launch(cubin, "nop", (64,), (32,), 0, [(buf.data_ptr(), P)], pdl=pdl)
    st(2, pdl)


def timed(fn, sleep):
    """(host launch us, stamp 0 -> 1 us, stamp 0 -> 2 us, event us), medians of REPS."""
    rows = []
    for _ in range(REPS):
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if sleep:
            torch.cuda._sleep(SLEEP)
        e0.record()
        h0 = time.perf_counter()
        fn()
        h1 = time.perf_counter()
        e1.record()
        e1.synchronize()
        s = stamps.tolist()
        rows.append(((h1 - h0) * 1e6, (s[1] - s[0]) / 1e3, (s[2] - s[0]) / 1e3, e0.elapsed_time(e1) * 1e3))
    return [round(statistics.median(r[i] for r in rows), 2) for i in range(4)]


doc = {"synthetic": [], "network": {}}
for pdl in (True, False):
    for n in (0, 16, 64, 128, 256):
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            body(n, pdl)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body(n, pdl)
        g.replay()
        torch.cuda.synchronize()
        for sleep in (False, True):
            doc["synthetic"].append({"pdl": pdl, "kernels": n + 4, "behind_sleep": sleep,
                                     **dict(zip(("host_us", "gap01_us", "gap02_us", "event_us"), timed(g.replay, sleep)))})
        del g
print("| nodes | programmatic | behind a sleep | host launch us | stamp 0 -> 1 us | stamp 0 -> 2 us | events us |\n"
      "|---|---|---|---|---|---|---|")
for r in doc["synthetic"]:
    print(f"| {r['kernels']} | {r['pdl']} | {r['behind_sleep']} | {r['host_us']} | {r['gap01_us']} | {r['gap02_us']} | "
          f"{r['event_us']} |")

os.environ["SNN_GRAPH_SPLIT"] = "0"
with torch.no_grad():
    ex = Executor(t.net, t.sd, t.env.backend(t.cache), t.cache, str(t.env.device), "auto")
    r = GraphRunner(ex, dev)
    r(t.x)
    replay = r.replayer(t.x)
    for rnd in range(3):
        for sleep in (False, True):
            doc["network"].setdefault(str(sleep), []).append(timed(replay, sleep)[3])
with open(out_path, "w") as f:
    json.dump(doc, f, indent=1)
print(f"\n{t.net.name} batch 1, one graph: replay us (events), three rounds")
for sleep, v in doc["network"].items():
    print(f"- {'behind a sleep' if sleep == 'True' else 'from an idle GPU'}: {v}")
exit_skipping_teardown(0)
