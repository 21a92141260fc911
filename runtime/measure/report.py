"""A results folder -> summary.md and the PNG plots of every bench/calibrate document in it
(`snn-run bench report`, and after every bench or calibrate run with --out). No torch."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import RunError
from . import plots as plotmod
from .summary import summary_markdown


def load_results(folder: str | Path) -> list[dict]:
    docs = []
    for p in sorted(Path(folder).glob("*.json")):
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and d.get("kind") in ("layers", "e2e", "calibrate"):
            docs.append(d)
    return docs


def report(folder: str | Path, plots: bool = True) -> tuple[Path, list[Path], str | None]:
    """summary.md and the PNG plots of every result document in `folder`; the note says why plots
    were not drawn (matplotlib missing), else None."""
    docs = load_results(folder)
    if not docs:
        raise RunError(f"{folder}: no bench or calibrate results (*.json) found")
    md = Path(folder) / "summary.md"
    md.write_text(summary_markdown(docs))
    if not plots:
        return md, [], None
    if not plotmod.available():
        return md, [], ("matplotlib is not installed: no plots drawn (pip install matplotlib, then "
                        f"`snn-run bench report {folder}`)")
    return md, plotmod.plot_all(docs, folder), None
