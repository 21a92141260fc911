"""The dense/sparse decision for one conv layer and one batch: the single place it is taken.

A device-side selector (issue 8) replaces the host read of the counter, not this rule: keep the two
in step. `layer_entry` is one batch bucket of a manifest layer, i.e.
`manifest["layers"][i]["batches"][str(batch)]` = {"threshold": 0.5, "levels": {"0.40": {"kernel": ...}}}.
"""
from __future__ import annotations

FORCE_MODES = ("auto", "dense", "sparse")
_EPS = 1e-9  # levels are decimals printed as text; 0.45 measured must select level "0.45"


def levels(layer_entry: dict) -> list[tuple[float, str]]:
    """(level, kernel name) sorted by level."""
    return sorted((float(k), v["kernel"]) for k, v in layer_entry["levels"].items())


def choose(layer_entry: dict | None, sparsity: float, force: str = "auto") -> str | None:
    """Kernel name to run, or None for the dense (cuDNN) path.

    auto:   sparsity below the layer's threshold -> dense; otherwise the kernel of the highest level
            not above the measured sparsity (dense if no level is that low).
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
    if sparsity + _EPS < float(layer_entry.get("threshold", lv[0][0])):
        return None
    return fitting[-1] if fitting else None
