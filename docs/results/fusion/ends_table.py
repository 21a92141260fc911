"""The table of ends.sh: each breakdown.py run in OUT (its gzipped JSON; after*: this checkout, before*: the other),
its replay (CUDA events, median of 50), its GPU activities a replay, and the two ends of one replay's timeline: the
stem's span (where the first snn conv of a ReLU's output starts: the image's copy, the image's conv (cuDNN's or the
bundle's direct kernel), any epilogue launches, the pool), the image's conv's own time and what follows it; the
tail's span (from the end of the last snn conv to the end of the replay's last activity: pooling, the classifier,
the fills left), and the worst error of 21 replays against float64.
    python3 docs/results/fusion/ends_table.py OUT"""
import glob
import gzip
import json
import os
import statistics
import sys

SNN_CONVS = ("dconv_", "sconv_", "dpair_")


def short(name):
    return name.split("<")[0].split("(")[0].replace("void ", "").replace("at::native::", "")[:28]


out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(f"{out}/*_b*.json.gz")):
    d = json.load(gzip.open(f))
    tag = os.path.basename(f).split("_")[0]
    tl = d["timeline"]
    first = next(t for t in tl if t[0].startswith(SNN_CONVS))
    stem = [short(t[0]) for t in tl if t[1] < first[1]]
    conv = next(t for t in tl if "conv" in t[0] and t[1] < first[1])   # the image's (cuDNN's varies by run)
    past = first[1] - (conv[1] + conv[2])
    last_end = max(t[1] + t[2] for t in tl if t[0].startswith(SNN_CONVS))
    end = max(t[1] + t[2] for t in tl)
    tail = [short(t[0]) for t in sorted(tl, key=lambda t: t[1]) if t[1] + t[2] > last_end]
    acts = sum(a[1] for a in d["activities"]) / d["iters"]
    rows.setdefault((d["network"], d["batch"]), []).append(dict(
        tag=tag, ms=d["replay_ms"], acts=acts, stem_us=first[1], stem=stem, err=d["rel_err_worst_of_20"],
        conv_us=conv[2], past=past, tail_us=end - last_end, tail=tail))
print("# The two ends of the pass, this checkout (after) against the other (before): replay, activities, the stem's "
      "and the tail's spans\n")
for (net, batch), rs in rows.items():
    print(f"## {net} batch {batch}\n")
    print("| run | replay ms | activities a replay | stem us | of it the image's conv us | after that conv us | "
          "tail us | rel err vs fp64 |\n|---|---|---|---|---|---|---|---|")
    for r in sorted(rs, key=lambda r: r["tag"]):
        print(f"| {r['tag']} | {r['ms']:.3f} | {r['acts']:.0f} | {r['stem_us']:.1f} | {r['conv_us']:.1f} | "
              f"{r['past']:.1f} | {r['tail_us']:.1f} | {r['err']:.1e} |")
    print()
    for side in ("after", "before"):
        s = [r for r in rs if r["tag"].startswith(side)]
        if s:
            med = lambda k: statistics.median(r[k] for r in s)   # noqa: E731
            print(f"- {side}: median replay {med('ms'):.3f} ms, stem {med('stem_us'):.1f} us (the image's conv "
                  f"{med('conv_us'):.1f}, after it {med('past'):.1f}), tail {med('tail_us'):.1f} us ({len(s)} runs). "
                  f"Stem: {', '.join(s[0]['stem'])}. Tail: {', '.join(s[0]['tail'])}")
    print()
