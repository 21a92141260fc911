"""OUT/table.md from run.sh's breakdown files: per network and batch, before and after, the graph replay time,
GPU activities per conv, and the GPU time and count of each activity kind (measure.timing.activity_kind); then,
where the files hold a replay's timeline, the replay's time per kind and conv shape: how far each activity moved
the end of the chain (its end past every earlier activity's end), so the rows add up to the replay.
    python3 docs/results/fusion/table.py OUT"""
import json
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

from snn.runtime.measure.timing import activity_kind

out = Path(sys.argv[1])
runs = {}
for p in sorted(out.glob("*_b*.json")):
    d = json.loads(p.read_text())
    side = p.name.split("_")[0]
    kinds = {}
    for name, count, us in d["activities"]:
        k = kinds.setdefault(activity_kind(name), [0, 0.0])
        k[0] += count
        k[1] += us
    n = d["iters"]
    d["kinds"] = {k: (c / n, us / n / 1e3) for k, (c, us) in kinds.items()}
    d["per_conv"] = sum(a[1] for a in d["activities"]) / n / d["convs"]
    runs[(d["network"], d["batch"], side)] = d

lines = [f"# Where the time goes: snn's CUDA graph, before and after ({os.environ.get('GPU', 'h100').upper()}, trained-like profile)", "",
         "ms per forward pass: graph replay (CUDA events, median of 50); per kind, the summed GPU time of its "
         "activities in one replay (CUPTI) and their count. Activities per conv: every kernel, memset and copy "
         "of a replay over the network's convs. rel err: the worst of 21 replays' logits against float64. Under "
         "programmatic launches (after) a kernel's activity begins when it starts and waits for its predecessor, so "
         "the per-kind times overlap there; the replay time is the measure. A side other than before and after: "
         "after's build and calibration run with run.sh's ALSO variable set (nohandoff: SNN_HANDOFF=0, every split "
         "runs its own epilogue; nopdl: SNN_PDL=0, plain launches). before2 / after2: the same bundles replayed again "
         "in the reverse order (after first).", ""]
kinds_all = sorted({k for d in runs.values() for k in d["kinds"]})
head = ["network", "batch", "side", "replay ms", "activities / conv", "rel err vs fp64"] + \
       [f"{k} ms (n)" for k in kinds_all]
lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
for (net, b, side), d in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2].endswith("2"), not kv[0][2].startswith("before"), kv[0][2])):
    err = max(d["rel_err_vs_fp64"], d.get("rel_err_worst_of_20", 0.0))
    cells = [net, str(b), side, f"{d['replay_ms']:.3f}", f"{d['per_conv']:.2f}", f"{err:.1e}"]
    cells += [f"{d['kinds'][k][1]:.3f} ({d['kinds'][k][0]:.0f})" if k in d["kinds"] else "-" for k in kinds_all]
    lines.append("| " + " | ".join(cells) + " |")
lines.append("")
for net, b, side in sorted(k for k in runs if not k[2].startswith("before")):
    base = "before2" if side.endswith("2") else "before"   # the second pass (after first) against its own before
    if (net, b, base) in runs:
        x, y = runs[(net, b, base)]["replay_ms"], runs[(net, b, side)]["replay_ms"]
        lines.append(f"- {net} batch {b}, {side} against {base}: {x:.3f} -> {y:.3f} ms ({x / y:.2f}x)")


def chain(timeline) -> dict:
    """{(kind, conv shape or ""): [activities, ms the chain's end moved]} of one replay's timeline."""
    groups, end = defaultdict(lambda: [0, 0.0]), None
    for name, start, us in timeline:
        shape = re.search(r"r\d+s\d+_str\d+_pad\d+_c\d+n\d+_h\d+w\d+", name)
        g = groups[(activity_kind(name), shape.group(0) if shape else "")]
        e = start + us
        g[0] += 1
        g[1] += max(0.0, e - (start if end is None else end)) / 1e3
        end = e if end is None else max(end, e)
    return groups


timed = {k: chain(d["timeline"]) for k, d in runs.items() if "timeline" in d and not k[2].endswith("2")}
for net, b in sorted({(k[0], k[1]) for k in timed}):
    sides = [s for s in ("before", "after") if (net, b, s) in timed]
    total = {s: sum(g[1] for g in timed[(net, b, s)].values()) for s in sides}
    keys = sorted({k for s in sides for k in timed[(net, b, s)]},
                  key=lambda k: -max(timed[(net, b, s)].get(k, [0, 0.0])[1] for s in sides))
    lines += ["", f"## {net} batch {b}: the replay's time per kind and conv shape", "",
              "ms: how far the kind's activities moved the end of one replay's chain (they add up to the span); "
              "us each: that over their count.", "",
              "| kind | conv shape | " + " | ".join(f"{s} n | {s} ms | {s} us each" for s in sides) + " |",
              "|---|---|" + "---|---|---|" * len(sides)]
    shown = [k for k in keys if max(timed[(net, b, s)].get(k, [0, 0.0])[1] for s in sides) >= 0.02 * total[sides[0]]]
    for k in shown + [None]:
        cells = list(k) if k else ["the rest", ""]
        for s in sides:
            g = timed[(net, b, s)]
            n, ms = (g[k] if k in g else (0, 0.0)) if k else (sum(g[x][0] for x in g if x not in shown),
                                                                  sum(g[x][1] for x in g if x not in shown))
            cells += [str(n), f"{ms:.3f}", f"{ms / n * 1e3:.2f}" if n else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| span | | " + " | ".join(f" | {total[s]:.3f} | " for s in sides) + " |")
(out / "table.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
