"""What every measurement shares, with no torch: parsing the CLI's lists, the level keys of the JSON, the small
statistics (median, geometric mean, the lowest winning level), grouping conv layers by shape, and writing a
result document."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
from pathlib import Path

import numpy as np

from snn.codegen.spec import Network

from ..errors import RunError
# shared with the runtime, which merges tuning at load without this package
from ..tuning import geomean, level_key, lowest_winning_level, shape_label  # noqa: F401

SCHEMA = 1
N_SETS = 4            # rotating input sets per measurement


def parse_batches(text: str) -> list[int]:
    try:
        out = sorted({int(t) for t in str(text).split(",") if t.strip()})
    except ValueError:
        raise RunError(f"--batch {text!r}: expected a comma list of positive integers, e.g. 1,8,32") from None
    if not out or out[0] < 1:
        raise RunError(f"--batch {text!r}: expected a comma list of positive integers, e.g. 1,8,32")
    return out


def parse_levels(text: str) -> list[float]:
    from snn.codegen.plan import parse_levels as _parse
    from snn.codegen.errors import UserError
    try:
        return sorted(set(_parse(text)))
    except UserError as e:
        raise RunError(str(e)) from None


def median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def stats(times_us: list[float]) -> dict:
    a = np.asarray(times_us, dtype=float)
    return {"median_us": round(float(np.median(a)), 3), "p10_us": round(float(np.percentile(a, 10)), 3),
            "p90_us": round(float(np.percentile(a, 90)), 3), "n": int(a.size),
            "times_us": [round(float(t), 3) for t in a]}


def distinct_shapes(net: Network, names) -> list[dict]:
    """Group conv layers (in network order) by shape: [{'shape': ConvShape, 'layers': [names]}]."""
    want = set(names)
    groups: dict = {}
    for c in net.convs:
        if c.name in want:
            groups.setdefault(c.shape, []).append(c.name)
    return [{"shape": s, "layers": v} for s, v in groups.items()]


def sample_groups(groups: list[dict], max_shapes: int | None, keep=lambda s: s.R > 1) -> list[dict]:
    """At most max_shapes groups: every group whose shape `keep`s (3x3 and larger: the paper's
    target), then evenly spaced others in network order."""
    if not max_shapes or len(groups) <= max_shapes:
        return groups
    kept = [g for g in groups if keep(g["shape"])]
    rest = [g for g in groups if not keep(g["shape"])]
    room = max(0, max_shapes - len(kept))
    if room and rest:
        step = len(rest) / room
        rest = [rest[int(i * step)] for i in range(min(room, len(rest)))]
    else:
        rest = []
    chosen = {id(g) for g in kept + rest}
    return [g for g in groups if id(g) in chosen]


def git_commit() -> str | None:
    env = os.environ.get("SNN_GIT_COMMIT")
    if env:
        return env
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                           cwd=Path(__file__).resolve().parents[2])
        return r.stdout.strip() or None if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def write_json(doc: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    return path

