"""Weights for a spec: a torchvision state_dict (file or torchvision's download) mapped through the
spec's `param` names, or a seeded random initialisation. Returns {param name: float32 CPU tensor}."""
from __future__ import annotations

import math
from pathlib import Path

from snn.codegen.spec import Network
from snn.codegen.spec import tensor_shapes as expected  # the tensors a spec needs, by name, with shapes

from .cuda import import_torch
from .errors import RunError

RANDOM_WARNING = ("no --weights given: using a seeded random initialisation, so the predicted labels "
                  "mean nothing (pass --weights torchvision or --weights FILE.pth)")


def _fmt(shape) -> str:
    return "x".join(map(str, shape)) or "scalar"


def from_state_dict(net: Network, sd: dict, source: str) -> dict:
    """Pick and check the tensors the spec needs; one error naming every problem (first few shown)."""
    torch = import_torch()
    if isinstance(sd, dict) and not any(isinstance(v, torch.Tensor) for v in sd.values()):
        for wrapper in ("state_dict", "model", "model_state_dict"):
            if isinstance(sd.get(wrapper), dict):
                sd = sd[wrapper]
                break
    if not isinstance(sd, dict):
        raise RunError(f"{source}: expected a state_dict (a mapping of names to tensors), got {type(sd).__name__}")
    if sd and all(k.startswith("module.") for k in sd):  # saved from DataParallel
        sd = {k[len("module."):]: v for k, v in sd.items()}
    want = expected(net)
    problems, out = [], {}
    for name, shape in want.items():
        t = sd.get(name)
        if t is None:
            problems.append(f"missing '{name}' ({_fmt(shape)})")
        elif not isinstance(t, torch.Tensor):
            problems.append(f"'{name}' is a {type(t).__name__}, not a tensor")
        elif tuple(t.shape) != shape:
            problems.append(f"'{name}' is {_fmt(t.shape)}, the spec needs {_fmt(shape)}")
        else:
            out[name] = t.detach().to("cpu", torch.float32)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise RunError(f"{source} does not fit {net.name}: {'; '.join(problems[:3])}{more}")
    return out


def load_file(net: Network, path: str | Path) -> dict:
    torch = import_torch()
    path = Path(path)
    if not path.is_file():
        raise RunError(f"{path}: no such weights file")
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise RunError(f"{path}: cannot load as a PyTorch state_dict ({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
    return from_state_dict(net, sd, str(path))


def _torchvision_weights(net: Network):
    try:
        import torchvision
    except ImportError:
        raise RunError("--weights torchvision needs torchvision: pip install -e '.[gpu]'") from None
    try:
        return torchvision.models.get_model_weights(net.name).DEFAULT
    except (ValueError, KeyError):
        raise RunError(f"torchvision has no pretrained weights for a model named '{net.name}'") from None


def load_torchvision(net: Network) -> dict:
    """torchvision's pretrained weights (downloaded once into torch's hub cache)."""
    w = _torchvision_weights(net)
    try:
        sd = w.get_state_dict(progress=False)
    except Exception as e:  # URLError, socket errors, HTTP errors: all mean "could not fetch"
        raise RunError(f"could not fetch torchvision's pretrained weights for {net.name} ({w.url}): "
                       f"{type(e).__name__}: {str(e)[:160]}; without internet, download the file elsewhere "
                       f"and pass --weights FILE.pth") from None
    return from_state_dict(net, sd, f"torchvision {w}")


def class_names(net: Network) -> list[str] | None:
    """ImageNet class names from torchvision's weights metadata (offline), or None."""
    try:
        cats = _torchvision_weights(net).meta.get("categories")
    except RunError:
        return None
    return list(cats) if cats else None


def random_init(net: Network, seed: int = 0) -> dict:
    """Kaiming-normal convs, random BN affine parameters and statistics, small gains on the last BN
    of residual branches so that activations stay O(1) through 50 blocks (labels are meaningless).
    load() then measures the BN statistics on synthetic images (calibrate_bn)."""
    torch = import_torch()
    g = torch.Generator().manual_seed(seed)
    users: dict[str, list[str]] = {}
    for n in net.nodes:
        for i in n.inputs:
            users.setdefault(i, []).append(n.op)
    out = {}
    for n in net.nodes:
        if n.param is None:
            continue
        if n.op == "conv":
            r, s = n["kernel"]
            fan_in = n["in_channels"] // n["groups"] * r * s
            shape = (n["out_channels"], n["in_channels"] // n["groups"], r, s)
            out[f"{n.param}.weight"] = torch.randn(shape, generator=g) * math.sqrt(2.0 / fan_in)
            if n["bias"]:
                out[f"{n.param}.bias"] = torch.randn(n["out_channels"], generator=g) * 0.05
        elif n.op == "batchnorm":
            c = n["channels"]
            into_add = "add" in users.get(n.name, [])
            lo, hi = (0.1, 0.3) if into_add else (0.7, 1.3)
            out[f"{n.param}.weight"] = lo + (hi - lo) * torch.rand(c, generator=g)
            # a negative mean shift: after calibration about 60 % of ReLU outputs are zero, closer
            # to trained networks than 50 %
            out[f"{n.param}.bias"] = torch.randn(c, generator=g) * (0.05 if into_add else 0.15) - (0.0 if into_add else 0.25)
            out[f"{n.param}.running_mean"] = torch.randn(c, generator=g) * 0.1
            out[f"{n.param}.running_var"] = 0.5 + torch.rand(c, generator=g)
        elif n.op == "linear":
            out[f"{n.param}.weight"] = torch.randn(n["out_features"], n["in_features"], generator=g) / math.sqrt(n["in_features"])
            if n["bias"]:
                out[f"{n.param}.bias"] = torch.zeros(n["out_features"])
    return out


def synthetic_images(batch: int, shape, seed: int = 0):
    """Smooth random images (coarse blobs + finer texture), roughly ImageNet-normalised."""
    torch = import_torch()
    F = torch.nn.functional
    g = torch.Generator().manual_seed(seed)
    c, h, w = shape
    coarse = F.interpolate(torch.randn(batch, c, 4, 4, generator=g), size=(h, w), mode="bilinear", align_corners=False)
    fine = F.interpolate(torch.randn(batch, c, max(1, h // 8), max(1, w // 8), generator=g), size=(h, w),
                         mode="bilinear", align_corners=False)
    return coarse + 0.5 * fine


def calibrate_bn(net: Network, sd: dict, device="cpu", batch: int = 4, seed: int = 0) -> dict:
    """Replace every batchnorm's running statistics by those of its input on synthetic images, so
    that random weights normalise as trained ones do: activations O(1) and dependent on the image,
    ReLU outputs about as sparse as the random BN shifts make them."""
    torch = import_torch()
    from .executor import reference
    if not any(n.op == "batchnorm" for n in net.nodes):
        return sd

    def measure(node, x):
        var, mean = torch.var_mean(x.double(), dim=(0, 2, 3), unbiased=False)
        sd[f"{node.param}.running_mean"] = mean.float().cpu()
        sd[f"{node.param}.running_var"] = var.float().cpu()

    with torch.no_grad():
        reference(net, sd, synthetic_images(batch, net.input_shape, seed).to(device), torch.float32,
                  on_batchnorm=measure)
    return sd


def load(net: Network, weights: str | None, seed: int = 0, device="cpu") -> tuple[dict, list[str] | None, str | None]:
    """(tensors, class names or None, warning or None) for --weights None | 'torchvision' | PATH.
    Random weights get their BN statistics calibrated on synthetic images (on `device`)."""
    if weights is None:
        return calibrate_bn(net, random_init(net, seed), device, seed=seed), class_names(net), RANDOM_WARNING
    if weights == "torchvision":
        return load_torchvision(net), class_names(net), None
    return load_file(net, weights), class_names(net), None
