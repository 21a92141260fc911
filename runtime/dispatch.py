"""The dense/sparse decision for one conv layer and one batch: the single place it is taken.

The device-side selector (runtime/graph.py) applies this rule through `selector_table` + the
`snn_select` kernel; `select` mirrors that kernel in Python and the tests check it against `choose`.
`layer_entry` is one batch bucket of a manifest layer, i.e.
`manifest["layers"][i]["batches"][str(batch)]` = {"threshold": 0.5, "levels": {"0.40": {"kernel": ...}}}.
"""
from __future__ import annotations

from dataclasses import dataclass

FORCE_MODES = ("auto", "dense", "sparse")
_EPS = 1e-9  # levels are decimals printed as text; 0.45 measured must select level "0.45"
NEVER = 1.0  # a threshold this high (runtime/calibrate.py: sparse never won) keeps the layer dense
# What a decision on the device costs: a selector kernel + a SWITCH node in a CUDA graph, H100
# (measured 8.7 us per layer, docs/graphs.md). runtime/calibrate.py marks a layer
# `static_kernel` (sparse at any sparsity, no decision) when deciding cannot win this back.
DECISION_COST_US = 8.0


def levels(layer_entry: dict) -> list[tuple[float, str]]:
    """(level, kernel name) sorted by level."""
    return sorted((float(k), v["kernel"]) for k, v in layer_entry["levels"].items())


def choose(layer_entry: dict | None, sparsity: float, force: str = "auto") -> str | None:
    """Kernel name to run, or None for the dense (cuDNN) path.

    auto:   sparsity below the layer's threshold -> dense; otherwise the kernel of the highest level
            not above the measured sparsity (dense if no level is that low). A threshold of 1.0 or more
            (calibrate's mark for "sparse never wins") keeps the layer dense at any sparsity; a
            `static_kernel` (calibrate's mark for "sparse wins even on a dense input") runs at any.
    dense:  always None.
    sparse: every layer that has kernels runs sparse; below the lowest level the lowest level's
            kernel runs (the kernels are exact at any sparsity, only slower).
    """
    if force not in FORCE_MODES:
        raise ValueError(f"force must be one of {FORCE_MODES}, got {force!r}")
    if force == "dense" or not layer_entry or not layer_entry.get("levels"):
        return None
    lv = levels(layer_entry)
    fitting = [name for level, name in lv if level <= sparsity + _EPS]
    if force == "sparse":
        return fitting[-1] if fitting else lv[0][1]
    if layer_entry.get("static_kernel"):
        return layer_entry["static_kernel"]
    threshold = float(layer_entry.get("threshold", lv[0][0]))
    if sparsity + _EPS < threshold or threshold >= NEVER:
        return None
    return fitting[-1] if fitting else None


# -- the same rule as a table, for the device-side selector (runtime/graph.py, templates/selector.cu.j2)

@dataclass(frozen=True)
class SelectorTable:
    """choose() for one layer, batch and force mode, flattened so a one-thread kernel can apply it.

    Branch 0 is the dense path; branch b >= 1 runs `kernels[b - 1]`. The selector computes
    s = zeros / numel, then: s + EPS < threshold -> `below_threshold` (always 0 = dense); otherwise
    `below_levels`, replaced by the branch of each level (ascending) with level <= s + EPS. Levels
    that can never win are left out, so the graph holds only kernels that can run.
    """
    kernels: tuple[str, ...]
    threshold: float
    below_levels: int
    levels: tuple[tuple[float, int], ...]

    @property
    def branches(self) -> int:
        return 1 + len(self.kernels)

    def row(self) -> list[float]:
        """[threshold, below_levels, n, level_0, branch_0, ...]: the layout snn_select reads (float64)."""
        out = [self.threshold, float(self.below_levels), float(len(self.levels))]
        for level, b in self.levels:
            out += [level, float(b)]
        return out

    def kernel(self, branch: int) -> str | None:
        return None if branch == 0 else self.kernels[branch - 1]

    def constant_branch(self) -> int | None:
        """The branch taken at every sparsity, if there is one: the graph then launches that kernel
        directly, with no selector and no conditional node."""
        if self.threshold >= 0:  # below the threshold: dense; above: a kernel
            return None
        branches = {self.below_levels} | {b for _, b in self.levels}
        return branches.pop() if len(branches) == 1 else None


def selector_table(layer_entry: dict | None, force: str = "auto") -> SelectorTable | None:
    """The table that makes select() agree with choose(layer_entry, ., force); None: always dense."""
    if force not in FORCE_MODES:
        raise ValueError(f"force must be one of {FORCE_MODES}, got {force!r}")
    if force == "dense" or not layer_entry or not layer_entry.get("levels"):
        return None
    lv = levels(layer_entry)
    if force == "auto" and layer_entry.get("static_kernel"):
        return SelectorTable((layer_entry["static_kernel"],), -1.0, 1, ())
    if force == "sparse":
        threshold = -1.0  # never below: every sparsity runs a kernel
    else:
        threshold = float(layer_entry.get("threshold", lv[0][0]))
        if threshold >= NEVER:  # never sparse: no selector, no conditional node in the graph
            return None
        # any s that passes the threshold fits every level <= threshold: only the highest of those can win
        under = [level for level, _ in lv if level <= threshold]
        if under:
            lv = [(level, name) for level, name in lv if level >= under[-1]]
    kernels: list[str] = []
    rows = []
    for level, name in lv:
        if name not in kernels:
            kernels.append(name)
        rows.append((level, 1 + kernels.index(name)))
    below = rows[0][1] if force == "sparse" else 0
    return SelectorTable(tuple(kernels), threshold, below, tuple(rows))


def select(table: SelectorTable | None, zeros: int, numel: int) -> int:
    """Branch the device selector takes; the same float64 arithmetic as snn_select, step by step."""
    if table is None:
        return 0
    s = zeros / numel
    if s + _EPS < table.threshold:
        return 0
    b = table.below_levels
    for level, branch in table.levels:
        if level <= s + _EPS:
            b = branch
    return b
