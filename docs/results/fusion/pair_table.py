"""The table of pair.sh: each breakdown.py run in OUT (its gzipped JSON; the sides as OUT/sides.txt says), its
replay (CUDA events, median of 50), its GPU activities a replay, the pair kernels on one replay's timeline (count,
summed duration), the convs they ran, the worst error of 21 replays against float64, and the load-time timings that
chose them (the after and before sides').
    python3 docs/results/fusion/pair_table.py OUT"""
import glob
import gzip
import json
import os
import statistics
import sys

out = sys.argv[1]
runs, timed = [], []
for f in sorted(glob.glob(f"{out}/*_b*.json.gz")):
    d = json.load(gzip.open(f))
    tag = os.path.basename(f).split("_")[0]
    pairs = [t for t in d["timeline"] if t[0].startswith("dpair_")]
    on_pairs = sum(1 for k in d.get("conv_kernels", {}).values() if k and k.startswith("dpair_"))
    runs.append((tag, d["network"], d["batch"], d["replay_ms"], sum(a[1] for a in d["activities"]) / d["iters"],
                 len(pairs), sum(t[2] for t in pairs), on_pairs, d["convs"], d["rel_err_worst_of_20"]))
    if tag in ("after", "before"):
        timed.append((tag, d.get("pairs_timed", [])))
print("# Two 1x1 convs in one launch\n")
if os.path.exists(f"{out}/sides.txt"):
    print(open(f"{out}/sides.txt").read().strip() + "\n")
print("| run | network | batch | replay ms | activities a replay | pair launches | their us | convs on them | "
      "rel err vs fp64 |\n|---|---|---|---|---|---|---|---|---|")
for tag, net, b, ms, acts, n, us, on, convs, err in sorted(runs):
    print(f"| {tag} | {net} | {b} | {ms:.3f} | {acts:.0f} | {n} | {us:.1f} | {on} of {convs} | {err:.1e} |")
print()
for side in ("after", "before"):
    s = [r[3] for r in runs if r[0].startswith(side)]
    if s:
        print(f"- {side}: median replay {statistics.median(s):.3f} ms over {len(s)} runs")
for tag, rows in sorted(timed):
    if not rows:
        continue
    print(f"\nTimed at load, {tag} (ten pairs back to back in a CUDA graph, us a pair; one row per distinct pair):\n")
    for t in rows:
        times = ", ".join(f"{k.split('_h')[-1] if k.startswith('dpair_') else 'separate'} {v}" for k, v in t["us"].items())
        print(f"- {t['first']} -> {t['second']}, batch {t['batch']}: {times}; chosen: "
              f"{t['chosen'].split('_h')[-1] if t['chosen'] != 'separate' else 'separate'}")
