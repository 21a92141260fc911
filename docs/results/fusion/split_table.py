"""The table of split.sh: each breakdown.py run (fusion's, or sixteen-bit's with PRECISION set) of NET at BATCH in
OUT (its gzipped JSON; on*: SNN_GRAPH_SPLIT=1, off*: =0), its replay, how long replay() took to return, a call from
an idle GPU and that call's share above the replay; the medians per side.
    python3 docs/results/fusion/split_table.py OUT NET BATCH"""
import glob
import gzip
import json
import os
import statistics
import sys

out, net, batch = sys.argv[1:4]
sides = {"on": [], "off": []}
print(f"# {net} batch {batch}: the pass as one graph (off) and as a head graph and the rest (on)\n")
print("| run | replay ms | replay() returns ms | call from idle ms | call - replay ms |\n|---|---|---|---|---|")
for f in sorted(glob.glob(f"{out}/*_{net}_b{batch}.json.gz")):
    d = json.load(gzip.open(f))
    if "rows" in d:   # sixteen-bit/breakdown.py: snn's side of the run's one batch
        d = d["rows"][0]["snn"]
    tag = os.path.basename(f).split("_")[0]
    gap = d["replay_call_ms"] - d["replay_ms"]
    sides["on" if tag.startswith("on") else "off"].append((d["replay_ms"], d["replay_call_ms"], gap))
    print(f"| {tag} | {d['replay_ms']:.3f} | {d['replay_launch_ms']:.3f} | {d['replay_call_ms']:.3f} | {gap:.3f} |")
print()
for side, r in sides.items():
    if r:
        print(f"- {side}: median replay {statistics.median(x[0] for x in r):.3f} ms, call "
              f"{statistics.median(x[1] for x in r):.3f} ms, call - replay {statistics.median(x[2] for x in r):.3f} ms "
              f"({len(r)} runs)")
