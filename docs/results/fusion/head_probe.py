"""The head kernel (snn_pool_linear: the global pool and the classifier in one launch) alone, per cluster size, against
torch's pool and linear: ResNet-152's head (2048 channels, 7x7, 1000 classes) and DenseNet-201's (1920), batch 1 and
8, L2 flushed before each run (runtime/measure/timing.Timer, median of 50), and how many of its clusters the GPU holds
at once (cuOccupancyMaxActiveClusters) against how many the grid has.

    python3 head_probe.py OUT.json        # the table on stdout
"""
import json
import sys
import tempfile

import torch

from snn.codegen.cache import CubinCache
from snn.codegen.compile import Compiler
from snn.codegen.emit import MAXPOOL_THREADS, pool_linear_function, render_maxpool
from snn.runtime.kernels import CudaBackend
from snn.runtime.measure.timing import Env, Timer


class _Bundle:
    def __init__(self, cubin, cl):
        self.precision, self.epilogue = "fp32", {"cubin": "", "function": "unused"}
        self.maxpool = {"cubin": cubin, "function": "snn_maxpool", "block": [MAXPOOL_THREADS], "vector": 4,
                        "pdl": False, "linear_function": pool_linear_function(), "linear_cluster": cl}


def main(out_path):
    env = Env()
    timer = Timer(env, reps=50, warmup=5)
    drv, dev = env.dev.drv, env.dev
    rows = []
    for cl in (2, 4, 8):
        name, src = render_maxpool(linear_cluster=cl)
        with tempfile.TemporaryDirectory() as d:
            rec = Compiler(CubinCache(d)).compile({f"{name}_c{cl}": src}, "sm_90").records[f"{name}_c{cl}"]
            cubin = tempfile.mktemp(suffix=".cubin")
            open(cubin, "wb").write(open(rec["cubin"], "rb").read())
        be = CudaBackend(dev, _Bundle(cubin, cl))
        for c, b in ((2048, 1), (1920, 1), (2048, 8)):
            g = torch.Generator("cuda").manual_seed(c + b)
            x = torch.randn(b, c, 7, 7, device="cuda", generator=g).relu().contiguous(memory_format=torch.channels_last)
            w = torch.randn(1000, c, device="cuda", generator=g) / c ** 0.5
            bias = torch.randn(1000, device="cuda", generator=g)
            y = be.pool_linear(x, w, bias)
            ref = x.double().mean((2, 3)) @ w.double().t() + bias.double()
            err = float(((y.double() - ref).norm() / ref.norm()).item())
            us = sorted(timer([lambda: be.pool_linear(x, w, bias)]))[25]
            tref = sorted(timer([lambda: torch.nn.functional.linear(x.mean((2, 3)), w, bias)]))[25]
            grid = active = None
            try:
                fn = dev.function(cubin, pool_linear_function())
                sms = torch.cuda.get_device_properties(0).multi_processor_count
                cls = max(1, sms // cl)
                r = -(-1000 // (cls * cl))
                grid = -(-(-(-1000 // r)) // cl) * cl
                cfg = drv.CUlaunchConfig()
                cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
                cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = MAXPOOL_THREADS, 1, 1
                cfg.sharedMemBytes = (r * c + 4 * max(MAXPOOL_THREADS, b * c // cl // 4) + b * c) * 4
                cfg.numAttrs = 0
                err_, active = drv.cuOccupancyMaxActiveClusters(fn, cfg)
                active = int(active) if int(err_) == 0 else f"error {err_}"
            except Exception as e:  # the query is informative only
                active = f"unavailable: {e}"
            row = {"cluster": cl, "C": c, "batch": b, "head_us": round(us, 2), "torch_us": round(tref, 2),
                   "rel_err_vs_fp64": err, "grid_blocks": grid, "max_active_clusters": active}
            rows.append(row)
            print(json.dumps(row), flush=True)
    json.dump(rows, open(out_path, "w"), indent=1)
    print("\n| cluster | C | batch | head us | torch pool + linear us | grid clusters | max active clusters |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['cluster']} | {r['C']} | {r['batch']} | {r['head_us']} | {r['torch_us']} | "
              f"{(r['grid_blocks'] or 0) // r['cluster']} | {r['max_active_clusters']} |")


if __name__ == "__main__":
    main(sys.argv[1])
