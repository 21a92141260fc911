"""What a forward call costs beyond its graph's replay, at the graph's split points (runtime/graph.py HEAD; none:
one graph; every variant split, conditional nodes or not), on the trained-like profile (trained.py); per split,
in rounds (every split once a round, so that drift falls on all alike):

- replay: CUDA events around the replay (both graphs), median of 50 (the breakdown's measure);
- idle: the replay from an idle GPU, until replay() returns (the host's launches) and until the GPU is done;
- parts: each graph's launch from an idle GPU, until it returns (ms a part, in order);
- call: GraphRunner.forward (the image copied in, the replay, the logits copied out) between two syncs, as
  `bench e2e` times snn (measure.timing.wall_times_ms), median of 50.

    [HEADS=none,1/16,1/8,1/4] python3 call_probe.py NET BATCH PHOTO_DIR OUT.json        (the table on stdout)
"""
import json
import os
import statistics
import sys
import time
from fractions import Fraction

from snn.runtime import graph
from snn.runtime.cuda import Device
from snn.runtime.executor import Executor
from snn.runtime.graph import GraphRunner
from snn.runtime.measure.timing import event_median_s, exit_skipping_teardown, idle_call_ms, wall_times_ms

import trained

# the splits, as the head's share of the convs (env HEADS, e.g. "none,1/155,1/16"; none: one graph)
HEADS = [None if h == "none" else float(Fraction(h)) for h in os.environ.get("HEADS", "none,1/16,1/8,1/4").split(",")]
ROUNDS = 3

net_name, batch, photos, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t = trained.load(net_name, batch, photos)
env, torch, net, profile, pool, sd_p, x = t.env, t.torch, t.net, t.profile, t.pool, t.sd, t.x
dev = Device()


def parts_ms(parts, reps=30):
    out = []
    for _ in range(reps):
        row = []
        for g in parts.graphs:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            g.replay()
            row.append((time.perf_counter() - t0) * 1e3)
        out.append(row)
    torch.cuda.synchronize()
    return [round(statistics.median(r[i] for r in out), 4) for i in range(len(out[0]))]


with torch.no_grad():
    inputs = [pool[i:i + batch].contiguous() for i in range(0, pool.shape[0] - batch + 1, batch)] or [x]
    runners = {}
    # every pass split where the variant says, decided on the device or not (graph.split_before splits only a pass
    # with conditional nodes)
    split_before = graph.split_before
    graph.split_before = lambda convs, decides: split_before(convs, True)
    for head in HEADS:
        os.environ["SNN_GRAPH_SPLIT"] = "0" if head is None else "1"
        graph.HEAD = head or graph.HEAD
        ex = Executor(net, sd_p, env.backend(t.cache), t.cache, str(env.device), "auto")
        r = GraphRunner(ex, dev)
        r(x)                                   # the capture, at this split
        runners[head] = r
    rows = {h: [] for h in HEADS}
    for _ in range(ROUNDS):
        for head, r in runners.items():
            st = r._graphs[(tuple(x.shape), x.dtype)]
            replay = r.replayer(x)
            launch, done = idle_call_ms(torch, replay)
            call = statistics.median(wall_times_ms(r.forward, inputs, 50, 5, torch.cuda.synchronize))
            rows[head].append({"replay": event_median_s(torch, replay, 50, warmup=5) * 1e3, "idle_launch": launch,
                               "idle_done": done, "parts": parts_ms(st.graph), "call": call,
                               "graphs": len(st.graph.graphs)})
doc = {"network": net.name, "batch": batch, "profile": profile.name, "rounds": ROUNDS,
       "heads": {("none" if h is None else str(Fraction(h).limit_denominator(1000))): v for h, v in rows.items()}}
with open(out_path, "w") as f:
    json.dump(doc, f, indent=1)
print(f"{net.name} batch {batch}, {profile.name}: ms, medians over {ROUNDS} rounds (each a median itself)\n")
print("| split (head) | graphs | replay | idle: launched | idle: done | parts' launches | call (bench's) |\n"
      "|---|---|---|---|---|---|---|")
for name, v in doc["heads"].items():
    med = {k: statistics.median(r[k] for r in v) for k in ("replay", "idle_launch", "idle_done", "call")}
    parts = " / ".join(f"{statistics.median(r['parts'][i] for r in v):.3f}" for i in range(v[0]["graphs"]))
    print(f"| {name} | {v[0]['graphs']} | {med['replay']:.3f} | {med['idle_launch']:.3f} | {med['idle_done']:.3f} | "
          f"{parts} | {med['call']:.3f} |")
exit_skipping_teardown(0)
