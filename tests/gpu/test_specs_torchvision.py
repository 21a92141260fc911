"""Every conv of every spec against torchvision's model, layer by layer (C, N, H, W, R, S, stride, padding).

Needs torchvision (present on the GPU machine); the shapes are traced with forward hooks on a meta-free
CPU forward pass at batch 1, so it runs anywhere torchvision does. Writes a report when SNN_RESULTS is set.
"""
import json
import os
from pathlib import Path

import pytest

from snn.codegen.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
NETWORKS = ["resnet50", "resnet101", "resnet152", "densenet121", "densenet169", "densenet201", "vgg16", "vgg19"]
REPORT = {}


def torchvision_convs(name):
    torch = pytest.importorskip("torch")
    tv = pytest.importorskip("torchvision")
    model = getattr(tv.models, name)(weights=None).eval()
    rows = []

    def hook(mod, args, out, qual):
        x = args[0]
        rows.append((qual, x.shape[1], out.shape[1], x.shape[2], x.shape[3], *mod.kernel_size, *mod.stride,
                     *mod.padding, mod.groups, mod.bias is not None))

    for qual, mod in model.named_modules():
        if isinstance(mod, torch.nn.Conv2d):
            mod.register_forward_hook(lambda m, a, o, q=qual: hook(m, a, o, q))
    with torch.no_grad():
        logits = model(torch.randn(1, 3, 224, 224))
    params = sum(p.numel() for p in model.parameters())
    return rows, tuple(logits.shape), params


@pytest.mark.parametrize("name", NETWORKS)
def test_spec_convs_match_torchvision(name):
    tv_rows, out_shape, tv_params = torchvision_convs(name)
    net = load_spec(ROOT / "network_specs" / f"{name}.yaml")
    ours = []
    for c in net.convs:
        s = c.shape
        node = net.node(c.name)
        h, w = s.H, s.W
        if c.input_op == "avgpool":   # a 1x1 conv the spec runs after its pool (spec.pools_first): as written, before
            h, w = net.node(net.node(c.input).inputs[0]).shape[1:]
        ours.append((c.param, s.C, s.N, h, w, s.R, s.S, *s.stride, *s.padding, node["groups"], c.bias))
    # torchvision's hooks fire in execution order, which is our topological order up to the order of
    # independent branches (downsample vs main path): compare as sorted lists keyed by parameter name.
    assert sorted(ours) == sorted(tv_rows)
    assert net.params == tv_params
    assert out_shape == (1, 1000)
    REPORT[name] = {"convs": len(ours), "torchvision_convs": len(tv_rows), "params": net.params,
                    "torchvision_params": tv_params, "match": True}


def teardown_module(module):
    out = os.environ.get("SNN_RESULTS")
    if out and REPORT:
        import torch
        import torchvision
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "specs_vs_torchvision.json").write_text(json.dumps(
            {"torch": torch.__version__, "torchvision": torchvision.__version__, "networks": REPORT}, indent=1))
