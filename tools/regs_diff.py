#!/usr/bin/env python3
"""After a template change: the kernels of a cubin cache compiled in more than one version (same name, other
source), each one's registers first and last (by file time) and the blocks an SM its registers allow, printed
where that number or spilling changed. A change of a few registers can cross the allocation step and halve the
blocks an SM (docs/perf-notes.md, "The channel header": bench-s6b); a bench of a few configs does not show it,
the plan's kernels do. Build the networks with the cache before and after the change, then:

    python tools/regs_diff.py .carry/cache_ab [--gpu h100]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from check_kernels import _parse_config  # noqa: E402
from snn.codegen.config import KernelConfig  # noqa: E402
from snn.codegen.gpu import load_gpu  # noqa: E402
from snn.codegen.plan.occupancy import block_limits  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache", type=Path)
    ap.add_argument("--gpu", default="h100")
    a = ap.parse_args()
    gpu = load_gpu(a.gpu)
    versions: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
    for f in a.cache.glob("*/*.json"):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        for name, fn in (rec.get("functions") or {}).items():
            versions[name].append((f.stat().st_mtime, int(fn.get("registers") or 0), int(fn.get("spill_stores") or 0)))
    changed = compared = 0
    for name, v in sorted(versions.items()):
        if len(v) < 2 or not name.startswith("sconv_"):
            continue
        t = KernelConfig.from_dict(_parse_config(name)).block_threads()
        compared += 1
        (_, r0, _), (_, r1, s1) = min(v), max(v)
        b0, b1 = (int(block_limits(gpu, t, r, 0)["registers"]) for r in (r0, r1))
        if b0 != b1 or s1:
            changed += 1
            print(f"{name}: registers {r0} -> {r1}, blocks an SM by registers {b0} -> {b1}"
                  + (f", spills {s1} bytes" if s1 else ""))
    print(f"{compared} kernels in more than one version; {changed} changed blocks an SM or spill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
