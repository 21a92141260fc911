"""Sparsity profiles (`bench e2e --sparsity-profile`): shift the bias that feeds each ReLU so that, on the
images, its output reaches a target sparsity, one target per stage of the network. The sparsity is then
SET, not that of trained weights, and every output says so."""
from __future__ import annotations

from snn.codegen.spec import Network

from ..errors import RunError
from .inputs import forward, quantile, relu_sources


def parse_profile(text: str | None) -> list[float] | None:
    """'0.7' or a per-stage comma list '0.5,0.6,0.7,0.8' -> targets; None stays None."""
    if text is None:
        return None
    try:
        vals = [float(t) for t in str(text).split(",") if t.strip()]
    except ValueError:
        vals = []
    if not vals or any(not 0.0 <= v < 1.0 for v in vals):
        raise RunError(f"--sparsity-profile {text!r}: expected one sparsity in [0, 1) or a comma list of them "
                       f"(one per stage), e.g. 0.7 or 0.5,0.6,0.7,0.8")
    return vals


def stage_targets(n: int, profile: list[float]) -> list[float]:
    """Target per ReLU, in network order: the ReLUs split into len(profile) consecutive stages as
    evenly as possible (earlier stages get the extra one)."""
    k = len(profile)
    base, extra = divmod(n, k)
    out: list[float] = []
    for i, t in enumerate(profile):
        out += [t] * (base + (1 if i < extra else 0))
    return out


def shift_target(net: Network, relu_name: str) -> str | None:
    """The parameter whose shift moves this ReLU's input by the same amount: the bias of the BN (or
    biased conv/linear) that feeds it, or of a BN that feeds the add that feeds it."""
    nodes = {n.name: n for n in net.nodes}
    src = nodes.get(nodes[relu_name].inputs[0])
    if src is None:
        return None
    if src.op == "add":
        for i in src.inputs:
            m = nodes.get(i)
            if m is not None and (m.op == "batchnorm" or (m.op == "conv" and m["bias"])):
                src = m
                break
        else:
            return None
    if src.op == "batchnorm" or (src.op in ("conv", "linear") and src["bias"]):
        return f"{src.param}.bias"
    return None


def apply_profile(net: Network, sd: dict, x, profile: list[float]) -> tuple[dict, list[dict]]:
    """Shift the bias feeding each ReLU whose output reaches a conv so that the ReLU's output on the
    images x has the target sparsity (one pass in network order: each shift sees the earlier ones).
    Returns the new tensors and one record per ReLU."""
    torch = __import__("torch")
    feeding = sorted(set().union(*relu_sources(net).values()), key=[n.name for n in net.nodes].index) \
        if relu_sources(net) else []
    targets = dict(zip(feeding, stage_targets(len(feeding), profile))) if feeding else {}
    sd = dict(sd)
    report: list[dict] = []

    def on_relu(n, z):
        if n.name not in targets:
            return z
        t = targets[n.name]
        param = shift_target(net, n.name)
        rec = {"relu": n.name, "target": t, "param": param, "before": float((z <= 0).float().mean().item())}
        if param is None:
            rec.update(shift=0.0, after=rec["before"], note="no bias to shift")
        else:
            q = quantile(z, t)
            sd[param] = sd[param] - q
            z = z - q
            rec.update(shift=-q, after=float((z <= 0).float().mean().item()))
        report.append(rec)
        return z

    with torch.inference_mode():
        forward(net, sd, x, on_relu=on_relu)
    return sd, report
