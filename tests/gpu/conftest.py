"""GPU tests need torch with a CUDA device; without them they skip with the reason (CI has neither)."""
import pytest


def _gpu_missing_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install -e '.[gpu]')"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_missing_reason()
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
