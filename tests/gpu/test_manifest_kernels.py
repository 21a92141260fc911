"""Every kernel of every bundle built for this GPU (generated/<network>/<gpu>/manifest.json, or under
$SNN_GENERATED) against torch conv2d in float64: ReLU-like random inputs at sparsity 0.4-0.95, output
poisoned with NaN first, relative error < 1e-5; a kernel that fuses its epilogue with it (bias, residual,
ReLU, and its zero count exact), every other kernel that takes a producer's epilogue (emit.IN_ARGS) on raw
sums with it and every other one that takes a pre-activation (emit.IN_BN_ARGS) on a batchnorm's input read in
place from a wider buffer (its count of the staged zeros exact), run twice on one workspace; a pair kernel
(codegen/pair.py) as runtime.check.check_pair checks it. Skips where no bundle was built (`snn-codegen build ...` first).

With SNN_RESULTS=DIR it writes DIR/kernel_check_<network>.json (every kernel's error and sparsity).
"""
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from snn.codegen import bundle  # noqa: E402
from snn.codegen.spec import ConvShape  # noqa: E402
from snn.runtime.check import check_pair, handoff_input, preact_input, preact_pitch  # noqa: E402
from snn.runtime.cuda import Device  # noqa: E402
from snn.runtime.executor import Epilogue  # noqa: E402
from snn.runtime.kernels import (CudaBackend, reads_nchw, takes_input_bn, takes_input_epilogue,  # noqa: E402
                                 takes_input_residual, takes_zero_range, workspace)

ROOT = Path(__file__).resolve().parents[2]
GENERATED = Path(os.environ.get("SNN_GENERATED", ROOT / "generated"))


def _manifests():
    if not torch.cuda.is_available():
        return []
    cc = list(torch.cuda.get_device_capability())
    found = []
    for path in sorted(GENERATED.glob("*/*/manifest.json")):
        doc = json.loads(path.read_text())
        if doc.get("compute_capability") == cc:
            found.append(pytest.param(path, id=f"{doc['network']}-{doc['gpu']}"))
    return found


def relu_like(shape, sparsity, gen):
    """Gaussian values shifted so that the wanted share is <= 0, then ReLU: zeros where real activations
    have them, never all zero."""
    x = torch.randn(shape, generator=gen, dtype=torch.float64, device="cuda")
    cut = torch.quantile(x.flatten()[: 1 << 24], sparsity)
    return torch.relu(x - cut)


def to_layout(w_ncrs, layout):
    return w_ncrs.permute(*["NCRS".index(a) for a in layout]).contiguous()


@pytest.mark.parametrize("path", _manifests() or [pytest.param(None, marks=pytest.mark.skip(
    reason="no bundle built for this GPU under generated/ (run snn-codegen build)"))])
def test_every_kernel_matches_float64(path):
    doc = json.loads(path.read_text())
    problems = bundle.verify(path.parent, doc)
    assert not problems, problems[:3]
    for entry in bundle.cubin_entries(doc).values():  # paths in the manifest are relative to the bundle
        entry["cubin"] = str(path.parent / entry["cubin"])
    backend = CudaBackend(Device(), SimpleNamespace(epilogue=doc["epilogue"], precision=bundle.precision(doc)))
    gen = torch.Generator(device="cuda").manual_seed(1234)
    results, worst = [], 0.0
    for i, (name, k) in enumerate(sorted(doc["kernels"].items())):
        s, b = k["shape"], k["batch"]
        sparsity = 0.4 + 0.55 * torch.rand((), generator=gen, device="cuda").item()
        if "second" in k:   # two 1x1 convs in one launch (codegen/pair.py): both outputs, alternately on raw sums
            first, second = (ConvShape(d["C"], d["N"], d["H"], d["W"], 1, 1, (1, 1), (0, 0)) for d in (s, k["second"]))
            r = check_pair(backend, name, k, first, second, b, sparsity, gen, handoff=bool(i % 2))
            assert r["ok"], r
            results.append({"kernel": name, "batch": b, "sparsity": round(sparsity, 3), "epilogue": "pair",
                            "err_over_allowed": r["err_over_allowed"]})
            continue
        x64 = relu_like((b, s["C"], s["H"], s["W"]), sparsity, gen)
        w64 = torch.randn((s["N"], s["C"], s["R"], s["S"]), generator=gen, dtype=torch.float64, device="cuda")
        x32 = x64.float().permute(0, 2, 3, 1).contiguous()          # NHWC
        w32 = to_layout(w64.float(), k["weight_layout"])
        in_epi = None
        if takes_input_bn(k) and i % 2 == 0:  # a pre-activation: a batchnorm's input read in place from a wider buffer
            x32, in_epi, finished = preact_input(torch, x32, gen, preact_pitch(s["C"]))
            x64 = finished.permute(0, 3, 1, 2).double()   # relu(x * scale + shift) rounded as the kernel's
            in_zeros = int((x64 == 0).sum())
        elif takes_input_epilogue(k) and i % 2:  # a producer's raw sums: the kernel stages relu(x + shift (+ res))
            x32, in_epi, finished = handoff_input(torch, x32, gen, takes_input_residual(k))
            x64 = finished.permute(0, 3, 1, 2).double()   # the sum rounded as the kernel's
            in_zeros = int((x64 == 0).sum())
        ref = torch.nn.functional.conv2d(x64.float().double(), w64.float().double(), stride=tuple(s["stride"]),
                                         padding=tuple(s["padding"])).permute(0, 2, 3, 1)
        epi, form = None, "conv"
        if k.get("epilogue"):  # its fused epilogue too, alternately bias + residual + ReLU and bias alone
            bias = torch.randn(s["N"], generator=gen, device="cuda")
            res = torch.randn(ref.shape, generator=gen, device="cuda") if i % 2 == 0 else None
            counters = torch.zeros(1, dtype=torch.int64, device="cuda")
            epi = Epilogue(bias, res, i % 2 == 0, counters, 0)
            ref = ref + bias.double() + (res.double() if res is not None else 0)
            ref = ref.clamp_min(0) if epi.relu else ref
            form = "bias+residual+relu" if epi.relu else "bias"
        ws = workspace(torch, k["workspace"], "cuda")
        for rep in range(2):  # twice on one workspace: a kernel must leave nothing behind that the next run reads
            out = torch.full((b, s["P"], s["Q"], s["N"]), float("nan"), device="cuda")
            if epi is not None:
                epi.counters.zero_()
            if in_epi is not None:
                in_epi.counters.zero_()
                if in_epi.out is not None:
                    in_epi.out.fill_(float("nan"))
            # a hand-off kernel also clears a range it is given (a read region of the graph's sums buffer)
            zero = (torch.rand(4096, generator=gen, device="cuda") + 1
                    if in_epi is not None and takes_zero_range(k) else None)
            # NHWC input as the NCHW-shaped view the runtime passes (its pixel pitch read from it); NCHW where the
            # kernel reads it so (the image's direct kernel)
            xin = x32.permute(0, 3, 1, 2)
            backend.sparse_conv(name, k, xin.contiguous() if reads_nchw(k) else xin, w32, out, ws,
                                None, epi, in_epi, zero=zero)
            torch.cuda.synchronize()
            assert zero is None or not bool(zero.any()), f"{name}: the range to zero was not cleared"
            if in_epi is not None:
                got = int(in_epi.counters.item())
                assert got == in_zeros, f"{name}: counted {got} zeros in its staged input, there are {in_zeros}"
                if in_epi.out is not None:
                    assert torch.equal(in_epi.out.permute(0, 2, 3, 1), finished), f"{name}: stored input wrong"
                form += ("+preact" if in_epi.scale is not None else "+handoff+residual" if in_epi.out is not None
                         else "+handoff") if rep == 0 else ""
            assert not torch.isnan(out).any(), f"{name}: outputs left unwritten (run {rep + 1})"
            err = ((out.double() - ref).norm() / ref.norm()).item()
            assert err < 1e-5, f"{name} ({form}): relative error {err:.2e} at sparsity {sparsity:.2f} (run {rep + 1})"
            if epi is not None:
                nz = int((out == 0).sum())
                assert int(epi.counters.item()) == nz, f"{name}: counted {int(epi.counters.item())} zeros, wrote {nz}"
        results.append({"kernel": name, "batch": b, "sparsity": round(sparsity, 3), "epilogue": form, "rel_err": err})
        worst = max(worst, err)
    if os.environ.get("SNN_RESULTS"):
        out_dir = Path(os.environ["SNN_RESULTS"])
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"kernel_check_{doc['network']}.json").write_text(json.dumps(
            {"network": doc["network"], "gpu": torch.cuda.get_device_name(), "kernels": len(results),
             "worst_rel_err": worst, "results": results}, indent=0))
