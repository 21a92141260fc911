"""The table of stem.sh: each breakdown.py run in OUT (its gzipped JSON; after*: this checkout, before*: the other),
its replay (CUDA events, median of 50), its GPU activities a replay, the stem's span (where the replay's first snn
conv of a ReLU's output starts on one replay's timeline: the image's copy, the image's conv (cuDNN's, or the bundle's
direct kernel), any epilogue launches, the pool), the image's conv's own time, what follows it, and the worst error
of 21 replays against float64.
    python3 docs/results/fusion/stem_table.py OUT"""
import glob
import gzip
import json
import os
import statistics
import sys

out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(f"{out}/*_b*.json.gz")):
    d = json.load(gzip.open(f))
    tag = os.path.basename(f).split("_")[0]
    tl = d["timeline"]
    first = next(t for t in tl if t[0].startswith(("dconv_", "sconv_")))
    stem = [t[0].split("<")[0].split("(")[0][:24] for t in tl if t[1] < first[1]]
    conv = next(t for t in tl if "conv" in t[0] and t[1] < first[1])   # the image's (cuDNN's varies by run)
    past = first[1] - (conv[1] + conv[2])
    acts = sum(a[1] for a in d["activities"]) / d["iters"]
    rows.setdefault((d["network"], d["batch"]), []).append((tag, d["replay_ms"], acts, first[1], stem,
                                                            d["rel_err_worst_of_20"], conv[2], past))
print("# The stem of this checkout (after) and of the other (before): replay, activities, the stem's span\n")
for (net, batch), rs in rows.items():
    print(f"## {net} batch {batch}\n")
    print("| run | replay ms | activities a replay | stem us | of it the image's conv us | after that conv us | "
          "rel err vs fp64 |\n|---|---|---|---|---|---|---|")
    for tag, ms, acts, stem_us, _, err, conv_us, past in sorted(rs):
        print(f"| {tag} | {ms:.3f} | {acts:.0f} | {stem_us:.1f} | {conv_us:.1f} | {past:.1f} | {err:.1e} |")
    print()
    for side in ("after", "before"):
        s = [r for r in rs if r[0].startswith(side)]
        if s:
            print(f"- {side}: median replay {statistics.median(r[1] for r in s):.3f} ms, stem "
                  f"{statistics.median(r[3] for r in s):.1f} us, the image's conv {statistics.median(r[6] for r in s):.1f} us, "
                  f"after it {statistics.median(r[7] for r in s):.1f} "
                  f"us ({len(s)} runs): {', '.join(s[0][4])}")
    print()
