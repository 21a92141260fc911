"""The setup breakdown.py and call_probe.py share: one network's bundle at one batch, seeded random weights
(bench e2e's, BN-calibrated) with their biases shifted to the network's trained-like profile on the photos."""
import os
from types import SimpleNamespace

from snn.codegen.spec import load_spec
from snn.runtime.measure.inputs import load_caches, load_image_pool, load_weights
from snn.runtime.measure.profiles import apply_profile, resolve_profile
from snn.runtime.measure.timing import Env


def load(net_name: str, batch: int, photos: str) -> SimpleNamespace:
    """env, torch, net, cache (the bundle at `batch`), profile, sd (the profile's weights, on the CPU), pool (the
    images, on the device) and x (the first batch of them)."""
    env = Env(False)
    torch = env.torch
    net = load_spec(net_name)
    _, caches = load_caches(env, net, net_name, "generated", os.environ.get("GPU", "h100"), [batch])
    sd, _ = load_weights(env, net, None, 0)
    pool, _ = load_image_pool(net, photos, batch, 0)
    pool = pool.to(env.device)
    profile = resolve_profile("trained", net)
    with torch.no_grad():
        sd_p, _ = apply_profile(net, sd, pool, profile)
    return SimpleNamespace(env=env, torch=torch, net=net, cache=caches[batch], profile=profile, pool=pool,
                           sd={k: v.detach().cpu() for k, v in sd_p.items()}, x=pool[:batch].contiguous())
