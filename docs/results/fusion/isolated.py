"""Each kernel of one graph replay on its own: Nsight Compute runs the replay's kernel nodes one at a time
(no overlap, no programmatic early start, caches as the previous kernel left them), so a kernel's duration
here is its own latency, and their sum against the replay time is what the chain of launches adds.

    ncu --profile-from-start off --graph-profiling node --cache-control none --clock-control none \\
        --metrics "$(python3 isolated.py --metrics)" --csv --page raw \\
        python3 breakdown.py NET BATCH PHOTO_DIR --profile-one > OUT.csv
    python3 isolated.py OUT.csv [REPLAY_JSON]   # a table per kernel name, slowest first

REPLAY_JSON: breakdown.py's output for the same network and batch (its replay_ms beside the sum).
"""
import csv
import json
import sys
from collections import defaultdict

from snn.runtime.measure.timing import activity_kind

STALLS = ["barrier", "long_scoreboard", "short_scoreboard", "wait", "membar", "lg_throttle", "mio_throttle",
          "math_pipe_throttle", "no_instruction", "dispatch_stall", "drain", "branch_resolving", "imc_miss",
          "sleeping", "selected", "not_selected"]
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
METRICS = ["gpu__time_duration.sum", "launch__grid_size", "launch__block_size", "launch__registers_per_thread",
           "sm__warps_active.avg.pct_of_peak_sustained_active", "smsp__issue_active.avg.pct_of_peak_sustained_active",
           "sm__cycles_active.avg", "gpc__cycles_elapsed.max", "dram__bytes_read.sum", "lts__t_bytes.sum",
           "smsp__inst_executed.sum", "l1tex__m_xbar2l1tex_read_bytes.sum",
           "lts__throughput.avg.pct_of_peak_sustained_elapsed"] + [STALL.format(s) for s in STALLS]


def rows(path):
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu's own messages are not CSV
    r = list(csv.DictReader(lines))
    return [x for x in r[1:] if x.get("Kernel Name")]  # r[0]: the units


def num(x, key):
    try:
        return float(str(x.get(key, "")).replace(",", ""))
    except ValueError:
        return float("nan")


def main():
    if sys.argv[1] == "--metrics":
        print(",".join(METRICS))
        return
    rs = rows(sys.argv[1])
    replay = json.load(open(sys.argv[2]))["replay_ms"] if len(sys.argv) > 2 else None
    by = defaultdict(list)
    for x in rs:
        by[x["Kernel Name"]].append(x)
    total = sum(num(x, "gpu__time_duration.sum") for x in rs) / 1e3
    kinds = defaultdict(lambda: [0, 0.0])
    for x in rs:
        k = kinds[activity_kind(x["Kernel Name"])]
        k[0] += 1
        k[1] += num(x, "gpu__time_duration.sum") / 1e3
    print(f"{len(rs)} kernels, isolated durations sum to {total / 1e3:.3f} ms"
          + (f"; the replay takes {replay:.3f} ms" if replay else ""))
    print("\n| kind | n | isolated ms |\n|---|---|---|")
    for k, (n, us) in sorted(kinds.items(), key=lambda a: -a[1][1]):
        print(f"| {k} | {n} | {us / 1e3:.3f} |")
    print("\n| kernel | n | us each | sum us | grid | block | regs | occ % | issue % | cycles active | "
          "DRAM MB | L2 -> SM MB | L2 % | top stalls (cycles per issue) |\n|" + "---|" * 14)
    order = sorted(by.items(), key=lambda a: -sum(num(x, "gpu__time_duration.sum") for x in a[1]))
    for name, xs in order:
        n = len(xs)

        def mean(key):
            return sum(num(x, key) for x in xs) / n
        stalls = sorted(((mean(STALL.format(s)), s) for s in STALLS if s not in ("selected", "not_selected")),
                        reverse=True)[:3]
        st = ", ".join(f"{s} {v:.1f}" for v, s in stalls)
        print(f"| {name[:70]} | {n} | {mean('gpu__time_duration.sum') / 1e3:.2f} | "
              f"{n * mean('gpu__time_duration.sum') / 1e3:.1f} | {mean('launch__grid_size'):.0f} | "
              f"{mean('launch__block_size'):.0f} | {mean('launch__registers_per_thread'):.0f} | "
              f"{mean('sm__warps_active.avg.pct_of_peak_sustained_active'):.0f} | "
              f"{mean('smsp__issue_active.avg.pct_of_peak_sustained_active'):.0f} | "
              f"{mean('sm__cycles_active.avg'):.0f} | {mean('dram__bytes_read.sum') / 1e6:.2f} | "
              f"{mean('l1tex__m_xbar2l1tex_read_bytes.sum') / 1e6:.2f} | "
              f"{mean('lts__throughput.avg.pct_of_peak_sustained_elapsed'):.0f} | {st} |")


if __name__ == "__main__":
    main()
