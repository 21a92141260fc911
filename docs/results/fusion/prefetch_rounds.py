"""The weights ahead (runtime/graph.py, Capture.weights) in one process: the pass captured with them off and on
(GraphRunner's prefetch), then replayed in rounds (each once a round, so that the device's drift over a run falls on
both alike); per variant the replay (CUDA events, median of 50) each round and the logits against off's; and what a
runner left to decide (prefetch None, as snn-run runs) kept, with the times it measured (its notes).

    [ROUNDS=5] python3 prefetch_rounds.py NET PHOTO_DIR OUT.json    (the table on stdout)
"""
import json
import os
import statistics
import sys

from snn.runtime.cuda import Device
from snn.runtime.executor import Executor
from snn.runtime.graph import GraphRunner
from snn.runtime.measure.timing import event_median_s, exit_skipping_teardown

import trained

ROUNDS = int(os.environ.get("ROUNDS", "5"))
net_name, photos, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
t = trained.load(net_name, 1, photos)
torch = t.torch
dev = Device()
runners = {}
with torch.no_grad():
    for name, on in (("off", False), ("on", True), ("decided", None)):
        ex = Executor(t.net, t.sd, t.env.backend(t.cache), t.cache, str(t.env.device), "auto")
        r = GraphRunner(ex, dev, prefetch=on)
        r(t.x)
        if on is None:
            decided = list(r.notes)
            continue
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
doc = {"network": t.net.name, "batch": 1, "profile": t.profile.name, "rounds": ROUNDS, "variants": rows,
       "decided": decided}
with open(out_path, "w") as f:
    json.dump(doc, f, indent=1)
print(f"{t.net.name} batch 1, {t.profile.name}: replay ms per round\n")
print("| weights ahead | replay (rounds) | median | logits vs off's |\n|---|---|---|---|")
for name, v in rows.items():
    ms = [x["replay_ms"] for x in v]
    print(f"| {name} | {' / '.join(f'{m:.4f}' for m in ms)} | {statistics.median(ms):.4f} | "
          f"{max(x['rel_diff'] for x in v):.1e} |")
print(f"\nleft to decide at capture: {'; '.join(decided) or 'nothing measured'}")
exit_skipping_teardown(0)
