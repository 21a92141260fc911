"""What a device-dispatched layer costs inside a CUDA graph, node by node (issue 8).

    PYTHONPATH=. python3 tools/bench_graph_overhead.py --selector SEL.cubin --out overhead.json

K identical "layers" are captured into one torch graph per variant and replayed; the per-layer cost of
a variant is (replay - replay of `plain`) / K. The work of a layer is one small torch kernel (an
in-place scale of 64 K floats), so the differences are the nodes the variant adds:

  plain            work                                  the baseline
  plus_kernel      snn_select (no handle) + work          one more kernel node
  plus_memset      cuMemsetD32Async + work                one more memset node
  switch2          snn_select + SWITCH{work, work}        our layer today (2 bodies)
  switch6          snn_select + SWITCH{work x 6}          more bodies (ResNet-152 has up to 7)
  switch2_nosel    SWITCH{work, work}, handle default 1   the conditional node without its selector
  switch2_memset   snn_select + SWITCH{memset+work, ...}  a body of two nodes (sparse kernel + memset)
  if1              snn_select + IF{work}                  one IF node instead of a SWITCH
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snn.runtime.cuda import Device, check  # noqa: E402
from snn.runtime.graph import append_switch, capture_info, new_switch_handle  # noqa: E402

_PTR, _I64, _I32, _U64 = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_ulonglong


def append_if(drv, ctx, handle, body, side):
    stream, graph, deps, edges, n = capture_info(drv, torch)
    params = drv.CUgraphNodeParams()
    params.type = drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle = handle
    params.conditional.type = drv.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_IF
    params.conditional.size = 1
    params.conditional.ctx = ctx
    node = check(drv.cuGraphAddNode(graph, deps or None, edges, n, params), "cuGraphAddNode (IF)")
    g = list(params.conditional.phGraph_out)[0]
    check(drv.cuStreamUpdateCaptureDependencies(
        stream, [node], None, 1, int(drv.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES)), "deps")
    hside = drv.CUstream(side.cuda_stream)
    check(drv.cuStreamBeginCaptureToGraph(hside, g, None, None, 0,
                                          drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "begin")
    with torch.cuda.stream(side):
        body()
    check(drv.cuStreamEndCapture(hside), "end")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--selector", required=True, help="cubin with snn_select")
    ap.add_argument("--layers", type=int, default=150)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    dev = Device()
    drv = dev.drv
    ctx = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    K = a.layers
    buf = torch.randn(1 << 16, device="cuda")
    scratch = torch.empty(1 << 14, device="cuda")
    counters = torch.full((K,), 7, dtype=torch.int64, device="cuda")
    row = torch.tensor([-1.0, 1.0, 0.0], dtype=torch.float64, device="cuda")  # always branch 1
    choice = torch.zeros(K, dtype=torch.int32, device="cuda")
    side = torch.cuda.Stream()

    def work():
        buf.mul_(1.0000001)

    def memset():
        check(drv.cuMemsetD32Async(scratch.data_ptr(), 0, scratch.numel(),
                                   drv.CUstream(torch.cuda.current_stream().cuda_stream)), "memset")

    def select(i, handle, set_handle=1):
        dev.launch(a.selector, "snn_select", (1, 1, 1), (32, 1, 1), 0,
                   [(counters.data_ptr() + 8 * i, _PTR), (row.data_ptr(), _PTR), (1000, _I64),
                    (choice.data_ptr() + 4 * i, _PTR), (int(handle), _U64), (set_handle, _I32)])

    def layer(variant, i):
        if variant == "plain":
            work()
        elif variant == "plus_kernel":
            select(i, 0, 0)
            work()
        elif variant == "plus_memset":
            memset()
            work()
        elif variant.startswith("switch"):
            nb = 6 if variant == "switch6" else 2
            h = new_switch_handle(drv, torch, ctx, 1 if variant == "switch2_nosel" else nb)
            if variant != "switch2_nosel":
                select(i, h)
            body = (lambda: (memset(), work())) if variant == "switch2_memset" else work
            append_switch(drv, torch, ctx, h, [body] * nb, side)
        elif variant == "if1":
            h = new_switch_handle(drv, torch, ctx, 0)
            select(i, h)
            append_if(drv, ctx, h, work, side)
        else:
            raise ValueError(variant)

    variants = ["plain", "plus_kernel", "plus_memset", "switch2", "switch6", "switch2_nosel", "switch2_memset", "if1"]
    doc = {"device": dev.name, "torch": torch.__version__, "layers": K, "reps": a.reps, "ms": {}, "errors": {}}
    for v in variants:
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                work()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(K):
                    layer(v, i)
            for _ in range(5):
                g.replay()
            torch.cuda.synchronize()
            ts = []
            for _ in range(a.reps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                g.replay()
                e1.record()
                torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1))
            doc["ms"][v] = statistics.median(ts)
            del g
        except Exception as e:
            doc["errors"][v] = f"{type(e).__name__}: {str(e)[:300]}"
    base = doc["ms"].get("plain")
    doc["us_per_layer_over_plain"] = {v: round((t - base) * 1e3 / K, 3) for v, t in doc["ms"].items()} if base else {}
    if base:
        doc["us_per_layer_plain"] = round(base * 1e3 / K, 3)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
