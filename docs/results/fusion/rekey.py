"""A tuning file's measurements re-keyed to a bundle's cubin checksums by kernel name: the same calibration's
choices applied to kernels rebuilt since (an A/B of kernel code, not a calibration). Graph verdicts follow.

    python3 rekey.py MANIFEST TUNING_IN TUNING_OUT [--drop-graph BATCH] [--remeasure REGEX]

--drop-graph BATCH: leave out the graph verdicts of that batch, so that `snn-run calibrate` tries the shared shapes'
dense candidates in the graph again (runtime/calibrate_graph.py). Input and output may be .json or .json.gz.
"""
import argparse
import gzip
import json
import re


def _open(path, mode):
    return gzip.open(path, mode + "t") if str(path).endswith(".gz") else open(path, mode)


ap = argparse.ArgumentParser()
ap.add_argument("manifest")
ap.add_argument("tuning_in")
ap.add_argument("tuning_out")
ap.add_argument("--drop-graph", type=int)
ap.add_argument("--remeasure", help="kernels (a regular expression on the name) whose measurements stay keyed to "
                "their old build, so that `snn-run calibrate` measures them again (their code changed)")
a = ap.parse_args()
again = re.compile(a.remeasure) if a.remeasure else None
with open(a.manifest) as f:
    sha = {name: k.get("sha256", "") for name, k in json.load(f)["kernels"].items()}
with _open(a.tuning_in, "r") as f:
    tun = json.load(f)


def key(k):   # "<shape>|b<batch>|<level>|<kernel>|<sha>" (runtime/tuning.py)
    p = k.split("|")
    if len(p) == 5 and p[3] in sha and not (again and again.search(p[3])):
        p[4] = sha[p[3]]
    return "|".join(p)


moved = sum(key(k) != k for k in tun["measurements"])
tun["measurements"] = {key(k): v for k, v in tun["measurements"].items()}
graph = {}
for k, v in tun.get("graph", {}).items():
    if a.drop_graph is not None and k.endswith(f"|b{a.drop_graph}"):
        continue
    if v.get("kernel") in sha and v.get("sha256") != sha[v["kernel"]]:
        v["sha256"] = sha[v["kernel"]]
        moved += 1
    graph[k] = v
tun["graph"] = graph
with _open(a.tuning_out, "w") as f:
    json.dump(tun, f)
print(f"{a.tuning_out}: {moved} entries re-keyed")
