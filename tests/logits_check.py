"""The GPU tests' comparison of a network's logits with torchvision's (torch tensors, imported by tests/gpu)."""


def check_close(logits, ref, rtol=1e-4):
    """Relative error (over the largest reference logit) below rtol, and the same top-5 classes except
    where two logits lie closer than that bound: their order is then a matter of summation order (the
    sparse kernels and cuDNN add in different orders), as for a pair 594/906 of ResNet-152 at batch 8."""
    ref64, ours64 = ref.double(), logits.double()
    scale = ref64.abs().max()
    err = ((ours64 - ref64).abs().max() / scale).item()
    assert err < rtol, err
    tol = 2 * rtol * scale
    top = logits.topk(5).indices
    fifth = ref64.topk(5).values[:, -1:]
    assert (ref64.gather(1, top) >= fifth - tol).all(), (top, ref.topk(5).indices)   # same top-5, ties aside
    assert (ref64.gather(1, top[:, :1]) >= ref64.max(1, keepdim=True).values - tol).all()  # same top-1
    return err
