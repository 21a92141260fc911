"""GPU tests: skipped cleanly where torch or a CUDA device is missing (CI has neither)."""
import importlib.util

import pytest


def _why_skip() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install -e '.[gpu]')"
    import torch
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    checked = False
    for item in items:
        if "gpu" not in item.keywords:
            continue
        if not checked:
            reason, checked = _why_skip(), True
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
