"""The bundle `snn-codegen build NAME --batch B` left in generated/, for the GPU tests (imported by tests/gpu):
loaded for this device, or the test skipped with the reason (none built, or built for another GPU)."""
from pathlib import Path

import pytest

from snn.codegen.spec import load_spec
from snn.runtime import manifest

ROOT = Path(__file__).resolve().parents[1]


def built_cache(name: str, batch: int, device_name: str, compute_capability):
    """(network, cache) of network_specs/NAME.yaml at this batch, the tuning file in the bundle merged."""
    spec = f"network_specs/{name}.yaml"
    net = load_spec(ROOT / spec)
    try:
        path = manifest.locate(ROOT / "generated", net, spec, "auto", batch, device_name, compute_capability)
        return net, manifest.load(path, net, spec, batch, compute_capability)
    except manifest.CacheError as e:
        pytest.skip(str(e))
