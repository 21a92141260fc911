"""snn's 16-bit engine on its own: `snn.load(bundle, precision=...)` for ResNet-152, its CUDA graph's replay (CUDA
events, median of 50) and a whole engine call (wall, synchronised, median of 50), in BF16 and FP16, with cuDNN's
benchmark mode on and off, and how many convs run on the bundle's tensor-core kernels (SNN_TENSORCORE=0: none);
no other model in the process (`bench e2e` runs the baselines and torch.compile first).
Seeded random weights, a random input.

    python3 engine.py OUT.json [--batch 1]
"""
import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

import snn
from snn.runtime.measure.timing import Env, event_median_s, wall_times_ms


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args(argv)
    env = Env()
    # a 16-bit bundle per precision (each runs in the precision it was built for)
    bundles = {p: snn.build("network_specs/resnet152.yaml", gpu=os.environ.get("GPU", "h100"), batch=[a.batch], out=f"/tmp/snn_engine_{p}",
                            precision=p).manifest_path.parent for p in ("bf16", "fp16")}
    x = torch.randn(a.batch, 3, 224, 224, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    rows = []
    with torch.inference_mode():
        for bench in (True, False):
            torch.backends.cudnn.benchmark = bench
            for p in ("bf16", "fp16", "bf16", "fp16"):
                e = snn.load(bundles[p], batch=a.batch, precision=p)
                e(x)
                replay = e.graph.replayer(x)
                row = {"precision": p, "batch": a.batch, "cudnn_benchmark": bench,
                       "replay_ms": round(event_median_s(torch, replay, 50, warmup=5) * 1e3, 4),
                       "call_ms": round(statistics.median(wall_times_ms(e, [x], 50, 5, torch.cuda.synchronize)), 4)}
                tcc = e.executor.tensorcore   # None with SNN_TENSORCORE=0
                row["tensorcore_convs"] = sum(k is not None for k in tcc.choice.values()) if tcc else 0
                if tcc:
                    row["tensorcore_measured"] = tcc.measured
                rows.append(row)
                print({k: v for k, v in row.items() if k != "tensorcore_measured"}, flush=True)
                del e, replay
                torch.cuda.empty_cache()
    a.out.write_text(json.dumps({"environment": env.info(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
