"""Pair kernels offered with and without some configs (codegen/pair.py CANDIDATES), in one process: the pass captured
once with the pair kernels whose names hold EXCLUDE left out of what the load-time timing may choose (runtime/pairs.py),
once as built, then replayed in rounds (each once a round, so that the device's drift over a run falls on both alike);
per variant the replay (CUDA events, median of 50) each round, the logits against the first variant's, and the pair
kernels its load-time timing chose (with the times it measured).

    [ROUNDS=5] [EXCLUDE=_m28n] python3 pair_rounds.py NET PHOTO_DIR OUT.json    (the table on stdout)
"""
import json
import os
import statistics
import sys
from collections import Counter

from snn.runtime import pairs
from snn.runtime.cuda import Device
from snn.runtime.executor import Executor
from snn.runtime.graph import GraphRunner
from snn.runtime.measure.timing import event_median_s, exit_skipping_teardown

import trained

ROUNDS = int(os.environ.get("ROUNDS", "5"))
EXCLUDE = os.environ.get("EXCLUDE", "_m28n")
net_name, photos, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
t = trained.load(net_name, 1, photos)
torch = t.torch
dev = Device()
plan = pairs.plan


def without(*args, **kwargs):
    return {f: (s, [k for k in ks if EXCLUDE not in k]) for f, (s, ks) in plan(*args, **kwargs).items()}


runners, chosen = {}, {}
with torch.no_grad():
    for name, exclude in ((f"without {EXCLUDE}", True), ("as built", False)):
        pairs.plan = without if exclude else plan
        ex = Executor(t.net, t.sd, t.env.backend(t.cache), t.cache, str(t.env.device), "auto")
        r = GraphRunner(ex, dev)
        r(t.x)
        pairs.plan = plan
        runners[name] = (r, r._graphs[(tuple(t.x.shape), t.x.dtype)])
        chosen[name] = r.pair_timings.measured
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
doc = {"network": t.net.name, "batch": 1, "profile": t.profile.name, "rounds": ROUNDS, "exclude": EXCLUDE,
       "variants": rows, "pair_timings": chosen}
with open(out_path, "w") as f:
    json.dump(doc, f, indent=1)
print(f"{t.net.name} batch 1, {t.profile.name}: replay ms per round\n")
print("| pair kernels | replay (rounds) | median | logits vs the first's | chosen at load |\n|---|---|---|---|---|")
for name, v in rows.items():
    ms = [x["replay_ms"] for x in v]
    picks = Counter(m["chosen"] for m in chosen[name])
    print(f"| {name} | {' / '.join(f'{m:.4f}' for m in ms)} | {statistics.median(ms):.4f} | "
          f"{max(x['rel_diff'] for x in v):.1e} | {'; '.join(f'{k} x{n}' for k, n in picks.items())} |")
exit_skipping_teardown(0)
