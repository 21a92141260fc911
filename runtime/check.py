"""Rendered kernels on the GPU against torch in float64.

A bundle's kernels run through the executor; this runs kernels straight from the emitter (no plan, no
bundle): compiled through codegen/compile.py (the cubin cache), loaded and launched through runtime/cuda.py
with the executor's own launch code (kernels.CudaBackend: a kernel's steps, the epilogue's grid), so a
kernel is checked the way a bundle runs it.

Inputs are ReLU-like (positive values with the given share zeroed, never all zero), outputs are filled
with NaN first (an output a kernel leaves unwritten fails), and the reference is torch's conv2d in float64
on the same float32 values, followed by the kernel's fused epilogue (bias, residual, ReLU) in float64; a
kernel passes within TOLERANCE of the largest reference value, with the zero count it reports exact.
16-bit kernels (EmittedKernel.precision) read the input and residual rounded to 16 bits and weights rounded
the same way (held in FP32), so the reference sees exactly the values the kernel sees; a fused 16-bit output
may differ from it by one rounding (ROUNDING), a split's FP32 sums by TOLERANCE.

Used by tests/gpu/test_kernels.py and by the tools that time or profile rendered kernels.
"""
from __future__ import annotations

from types import SimpleNamespace

from snn.codegen.cache import CubinCache
from snn.codegen.compile import Compiler, problems
from snn.codegen.emit import EPILOGUE16_VECTOR, EPILOGUE_IN_LD, EPILOGUE_ZERO_RANGE, EmittedKernel, render_epilogue
from snn.codegen.spec import ConvShape

from .cuda import Device, import_torch
from .kernels import (CudaBackend, stores_slice, takes_input_bn, takes_input_epilogue, takes_input_residual,
                      takes_output_pitch, takes_zero_range, workspace)

TOLERANCE = 1e-5
# a 16-bit output's own rounding, relative (to nearest: half a unit in the last place, 8 / 11 significant bits)
ROUNDING = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
# (batch, channels, height, width, residual, relu, in place, pixel pitch of the input): vector (C % 4 == 0) and
# scalar paths; a pitch above C reads the first C channels of a wider buffer (a concat chain's value)
EPILOGUE_CASES = [(3, 64, 56, 56, True, True, False, 64), (1, 64, 1000, 1, False, True, True, 64),
                  (1, 3, 777, 1, True, False, False, 3), (1, 30, 7, 7, False, True, False, 30),
                  (3, 64, 14, 14, False, True, False, 96), (2, 30, 7, 7, True, True, False, 37)]


def relu_input(torch, shape_bhwc, sparsity: float, gen):
    """NHWC float32 activations in [0.05, 1.05), about `sparsity` of them zero, never all of them."""
    x = torch.rand(shape_bhwc, generator=gen, device="cuda") + 0.05
    x = torch.where(torch.rand(shape_bhwc, generator=gen, device="cuda") < sparsity, torch.zeros_like(x), x)
    if not bool((x != 0).any()):
        x.view(-1)[0] = 1.0
    return x.contiguous()


def signed(torch, x, gen):
    """x where it is positive, a clearly negative value (in (-1.2, -0.2]) where it is zero: what a ReLU turns into x."""
    return torch.where(x > 0, x, -torch.rand(x.shape, generator=gen, device="cuda") - 0.2)


def raw_sums(torch, x, gen):
    """A producer's raw sums for a hand-off check: signed values whose relu(sums + shift) is zero where x is,
    the shift, and relu(sums + shift) rounded as the kernel computes it (one FP32 add)."""
    shift = torch.randn(x.shape[-1], generator=gen, device="cuda") * 0.1
    raw = signed(torch, x, gen) - shift
    return raw, shift, (raw + shift).clamp_min(0)


def handoff_input(torch, x, gen, residual: bool):
    """A producer's epilogue for a hand-off check on NHWC x: (its raw sums, the kernel's input; the
    executor.InputEpilogue; relu(sums + shift (+ residual)) rounded as the kernel computes it). residual: the
    kernel also adds the producer's residual and stores the finished input into InputEpilogue.out (NaN until it
    does; both as the NCHW-shaped views the runtime passes)."""
    from .executor import InputEpilogue
    raw, shift, done = raw_sums(torch, x, gen)
    counters = torch.zeros(1, dtype=torch.int64, device="cuda")
    if not residual:
        return raw, InputEpilogue(shift, counters, 0), done
    res = torch.randn(x.shape, generator=gen, device="cuda")
    raw = raw - res
    done = ((raw + shift) + res).clamp_min(0)   # the kernel's order of the two adds
    stored = torch.full_like(x, float("nan"))
    return raw, InputEpilogue(shift, counters, 0, res.permute(0, 3, 1, 2), stored.permute(0, 3, 1, 2)), done


def preact_pitch(c: int) -> int:
    """The width of the buffer a pre-activation check reads its C channels from: C rounded up to whole 16-byte
    vectors, plus two more (NaN, so a stray read shows)."""
    return -(-c // 4) * 4 + 8


def preact_input(torch, x, gen, pitch: int):
    """A pre-activation for a check on NHWC x (emit.IN_BN_ARGS): (the batchnorm's input, signed, as the first C
    channels of a NaN-poisoned NHWC buffer `pitch` wide; the executor.InputEpilogue with a signed scale and a
    shift; relu(input * scale + shift) rounded as the kernel's fmaf computes it, zero where x is)."""
    from .executor import InputEpilogue
    c = x.shape[-1]
    scale = (torch.rand(c, generator=gen, device="cuda") + 0.5) * torch.where(
        torch.rand(c, generator=gen, device="cuda") < 0.3, -1.0, 1.0)
    shift = torch.randn(c, generator=gen, device="cuda") * 0.1
    y = signed(torch, x, gen)
    buf = torch.full((*x.shape[:-1], pitch), float("nan"), device="cuda")
    z = buf[..., :c]
    z.copy_((y - shift) / scale)
    done = (z.double() * scale.double() + shift.double()).float().clamp_min(0)   # one rounding, as fmaf
    counters = torch.zeros(1, dtype=torch.int64, device="cuda")
    return z, InputEpilogue(shift, counters, 0, scale=scale), done


def conv_float64(torch, x_bhwc, w_crsn, shape: ConvShape):
    """torch's conv2d in float64 of NHWC input and CRSN weights, NHWC out."""
    x = x_bhwc.double().permute(0, 3, 1, 2)
    w = w_crsn.double().permute(3, 0, 1, 2)  # CRSN -> NCRS
    y = torch.nn.functional.conv2d(x, w, stride=shape.stride, padding=shape.padding)
    return y.permute(0, 2, 3, 1).contiguous()


class KernelRunner:
    """Compile rendered kernels for this GPU (and the epilogue) and run them on torch's current stream."""

    def __init__(self, cache: CubinCache | None = None, jobs: int | None = None, device: Device | None = None):
        self.torch = import_torch()
        self.dev = device or Device()
        self.arch = "sm_%d%d" % self.dev.compute_capability
        self.compiler = Compiler(cache, jobs)
        self.records: dict[str, dict] = {}
        self._ws: dict[str, dict] = {}
        self._backends: dict[str, CudaBackend] = {}
        self.backend = self.epilogue_backend("fp32")

    def epilogue_backend(self, precision: str) -> CudaBackend:
        """A backend whose epilogue is the kernel for `precision` (emit.render_epilogue), compiled here, with the
        manifest entry a build would give it."""
        if precision not in self._backends:
            epi_name, epi_source = render_epilogue(precision)
            self._compile({epi_name: epi_source})
            epilogue = {"cubin": self.records[epi_name]["cubin"], "function": epi_name,
                        "zero_range": EPILOGUE_ZERO_RANGE, "in_ld": EPILOGUE_IN_LD}
            if precision != "fp32":
                epilogue["vector"] = EPILOGUE16_VECTOR
            self._backends[precision] = CudaBackend(self.dev, SimpleNamespace(epilogue=epilogue, precision=precision))
        return self._backends[precision]

    def _compile(self, sources: dict[str, str]) -> dict[str, list[str]]:
        records = self.compiler.compile(sources, self.arch).records
        self.records.update(records)
        return {name: why for name, rec in records.items() if (why := problems(rec))}

    def compile(self, kernels: list[EmittedKernel]) -> dict[str, list[str]]:
        """Compile what the cache lacks; returns the kernels with a stack frame or spills, and why."""
        return self._compile({k.name: k.source for k in kernels})

    def run(self, kernel: EmittedKernel, x, w, out, epi=None, in_epi=None, zero=None, zeroed=False) -> None:
        """The kernel's steps on NHWC input x, CRSN weights w and NHWC output out (or the channel slice of a wider
        NHWC buffer, zeroed: it holds zeros already); epi (executor.Epilogue) goes into a kernel that fuses it, else
        into one epilogue launch after it. The kernel's workspace is made (zeroed) on its first run."""
        entry = {"cubin": self.records[kernel.name]["cubin"], "steps": kernel.steps, "epilogue": kernel.epilogue}
        if kernel.name not in self._ws:
            self._ws[kernel.name] = workspace(self.torch, kernel.workspace, "cuda")
        # NHWC in and out as the NCHW-shaped (channels_last) views the runtime passes (their pixel pitch read there);
        # the input NCHW for a kernel that reads it so (the image's direct kernel)
        xin = x.permute(0, 3, 1, 2)
        if kernel.input_layout == "NCHW":
            entry["input_layout"] = "NCHW"
            xin = xin.contiguous()
        self.backend.sparse_conv(kernel.name, entry, xin, w, out.permute(0, 3, 1, 2),
                                 self._ws[kernel.name], None, epi, in_epi, zero=zero, zeroed=zeroed)

    def check_conv(self, kernel: EmittedKernel, shape: ConvShape, batch: int, sparsity: float, gen,
                   form: int = 0, handoff: bool = False, pitch: int = 0, preact: int = 0) -> dict:
        """One kernel against float64, its fused epilogue included: form (mod 4) picks bias + residual + ReLU,
        bias + ReLU, bias alone, nothing; the zeros it counts must be the zeros it wrote. Run twice on one
        workspace (output poisoned each time). A kernel that does not fuse it (a channel split) gets the
        epilogue as the executor gives it: one snn_epilogue launch after the kernel.
        handoff: the input is a producer's raw sums (signed) and the kernel applies relu(x + shift[c]) while
        staging (emit.IN_ARGS); the zeros it counts there must be those of relu(x + shift), each once. A kernel
        that takes emit.IN_RES_ARGS also adds a residual there and must store the finished input exactly; one
        that takes emit.ZERO_ARGS must zero the range it is given (random values before each run).
        pitch > N: the output is channels [4, 4 + N) of a NaN-poisoned NHWC buffer `pitch` wide (a concat's, with the
        kernel's emit.OUT_ARGS): every other channel must stay NaN; a split adds into its slice, zeroed first.
        preact: a pre-activation (emit.IN_BN_ARGS): the input is a batchnorm's (signed), the first C channels of a
        NaN-poisoned NHWC buffer `preact` wide read in place, and the kernel applies relu(x * scale[c] + shift[c])
        while staging, its zeros counted exactly once as with handoff."""
        from .cuda import torch_dtype
        from .executor import Epilogue
        torch = self.torch
        x = relu_input(torch, (batch, shape.H, shape.W, shape.C), sparsity, gen)
        in_epi, in_zeros_expected, stored_ok = None, None, []
        if handoff:  # signed sums whose relu(x + shift) has about `sparsity` zeros; the reference sees that
            x, in_epi, x_eff = handoff_input(torch, x, gen, takes_input_residual({"steps": kernel.steps}))
            in_zeros_expected = int((x_eff == 0).sum())
        elif preact:
            x, in_epi, x_eff = preact_input(torch, x, gen, preact)
            in_zeros_expected = int((x_eff == 0).sum())
        w = torch.randn((shape.C, shape.R, shape.S, shape.N), generator=gen, device="cuda")
        bias, residual, relu = [(True, True, True), (True, False, True), (True, False, False),
                                (False, False, False)][form % 4]
        b = torch.randn(shape.N, generator=gen, device="cuda") if bias else None
        r = torch.randn((batch, shape.P, shape.Q, shape.N), generator=gen, device="cuda") if residual else None
        p16 = kernel.precision != "fp32"
        if p16:  # 16-bit activations; weights rounded alike, held in FP32
            dt = torch_dtype(torch, kernel.precision)
            x, w = x.to(dt), w.to(dt).float()
            r = r.to(dt) if r is not None else None
            if not kernel.epilogue:  # a split adds FP32 sums: checked through the FP32 epilogue, zeros counted
                b = r = None
                relu = False
        want = conv_float64(torch, x if in_epi is None else x_eff, w, shape)
        if b is not None:
            want = want + b.double()
        if r is not None:
            want = want + r.double()
        if relu:
            want = want.clamp_min(0)
        outs, counted, in_counted, zeroed = [], [], [], []
        zero = (torch.empty(4096 + 64 * batch, device="cuda")
                if handoff and takes_zero_range({"steps": kernel.steps}) else None)
        out_dt = dt if p16 and kernel.epilogue else torch.float32
        sliced, others_nan = pitch > shape.N, []
        count = not sliced or kernel.epilogue   # a split writes a slice only with nothing to apply: no count
        zeros = torch.zeros(1, dtype=torch.int64, device="cuda")
        epi = Epilogue(b, r, relu, zeros if count else None, 0)
        if sliced and not stores_slice({"steps": kernel.steps, "epilogue": kernel.epilogue}, epi):
            raise ValueError(f"{kernel.name}: form {form % 4} cannot write a slice (kernels.stores_slice)")
        for _ in range(2):
            if sliced:
                buf = torch.full((batch, shape.P, shape.Q, pitch), float("nan"), device="cuda", dtype=out_dt)
                out = buf[..., 4:4 + shape.N]
                if not kernel.epilogue:   # a split adds into it: zeroed, as the runtime's chain buffer is
                    out.zero_()
            else:
                out = torch.full((batch, shape.P, shape.Q, shape.N), float("nan"), device="cuda", dtype=out_dt)
            zeros.zero_()
            if in_epi is not None:
                in_epi.counters.zero_()
                if in_epi.out is not None:
                    in_epi.out.fill_(float("nan"))
            if zero is not None:
                zero.uniform_(1.0, 2.0, generator=gen)
            self.run(kernel, x, w, out, epi, in_epi, zero, zeroed=sliced)
            torch.cuda.synchronize()
            if sliced:
                others_nan.append(bool(torch.isnan(buf[..., :4]).all()) and bool(torch.isnan(buf[..., 4 + shape.N:]).all()))
            if zero is not None:
                zeroed.append(not bool(zero.any()))
            outs.append(out)
            counted.append(int(zeros.item()))
            if in_epi is not None:
                in_counted.append(int(in_epi.counters.item()))
                if in_epi.out is not None:
                    stored_ok.append(bool(torch.equal(in_epi.out.permute(0, 2, 3, 1), x_eff)))
        scale = float(want.abs().max())
        rounding = ROUNDING[kernel.precision] if p16 and kernel.epilogue else 0.0
        # the worst error, in units of what is allowed where it occurs (<= 1 passes)
        errs = [float(((o.double() - want).abs() / (rounding * want.abs() + TOLERANCE * scale + TOLERANCE)).max())
                for o in outs]
        nan = sum(int(torch.isnan(o).sum()) for o in outs)
        nz = [int((o == 0).sum()) if count else 0 for o in outs]
        ok = (nan == 0 and max(errs) <= 1.0 and counted == nz and all(stored_ok) and all(zeroed) and all(others_nan)
              and in_counted == ([in_zeros_expected] * 2 if in_epi is not None else []))
        return {"kernel": kernel.name, "batch": batch, "sparsity": round(sparsity, 3), "bias": bias, "handoff": handoff,
                "preact": preact,
                "in_zeros": in_counted, "in_zeros_expected": in_zeros_expected, "stored_input_exact": stored_ok,
                "zero_range_cleared": zeroed, "pitch": pitch, "others_untouched": others_nan,
                "residual": residual, "relu": relu, "precision": kernel.precision, "err_over_allowed": max(errs),
                "max_abs_err": max(float((o.double() - want).abs().max()) for o in outs), "max_abs_ref": scale, "nan": nan,
                "zeros": counted, "zeros_expected": nz, "ok": ok}

    def check_convs(self, cases, seed: int = 0, handoff: bool = False, sliced: bool = False,
                    preact: bool = False) -> list[dict]:
        """cases: (EmittedKernel, shape, batch), compiled; sparsity drawn from 0.4-0.95 for each. handoff: the
        cases whose kernel takes its producer's epilogue (emit.IN_ARGS), checked with it. sliced: the cases whose
        kernel takes out_ld (emit.OUT_ARGS), each writing a concat buffer's slice (pitch N + 12), with bias + ReLU
        where it fuses its epilogue and nothing where it is a split (what kernels.stores_slice allows). preact: the
        cases whose kernel takes in_ld (emit.IN_BN_ARGS), each reading a pre-activation's input in place from a
        wider buffer (`preact_pitch`)."""
        gen = self.torch.Generator(device="cuda")
        gen.manual_seed(seed)
        rows = []
        for i, (k, shape, batch) in enumerate(cases):
            if handoff and not takes_input_epilogue({"steps": k.steps}):
                continue
            if sliced and not takes_output_pitch({"steps": k.steps}):
                continue
            if preact and not takes_input_bn({"steps": k.steps}):
                continue
            sparsity = 0.4 + 0.55 * float(self.torch.rand(1, generator=gen, device="cuda"))
            form = (1 if k.epilogue else 3) if sliced else i
            rows.append(self.check_conv(k, shape, batch, sparsity, gen, form=form, handoff=handoff,
                                        pitch=shape.N + 12 if sliced else 0,
                                        preact=preact_pitch(shape.C) if preact else 0))
        return rows

    def run_pair(self, kernel: EmittedKernel, x, w1, out1, w2, out2, epi, epi2, in_epi=None, zero=None) -> None:
        """A pair kernel (codegen/pair.py) on NHWC x, out1, out2 and CRSN w1, w2, through the executor's launch."""
        nchw = [t.permute(0, 3, 1, 2) for t in (x, out1, out2)]
        self.backend.pair_conv(kernel.name, self._entry(kernel), nchw[0], w1, nchw[1], w2, nchw[2], epi, epi2,
                               in_epi, zero)

    def _entry(self, kernel: EmittedKernel) -> dict:
        return {"cubin": self.records[kernel.name]["cubin"], "steps": kernel.steps, "epilogue": True}

    def check_pair(self, kernel: EmittedKernel, first: ConvShape, second: ConvShape, batch: int, sparsity: float,
                   gen, handoff: bool = True) -> dict:
        """check_pair (below) of a rendered pair kernel, compiled here."""
        return check_pair(self.backend, kernel.name, self._entry(kernel), first, second, batch, sparsity, gen, handoff)

    def check_epilogue(self, seed: int = 2, precision: str = "fp32") -> list[dict]:
        """The epilogue kernel of `precision` through the executor's launch: values against float64 on the same
        inputs (FP32: within TOLERANCE; 16 bits: within one rounding of the stored type), zero count exact."""
        from .cuda import torch_dtype
        torch = self.torch
        dt = torch_dtype(torch, precision)
        backend = self.epilogue_backend(precision)
        gen = torch.Generator(device="cuda")
        gen.manual_seed(seed)
        rows = []
        for b, c, h, w, residual, relu, in_place, pitch in EPILOGUE_CASES:
            def tensor(*shape):
                return torch.randn(shape, generator=gen, device="cuda").to(dt)
            x = tensor(b, c, h, w).contiguous(memory_format=torch.channels_last)
            if pitch > c:  # the channels past C are NaN: a read of one shows in the output
                buf = torch.full((b, pitch, h, w), float("nan"), device="cuda", dtype=dt).contiguous(
                    memory_format=torch.channels_last)
                buf[:, :c] = x
                x = buf[:, :c]
            scale, shift = tensor(c), tensor(c)
            res = tensor(b, c, h, w).contiguous(memory_format=torch.channels_last) if residual else None
            want = (x.double() * scale.double().view(1, c, 1, 1) + shift.double().view(1, c, 1, 1)
                    + (res.double() if residual else 0))
            want = want.clamp_min(0) if relu else want
            out = x if in_place else torch.full((b, c, h, w), float("nan"), device="cuda", dtype=dt).contiguous(
                memory_format=torch.channels_last)
            zeros = torch.zeros(1, dtype=torch.int64, device="cuda")
            # the zero range (runtime/handoff.py): vector and scalar lengths, never reaching past its end
            zero = torch.full((1000 + 3 * len(rows) + 2,), 7.0, device="cuda")
            backend.epilogue(x, scale, shift, res, out, zeros, 0, relu, zero=zero[:-1])
            torch.cuda.synchronize()
            diff = (out.double() - want).abs()
            if precision != "fp32":  # one rounding of the result, beside the FP32 arithmetic's own error
                diff = diff / (ROUNDING[precision] * want.abs() + TOLERANCE)
            err, nz = float(diff.max()), int((out == 0).sum())
            zeroed = bool((zero[:-1] == 0).all()) and float(zero[-1]) == 7.0
            ok_err = err < (TOLERANCE if precision == "fp32" else 1.0)
            what = "max_abs_err" if precision == "fp32" else "err_over_allowed"
            rows.append({"precision": precision, "shape": [b, c, h, w], "pitch": pitch, "residual": residual,
                         "relu": relu, "in_place": in_place, what: err,
                         "zeros": int(zeros.item()), "zeros_expected": nz, "zero_range": zeroed,
                         "ok": ok_err and int(zeros.item()) == nz and (not relu or nz > 0) and zeroed})
        return rows


def check_pair(backend, name: str, kentry: dict, first: ConvShape, second: ConvShape, batch: int, sparsity: float,
               gen, handoff: bool = True) -> dict:
    """A pair kernel (a manifest entry: cubin, steps) on `backend` (kernels.CudaBackend) against float64:
    x = relu(conv1(input) + bias + residual), y = relu(conv2(x) + bias2), both outputs poisoned with NaN first, each
    zero count exact (the zeros each output holds); handoff: the input is a producer's raw sums and the kernel
    applies relu(v + shift[c]) while staging, counting those zeros once, and clears the zero range it is given. Run
    twice on the same operands."""
    from .executor import Epilogue
    torch = backend.torch
    x = relu_input(torch, (batch, first.H, first.W, first.C), sparsity, gen)
    in_epi, x_eff = None, x
    if handoff:
        x, in_epi, x_eff = handoff_input(torch, x, gen, False)
    w1 = torch.randn((first.C, 1, 1, first.N), generator=gen, device="cuda") * first.C ** -0.5
    w2 = torch.randn((second.C, 1, 1, second.N), generator=gen, device="cuda") * second.C ** -0.5
    b1 = torch.randn(first.N, generator=gen, device="cuda")
    b2 = torch.randn(second.N, generator=gen, device="cuda")
    res = torch.randn((batch, first.H, first.W, first.N), generator=gen, device="cuda")
    want1 = (conv_float64(torch, x_eff, w1, first) + b1.double() + res.double()).clamp_min(0)
    want2 = (conv_float64(torch, want1, w2, second) + b2.double()).clamp_min(0)
    z1, z2 = (torch.zeros(1, dtype=torch.int64, device="cuda") for _ in range(2))
    epi, epi2 = Epilogue(b1, res.permute(0, 3, 1, 2), True, z1, 0), Epilogue(b2, None, True, z2, 0)
    zero = torch.empty(4096, device="cuda") if handoff else None
    errs, counts, in_counts, cleared, nan = [], [], [], [], 0
    for _ in range(2):
        out1 = torch.full((batch, first.H, first.W, first.N), float("nan"), device="cuda")
        out2 = torch.full((batch, second.H, second.W, second.N), float("nan"), device="cuda")
        for t in (z1, z2):
            t.zero_()
        if in_epi is not None:
            in_epi.counters.zero_()
        if zero is not None:
            zero.uniform_(1.0, 2.0, generator=gen)
        backend.pair_conv(name, kentry, x.permute(0, 3, 1, 2), w1, out1.permute(0, 3, 1, 2), w2,
                          out2.permute(0, 3, 1, 2), epi, epi2, in_epi, zero)
        torch.cuda.synchronize()
        nan += int(torch.isnan(out1).sum()) + int(torch.isnan(out2).sum())
        for o, want in ((out1, want1), (out2, want2)):
            scale = float(want.abs().max())
            errs.append(float(((o.double() - want).abs() / (TOLERANCE * scale + TOLERANCE)).max()))
        counts.append((int(z1.item()), int((out1 == 0).sum()), int(z2.item()), int((out2 == 0).sum())))
        if in_epi is not None:
            in_counts.append(int(in_epi.counters.item()))
        if zero is not None:
            cleared.append(not bool(zero.any()))
    in_expected = int((x_eff == 0).sum())
    ok = (nan == 0 and max(errs) <= 1.0 and all(a == b and c == d for a, b, c, d in counts) and all(cleared)
          and in_counts == ([in_expected] * 2 if handoff else []))
    return {"kernel": name, "batch": batch, "sparsity": round(sparsity, 3), "handoff": handoff,
            "err_over_allowed": max(errs), "nan": nan, "zeros": counts, "in_zeros": in_counts,
            "in_zeros_expected": in_expected if handoff else None, "zero_range_cleared": cleared, "ok": ok}
