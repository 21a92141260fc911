"""What the benchmarks run on: the kernel caches and weights on the device, the image pool, the network's
real pre-activations (a node-by-node forward), and those thresholded to a sparsity level: each layer's
input is ReLU(z - q), q the level's quantile of its pre-activation z on the images, so the zero pattern
is that of real activations. torch is imported inside the functions, never at module import."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from snn.codegen.spec import Network

from ..errors import RunError

if TYPE_CHECKING:
    from .timing import Env


def load_caches(env: Env, net, spec, cache_dir, gpu, batches):
    """The manifest built for this device, and its kernel cache for each batch. The benchmarks time the sparse
    kernels, so the bundle must be an fp32 one (a 16-bit bundle has none: refused, naming the rebuild)."""
    from .. import manifest
    path = manifest.locate(cache_dir, net, spec, gpu, batches[0], env.name, env.cc)
    return path, {b: manifest.load(path, net, spec, b, env.cc, precision="fp32") for b in batches}


def load_weights(env: Env, net, weights_arg, seed):
    """The state dict on the device, and the warning weights.load gave (None if none)."""
    from .. import weights
    sd, _, warning = weights.load(net, weights_arg, seed, device=str(env.device))
    return {k: v.to(env.device) for k, v in sd.items()}, warning


def load_image_pool(net: Network, images_dir: str | None, n: int, seed: int = 0):
    """[n, C, H, W] CPU float32 images and a description: photos from images_dir (and their mirror
    images, then repeated, to reach n), or smooth synthetic images when no folder is given."""
    from .. import images, weights
    torch = __import__("torch")
    c, h, _ = net.input_shape
    if not images_dir:
        return weights.synthetic_images(n, net.input_shape, seed), {"source": "synthetic", "n": n}
    try:
        paths, _ = images.discover(images_dir)
    except FileNotFoundError as e:
        raise RunError(str(e)) from None
    arrays, used, skipped = [], [], []
    for p in paths:
        try:
            arrays.append(images.preprocess(p, size=h, resize=max(h, round(h * 256 / 224))))
            used.append(p.name)
        except (ValueError, OSError) as e:
            skipped.append(f"{p.name}: {e}")
    if not arrays:
        raise RunError(f"{images_dir}: no decodable images")
    x = torch.from_numpy(np.stack(arrays))
    if x.shape[1] != c:
        raise RunError(f"{images_dir}: images have {x.shape[1]} channels, {net.name} needs {c}")
    x = torch.cat([x, torch.flip(x, dims=[3])])  # mirror images: twice the distinct inputs
    idx = [i % x.shape[0] for i in range(max(n, 1))]
    return x[idx].contiguous(), {"source": str(images_dir), "photos": used, "skipped": skipped,
                                 "distinct": int(x.shape[0]), "n": n, "mirrored": True}


def quantile(z, q: float) -> float:
    torch = __import__("torch")
    flat = z.detach().reshape(-1).float()
    if flat.numel() > (1 << 22):  # torch.quantile's size limit; a 4M sample places q within ~0.05 %
        g = torch.Generator(device=flat.device).manual_seed(0)
        flat = flat[torch.randint(0, flat.numel(), (1 << 22,), generator=g, device=flat.device)]
    return float(torch.quantile(flat, q).item())


def relu_sources(net: Network) -> dict[str, set[str]]:
    """conv name -> the ReLU nodes whose outputs its input is made of (through pools and concats)."""
    nodes = {n.name: n for n in net.nodes}

    def walk(v):
        n = nodes.get(v)
        if n is None:
            return None
        if n.op == "relu":
            return {v}
        if n.op in ("maxpool", "avgpool"):
            return walk(n.inputs[0])
        if n.op == "concat":
            parts = [walk(i) for i in n.inputs]
            return None if any(p is None for p in parts) else set().union(*parts)
        return None

    out = {}
    for c in net.convs:
        r = walk(c.input)
        if r:
            out[c.name] = r
    return out


def forward(net: Network, sd: dict, x, keep=(), on_relu=None, on_conv=None):
    """Node-by-node NCHW FP32 forward (as executor.reference) that also returns, for each conv in
    `keep` whose input is ReLU-derived, that input's pre-activation z (input == ReLU(z)).
    on_relu(node, z) -> z' may move z before the ReLU (the sparsity profile); on_conv(node, x) sees
    each conv's input just before the conv (what the profile measures)."""
    from ..executor import apply_node
    torch = __import__("torch")
    last: dict[str, int] = {}
    for i, n in enumerate(net.nodes):
        for v in n.inputs:
            last[v] = i

    def p(n, k):
        return sd[f"{n.param}.{k}"]
    env, pre, kept = {net.input_name: x}, {}, {}
    for i, n in enumerate(net.nodes):
        v = [env[k] for k in n.inputs]
        if n.op == "conv":
            if n.name in keep and n.inputs[0] in pre:
                kept[n.name] = pre[n.inputs[0]]
            if on_conv:
                on_conv(n, v[0])
        elif n.op == "relu":
            v = [on_relu(n, v[0]) if on_relu else v[0]]
            pre[n.name] = v[0]
        elif n.op == "maxpool" and n.inputs[0] in pre:  # max commutes with the ReLU
            pre[n.name] = apply_node(torch, n, [pre[n.inputs[0]]], p)
        elif n.op == "concat" and all(k in pre for k in n.inputs):
            pre[n.name] = torch.cat([pre[k] for k in n.inputs], 1)
        y = apply_node(torch, n, v, p)
        env[n.name] = y
        if n.op == "avgpool" and n.inputs[0] in pre:  # an average does not commute: its own value (ReLU of itself)
            pre[n.name] = y
        for k in n.inputs:
            if last.get(k) == i and k != net.output:
                env.pop(k, None)
                pre.pop(k, None)
    return env[net.output], kept


def at_level(z, level: float):
    """ReLU(z - q), q the level's quantile of z: the zero pattern of the real activation, thresholded."""
    torch = __import__("torch")
    return torch.relu(z - quantile(z, level)).contiguous(memory_format=torch.channels_last)
