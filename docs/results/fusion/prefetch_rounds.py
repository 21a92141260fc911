"""The weights ahead (runtime/graph.py, Capture.weights) in one process: the pass captured with them off, on for
every kernel, and on only for weights of at least MIN bytes (graph.PREFETCH_MIN_BYTES), then replayed in rounds
(every variant once a round, so that the device's drift over a run falls on all alike); per variant the replay
(CUDA events, median of 50) each round and the logits against the first variant's.

    [MINS=0,1048576,4194304] [ROUNDS=5] python3 prefetch_rounds.py NET PHOTO_DIR OUT.json    (the table on stdout)
"""
import json
import os
import statistics
import sys

from snn.runtime import graph
from snn.runtime.cuda import Device
from snn.runtime.executor import Executor
from snn.runtime.graph import GraphRunner
from snn.runtime.measure.timing import event_median_s, exit_skipping_teardown

import trained

MINS = [int(v) for v in os.environ.get("MINS", "0,1048576,4194304").split(",")]
ROUNDS = int(os.environ.get("ROUNDS", "5"))
net_name, photos, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
t = trained.load(net_name, 1, photos)
torch = t.torch
dev = Device()
variants = [("off", None)] + [(f"min {m}", m) for m in MINS]
runners = {}
with torch.no_grad():
    for name, m in variants:
        os.environ["SNN_PREFETCH"] = "0" if m is None else "1"
        graph.PREFETCH_MIN_BYTES = m or 0
        ex = Executor(t.net, t.sd, t.env.backend(t.cache), t.cache, str(t.env.device), "auto")
        r = GraphRunner(ex, dev)
        r(t.x)
        runners[name] = (r, r._graphs[(tuple(t.x.shape), t.x.dtype)])
    rows = {n: [] for n in runners}
    ref = None
    for _ in range(ROUNDS):
        for name, (r, st) in runners.items():
            replay = r.replayer(t.x)
            st.out.fill_(float("nan"))
            replay()
            torch.cuda.synchronize()
            ref = st.out.clone() if ref is None else ref
            diff = ((st.out - ref).abs().max() / ref.abs().max()).item()
            rows[name].append({"replay_ms": event_median_s(torch, replay, 50, warmup=5) * 1e3, "rel_diff": diff})
doc = {"network": t.net.name, "batch": 1, "profile": t.profile.name, "rounds": ROUNDS, "variants": rows}
with open(out_path, "w") as f:
    json.dump(doc, f, indent=1)
print(f"{t.net.name} batch 1, {t.profile.name}: replay ms per round\n")
print("| weights ahead | replay (rounds) | median | logits vs off's |\n|---|---|---|---|")
for name, v in rows.items():
    ms = [x["replay_ms"] for x in v]
    print(f"| {name} | {' / '.join(f'{m:.4f}' for m in ms)} | {statistics.median(ms):.4f} | "
          f"{max(x['rel_diff'] for x in v):.1e} |")
exit_skipping_teardown(0)
