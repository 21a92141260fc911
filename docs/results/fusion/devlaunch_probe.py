"""The pass's graph launched from the device: torch's capture (one graph of plain nodes, as at batch 1 on the
trained-like profile) instantiated again for device launch (CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH, node
priorities, uploaded), then started by a one-kernel graph whose kernel tail-launches it (cudaGraphLaunch with
cudaStreamGraphTailLaunch: the host stream's launch ends only after the tail graph). Per variant, in rounds:

- replay: CUDA events around the launch, median of 50 (the breakdown's measure);
- idle: from an idle GPU, until the launch returns and until the GPU is done;
- logits: the worst relative difference to torch's replay, the output poisoned (NaN) before each launch.

Variants: torch (CUDAGraph.replay), host (the device-launch exec launched from the host: cuGraphLaunch), device
(the launcher graph's replay).

    python3 devlaunch_probe.py NET BATCH PHOTO_DIR OUT.json        (the table on stdout)
"""
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile

from snn.runtime import graph
from snn.runtime.cuda import Device, check
from snn.runtime.executor import Executor
from snn.runtime.graph import GraphRunner
from snn.runtime.measure.timing import event_median_s, exit_skipping_teardown, idle_call_ms

import trained

ROUNDS = 3
LAUNCHER = r"""
#include <cuda_runtime.h>
extern "C" __global__ void snn_graph_tail(cudaGraphExec_t g) { cudaGraphLaunch(g, cudaStreamGraphTailLaunch); }
"""

net_name, batch, photos, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t = trained.load(net_name, batch, photos)
torch, x = t.torch, t.x
dev = Device()
drv = dev.drv

tmp = tempfile.mkdtemp()
src, obj, cubin = (os.path.join(tmp, n) for n in ("l.cu", "l.o", "l.cubin"))
open(src, "w").write(LAUNCHER)
arch = "sm_%d%d" % dev.compute_capability
subprocess.run(["nvcc", f"-arch={arch}", "-rdc=true", "-c", src, "-o", obj], check=True)
subprocess.run(["nvcc", f"-arch={arch}", "-dlink", "-cubin", obj, "-lcudadevrt", "-o", cubin], check=True)

init = graph._Parts.__init__
graph._Parts.__init__ = lambda self, torch, keep=False: init(self, torch, True)   # the raw graph kept
os.environ["SNN_GRAPH_SPLIT"] = "0"
doc = {"network": t.net.name, "batch": batch, "profile": t.profile.name}
with torch.no_grad():
    ex = Executor(t.net, t.sd, t.env.backend(t.cache), t.cache, str(t.env.device), "auto")
    r = GraphRunner(ex, dev)
    r(x)
    st = r._graphs[(tuple(x.shape), x.dtype)]
    parts = st.graph.graphs
    assert len(parts) == 1, f"{len(parts)} graphs"
    raw = drv.CUgraph(parts[0].raw_cuda_graph())
    n_nodes = check(drv.cuGraphGetNodes(raw, 0), "cuGraphGetNodes")[1]
    stream = torch.cuda.current_stream()
    cs = drv.CUstream(stream.cuda_stream)
    p = drv.CUDA_GRAPH_INSTANTIATE_PARAMS()
    F = drv.CUgraphInstantiate_flags
    p.flags = int(F.CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) | int(F.CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)
    err, dexec = drv.cuGraphInstantiateWithParams(raw, p)
    doc["instantiate"] = f"{err.name} result {p.result_out}"
    print("device-launch instantiate:", doc["instantiate"], "nodes", n_nodes, flush=True)
    check(err, "cuGraphInstantiateWithParams")
    check(drv.cuGraphUpload(dexec, cs), "cuGraphUpload")
    # the launcher: one kernel node in a torch graph, captured on a side stream
    lg = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    with torch.cuda.graph(lg, stream=side):
        dev.launch(cubin, "snn_graph_tail", (1,), (1,), 0, [(int(dexec), ctypes.c_void_p)])
    torch.cuda.synchronize()

    variants = {
        "torch": parts[0].replay,
        "host": lambda: check(drv.cuGraphLaunch(dexec, drv.CUstream(torch.cuda.current_stream().cuda_stream)),
                              "cuGraphLaunch"),
        "device": lg.replay,
    }
    st.x.copy_(x)
    parts[0].replay()
    ref = st.out.clone()
    torch.cuda.synchronize()
    rows = {k: [] for k in variants}
    for _ in range(ROUNDS):
        for name, fn in variants.items():
            st.out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            diff = ((st.out - ref).abs().max() / ref.abs().max()).item()
            launch, done = idle_call_ms(torch, fn)
            rows[name].append({"replay": event_median_s(torch, fn, 50, warmup=5) * 1e3, "idle_launch": launch,
                               "idle_done": done, "rel_diff": diff})
    doc["nodes"] = n_nodes
    doc["variants"] = rows
with open(out_path, "w") as f:
    json.dump(doc, f, indent=1)
print(f"{t.net.name} batch {batch}, {t.profile.name}, {n_nodes} nodes: ms, medians over {ROUNDS} rounds\n")
print("| launch | replay | idle: launched | idle: done | logits vs torch's replay |\n|---|---|---|---|---|")
for name, v in rows.items():
    med = {k: statistics.median(r[k] for r in v) for k in ("replay", "idle_launch", "idle_done")}
    print(f"| {name} | {med['replay']:.4f} | {med['idle_launch']:.4f} | {med['idle_done']:.4f} | "
          f"{max(r['rel_diff'] for r in v):.1e} |")
exit_skipping_teardown(0)
