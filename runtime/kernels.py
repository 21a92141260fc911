"""The CUDA backend of the executor: our cubins launched through runtime/cuda.py.

- epilogue: `snn_epilogue(in, scale, shift, residual?, out, zeros?, total, C, relu, clear, zero?, zero_total,
  in_ld)` (docs/interfaces.md), 1-D grid of ceil(total / block) blocks; the kernel bounds-checks `i < total`.
- sparse conv: the manifest's steps, in order, on torch's current stream; buffers are torch tensors; the
  conv's epilogue (executor.Epilogue) goes into the launch of a kernel that fuses it (emit.CONV_ARGS),
  else into one snn_epilogue launch after the steps (`out` then NCHW-shaped, as every epilogue's tensors).
  A channel split that adds with atomics names `accumulator` in its launch: it adds into this backend's
  zeroed FP32 buffer, and the epilogue launch reads it into `out` and zeroes it again (no memset); a split
  with an empty epilogue (no bias, residual, ReLU or count: DenseNet's 3x3 convs) adds into `out`, zeroed first.
- a producer's epilogue moved into its consumer (runtime/graph.py decides where): the producing split adds
  its raw sums into `into` (zeroed, the caller's), with no epilogue launch; the consuming kernel gets
  `in_epi` (shift, counters, slot: emit.IN_ARGS; residual, out: emit.IN_RES_ARGS) and applies it while
  staging. `zero`: a range of the graph's sums buffer to clear in this conv's launches (emit.ZERO_ARGS in its
  kernel, else snn_epilogue's zero range where it ends with one). A pre-activation's batchnorm + ReLU comes the
  same way (in_epi.scale, emit.IN_BN_ARGS), its input then a concat buffer's first channels read in place
  (`input_pitch`).
- `out` may be the channel slice of a wider NHWC tensor (a concat chain's buffer, runtime/lower.py) where the
  kernel stores it itself (`stores_slice`: emit.OUT_ARGS, no epilogue launch, no residual, its store vectors
  aligned in the buffer: `slice_aligned`); `zeroed` says it holds zeros already, so a split adds into it without
  a fill first.
"""
from __future__ import annotations

import ctypes

from .cuda import Device, import_torch, torch_dtype
from .errors import RunError

EPILOGUE_BLOCK = 256
_PTR, _I64, _I32 = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int


# launch arguments a kernel may name besides its buffers: the fused epilogue's (null or 0 when absent)
OPTIONAL_ARGS = ("bias", "residual", "zeros", "relu", "in_shift", "in_zeros", "in_res", "in_out", "zero",
                 "zero_total", "out_ld", "in_scale", "in_ld")
# the buffer a split kernel adds into (codegen/emit.py's ACCUMULATOR; a test holds them equal)
ACCUMULATOR = "accumulator"


def _names(kentry: dict, arg: str) -> bool:
    """A launch of the kernel's steps names `arg`."""
    return any(arg in step.get("args", ()) for step in kentry["steps"])


def uses_accumulator(kentry: dict) -> bool:
    return _names(kentry, ACCUMULATOR)


def takes_input_epilogue(kentry: dict) -> bool:
    """The kernel can apply its producer's epilogue while staging (emit.IN_ARGS in its launch)."""
    return _names(kentry, "in_shift")


def takes_input_residual(kentry: dict) -> bool:
    """The kernel can also add its producer's residual and store the finished input (emit.IN_RES_ARGS)."""
    return _names(kentry, "in_res")


def takes_input_bn(kentry: dict) -> bool:
    """The kernel reads its input at a pixel pitch it is given and can apply a batchnorm's scale while staging
    (emit.IN_BN_ARGS): a pre-activation (batchnorm + ReLU) of a concat buffer's first channels, read in place."""
    return _names(kentry, "in_scale")


def reads_nchw(kentry: dict) -> bool:
    """The kernel reads its input NCHW, [B, C, H, W] contiguous (the entry's "input_layout": the image's direct
    kernel, codegen/direct.py), not as the NHWC of every other kernel."""
    return kentry.get("input_layout") == "NCHW"


def takes_zero_range(kentry: dict) -> bool:
    """The kernel can zero a range after its wait (emit.ZERO_ARGS)."""
    return _names(kentry, "zero")


def takes_output_pitch(kentry: dict) -> bool:
    """The kernel stores its output at a pixel pitch it is given (emit.OUT_ARGS)."""
    return _names(kentry, "out_ld")


def store_vector(kentry: dict) -> int:
    """Channels the kernel stores (or adds) as one vector at a pixel, as the build rendered it: dense.STORE_VECTOR
    for the dense kernel, emit.store_vector of its config for a sparse one; 1 for an entry that records no config."""
    from snn.codegen import dense, emit
    from snn.codegen.config import KernelConfig
    cfg = kentry.get("config", {})
    if cfg.get("family") == "dense":
        return dense.STORE_VECTOR
    if "nt" not in cfg:
        return 1
    return emit.store_vector(kentry["shape"]["N"], KernelConfig.from_dict(cfg))


def slice_aligned(kentry: dict, out) -> bool:
    """Whether the kernel's vector stores stay aligned in `out`, the channel slice of a wider NHWC tensor: its pixel
    pitch and its first element's offset multiples of store_vector (a concat buffer's width and a layer's channel
    offset in it need not be)."""
    v = store_vector(kentry)
    ld = pixel_pitch(out)
    return ld is not None and ld % v == 0 and out.storage_offset() % v == 0


def stores_slice(kentry: dict, epi, out=None) -> bool:
    """Whether a sparse_conv of this kernel with this epilogue can write the channel slice of a wider NHWC tensor
    (`out`, where given): the kernel stores (or adds) the output itself at a pitch it is given, its vectors aligned
    there (slice_aligned), and reads no residual there (the residual is indexed at the output's offsets, so it must
    have the same pitch)."""
    return (takes_output_pitch(kentry) and not launches_epilogue(kentry, epi) and (epi is None or epi.residual is None)
            and (out is None or slice_aligned(kentry, out)))


def output_pitch(name: str, kentry: dict, out, epi, into, shape=None) -> int:
    """The pixel pitch the kernel writes at: out's where it is the channel slice of a wider NCHW-shaped NHWC tensor
    (RunError where this launch cannot write one), else N (the conv's `shape`, else the manifest entry's): a dense
    output, whatever shape it is viewed as, or `into` (a dense region)."""
    n = shape.N if shape is not None else kentry.get("shape", {}).get("N")
    if into is not None or out is None:
        return into.shape[1] if into is not None else (n or 0)
    ld = pixel_pitch(out)
    if ld is None or ld == out.shape[1]:   # dense (the kernel indexes it as NHWC)
        return n if n is not None else out.shape[1]
    if not stores_slice(kentry, epi, out):
        why = ("no out_ld argument" if not takes_output_pitch(kentry) else
               "its residual is read at the output's offsets" if epi is not None and epi.residual is not None else
               "an epilogue launch writes it densely" if launches_epilogue(kentry, epi) else
               f"its {store_vector(kentry)}-channel stores would be misaligned at pitch {ld}")
        raise RunError(f"kernel '{name}' cannot write the channel slice of a wider tensor ({why})")
    return ld


def in_place_pitch(inp, ld: int) -> bool:
    """Whether a kernel that takes in_ld (emit.IN_BN_ARGS) can read inp at its pixel pitch ld where it lies: a dense
    input, or whole 16-byte vectors (a multiple of 4 floats from a 16-byte-aligned start), as its copies need."""
    return ld == inp.shape[1] or (ld % 4 == 0 and inp.data_ptr() % 16 == 0)


def input_pitch(name: str, kentry: dict, inp) -> int:
    """The pixel pitch the kernel reads its NHWC input at (an NCHW-shaped view): inp's own where the kernel takes one
    (emit.IN_BN_ARGS: C for a dense input, more for the first channels of a wider one, then whole 16-byte vectors:
    a multiple of 4 floats from a 16-byte-aligned start), else C; RunError where the kernel cannot read inp."""
    c = inp.shape[1]
    if reads_nchw(kentry):
        if not inp.is_contiguous():
            raise RunError(f"kernel '{name}' reads a dense NCHW input")
        return c
    ld = pixel_pitch(inp)
    if not takes_input_bn(kentry):
        if ld is not None and ld != c:
            raise RunError(f"kernel '{name}' reads a dense NHWC input (no in_ld argument), not one {ld} floats a pixel")
        return c
    if ld is None:
        raise RunError(f"kernel '{name}' reads an NHWC input: its channels must be adjacent, its pixels evenly apart")
    if not in_place_pitch(inp, ld):
        raise RunError(f"kernel '{name}': an input read at a pixel pitch must start 16-byte aligned, its pitch a "
                       f"multiple of 4 (got {ld})")
    return ld


def check_input_epilogue(name: str, kentry: dict, in_epi) -> None:
    """RunError where the kernel cannot take the producer's epilogue it is given (either backend)."""
    if in_epi is None:
        return
    if not takes_input_epilogue(kentry):
        raise RunError(f"kernel '{name}' cannot apply its producer's epilogue (no in_shift argument)")
    if in_epi.scale is not None and not takes_input_bn(kentry):
        raise RunError(f"kernel '{name}' cannot apply a batchnorm's scale while staging (no in_scale argument)")
    if (in_epi.residual is not None or in_epi.out is not None) and not takes_input_residual(kentry):
        raise RunError(f"kernel '{name}' cannot add its producer's residual or store its input (no in_res argument)")


def launches_epilogue(kentry: dict, epi) -> bool:
    """Whether a sparse_conv of this kernel with this epilogue (into=None) ends with an snn_epilogue launch."""
    if epi is None or epi.empty:
        return False
    return uses_accumulator(kentry) or not kentry.get("epilogue")


def counter_ptr(counters, slot) -> int:
    """The device address of counters[slot] (int64), or null."""
    return counters.data_ptr() + 8 * slot if counters is not None else 0


def workspace(torch, sizes: dict | None, device) -> dict:
    """A kernel's workspace buffers ({name: bytes} from its manifest entry), zeroed."""
    return {k: torch.zeros(max(1, int(v)), dtype=torch.uint8, device=device) for k, v in (sizes or {}).items()}


def pixel_pitch(t) -> int | None:
    """Elements from one pixel to the next of an NHWC tensor whose pixels lie evenly apart with their channels
    adjacent (channels_last, or its first channels: the pitch then exceeds C); None for any other layout."""
    if t.dim() != 4:
        return t.shape[-1] if t.is_contiguous() else None
    b, c, h, w = t.shape
    sb, sc, sh, sw = t.stride()
    if c > 1 and sc != 1:
        return None
    ld = sw if w > 1 else (sh if h > 1 else max(c, sb))
    if ld < c or (h > 1 and sh != w * ld) or (b > 1 and sb != h * w * ld):
        return None
    return ld


_INT_ARGS = ("relu", "relu2", "out_ld", "in_ld")   # int arguments; zero_total is 64-bit, the rest pointers


def _ptr(t) -> int:
    return 0 if t is None else t.data_ptr()


def _zero_range(name: str, zero) -> dict:
    """The launch arguments of a float32 range the kernel zeroes (emit.ZERO_ARGS): whole 16-byte-aligned float4s,
    as its stores clear it."""
    if zero.numel() % 4 or zero.data_ptr() % 16:
        raise RunError(f"kernel '{name}': a range to zero must be whole 16-byte-aligned float4s")
    return {"zero": zero.data_ptr(), "zero_total": zero.numel()}


class CudaBackend:
    def __init__(self, device: Device, cache):
        self.torch = import_torch()
        self.dev, self.cache = device, cache
        epi = cache.epilogue
        self.epi_cubin, self.epi_fn = epi["cubin"], epi.get("function", "snn_epilogue")
        self.epi_block = int(epi.get("block", EPILOGUE_BLOCK))
        self.epi_pdl = bool(epi.get("pdl"))
        self.epi_zero = bool(epi.get("zero_range"))   # it can clear a second range (emit.EPILOGUE_ZERO_RANGE)
        self.epi_ld = bool(epi.get("in_ld"))          # it reads `in` at its own pixel pitch (emit.EPILOGUE_IN_LD)
        self.epi_vector = int(epi.get("vector", 1))   # values a thread takes at once (the 16-bit kernel: 8)
        # the activations', scale's and shift's type: the bundle's precision (the 16-bit epilogue's are 16-bit)
        self.epi_dtype = torch_dtype(self.torch, cache.precision)
        self._consts: dict[tuple[str, int], object] = {}
        self._acc = None
        self._retired: list = []   # outgrown accumulators: a CUDA graph captured with one still adds into it

    def prepare_accumulator(self, numel: int, device="cuda"):
        """The accumulator (float32, zeroed, >= numel elements), grown now if it must be: before a CUDA graph
        capture, so that the captured launches allocate nothing. Every launch that adds into it is followed
        by the epilogue that reads it and zeroes it again, so it stays zero between convs."""
        if self._acc is None or self._acc.numel() < numel:
            if self._acc is not None:
                self._retired.append(self._acc)
            self._acc = self.torch.zeros(max(1, numel), dtype=self.torch.float32, device=device)
        return self._acc

    def _const(self, value: float, c: int, device="cuda"):
        key = (value, c)
        if key not in self._consts:
            self._consts[key] = self.torch.full((c,), value, dtype=self.epi_dtype, device=device)
        return self._consts[key]

    def prepare_bias(self, channels: int):
        """The scale = 1 vector a bias-only epilogue over `channels` channels uses, made now (before a
        CUDA graph capture, so that the captured epilogue allocates nothing)."""
        self._const(1.0, channels)

    def epilogue(self, inp, scale, shift, residual, out, counters, slot, relu, clear=False, zero=None):
        """zero: a float32 tensor to clear in the same launch (an epilogue without the zero range: a memset).
        inp may be the first channels of a wider NHWC buffer (a concat chain's view) when out is another tensor:
        read in place where the kernel takes a pixel pitch, else through a dense copy."""
        c = inp.shape[1]
        total = inp.numel()
        bad = [t.dtype for t in (inp, out, scale, shift, residual) if t is not None and t.dtype != self.epi_dtype]
        if bad:  # the kernel reads raw memory: another type would be read as garbage
            raise RunError(f"{self.epi_fn} takes {self.epi_dtype} tensors, got {bad[0]}")
        if zero is not None and (not self.epi_zero or total == 0):
            zero.zero_()
            zero = None
        if total == 0:
            return
        ld = pixel_pitch(inp)
        if ld != c and inp.data_ptr() == out.data_ptr():
            raise RunError("snn_epilogue writes out densely: an in-place epilogue needs a dense NHWC tensor")
        if ld is None or (ld != c and not self.epi_ld):
            inp = inp.contiguous(memory_format=self.torch.channels_last)
            ld = c
        scale = self._const(1.0, c, inp.device) if scale is None else scale
        shift = self._const(0.0, c, inp.device) if shift is None else shift
        args = [(inp.data_ptr(), _PTR), (scale.data_ptr(), _PTR), (shift.data_ptr(), _PTR),
                (residual.data_ptr() if residual is not None else 0, _PTR), (out.data_ptr(), _PTR),
                (counter_ptr(counters, slot), _PTR), (total, _I64), (c, _I32), (1 if relu else 0, _I32),
                (1 if clear else 0, _I32)]
        if self.epi_zero:
            args += [(_ptr(zero), _PTR), (0 if zero is None else zero.numel(), _I64)]
        if self.epi_ld:
            args.append((ld, _I32))
        per_block = self.epi_block * self.epi_vector
        grid = (total + per_block - 1) // per_block
        self.dev.launch(self.epi_cubin, self.epi_fn, (grid, 1, 1), (self.epi_block, 1, 1), 0, args, self.epi_pdl)

    def maxpool(self, inp, kernel, stride, padding, out_hw, shift=None, relu=False, counters=None, slot=None):
        """Max pooling on the bundle's kernel (manifest "maxpool"): a new channels_last tensor, or None where the
        bundle has no such kernel or the input does not suit it (another type, channels not whole 16-byte
        vectors), or an epilogue is asked of a kernel that does not take one (manifest "epilogue": relu(value +
        shift[c]) on each value read, the pooled zeros counted into counters[slot]): the caller pools with torch
        then."""
        pool = self.cache.maxpool
        fused = bool(pool and pool.get("epilogue"))
        if pool is None or inp.dtype != self.epi_dtype or inp.shape[1] % int(pool["vector"]) \
                or ((shift is not None or relu or counters is not None) and not fused):
            return None
        epilogue = [(_ptr(shift), _PTR), (1 if relu else 0, _I32), (counter_ptr(counters, slot), _PTR)] if fused else []
        return self._pool(pool["function"], int(pool["vector"]), inp, out_hw, (*kernel, *stride, *padding), epilogue)

    def avgpool(self, inp, kernel, stride, out_hw, scale=None, shift=None, relu=False, counters=None, slot=None):
        """Average pooling of whole windows (no padding) on the bundle's kernel (manifest "maxpool" "avg_function"):
        a new channels_last tensor where each value read first becomes relu?(value * scale[c] + shift[c]) (shift
        None: as read) and the pooled zeros are counted into counters[slot]; or None where the bundle has no such
        kernel or the input does not suit it (another type, channels not whole 16-byte vectors): the caller pools
        with torch then."""
        pool = self.cache.maxpool
        fn = pool.get("avg_function") if pool else None
        if fn is None or inp.dtype != self.torch.float32 or inp.shape[1] % 4:
            return None
        epilogue = [(_ptr(scale), _PTR), (_ptr(shift), _PTR), (1 if relu else 0, _I32),
                    (counter_ptr(counters, slot), _PTR)]
        return self._pool(fn, 4, inp, out_hw, (*kernel, *stride), epilogue)

    def _pool(self, fn, vector, inp, out_hw, window, epilogue):
        """One of the pool cubin's functions over inp (channels_last, `vector` channels a thread): the arguments input,
        output, pixels, C, H, W, P, Q, the `window` sizes, then `epilogue`'s; None where inp lies at an offset the
        kernel's 16-byte loads cannot take."""
        pool = self.cache.maxpool
        inp = inp.contiguous(memory_format=self.torch.channels_last)
        if inp.data_ptr() % 16:   # a view at an offset the kernel's 16-byte loads cannot take
            return None
        b, c, h, w = inp.shape
        p, q = out_hw
        out = self.torch.empty((b, c, p, q), device=inp.device, dtype=inp.dtype,
                               memory_format=self.torch.channels_last)
        if out.numel() == 0:
            return out
        block = int(pool["block"][0])
        threads = b * p * q * (c // vector)
        args = [(inp.data_ptr(), _PTR), (out.data_ptr(), _PTR), (b * p * q, _I64)] + \
            [(v, _I32) for v in (c, h, w, p, q, *window)] + epilogue
        self.dev.launch(pool["cubin"], fn, ((threads + block - 1) // block, 1, 1), (block, 1, 1), 0, args,
                        bool(pool.get("pdl")))
        return out

    def sparse_conv(self, name, kentry, inp, weight, out, workspace, shape, epi=None, in_epi=None, into=None,
                    zero=None, zeroed=False) -> bool:
        """The kernel's steps and its epilogue (see the module's docstring); `zero` (float32) cleared by the
        kernel (emit.ZERO_ARGS) or its epilogue launch where one of them can: True then."""
        out_ld = output_pitch(name, kentry, out, epi, into, shape)
        in_ld = input_pitch(name, kentry, inp)
        bufs = {"input": inp, "weight": weight, "output": out, **workspace}
        acc = None
        if into is not None:  # the raw sums for a consumer that applies the epilogue (`into` is zeroed)
            if not uses_accumulator(kentry):
                raise RunError(f"kernel '{name}' stores its own epilogue: it cannot leave it to its consumer")
            bufs[ACCUMULATOR] = into
            epi = None
        elif uses_accumulator(kentry):
            if epi is None or epi.empty:  # nothing to apply: the split adds into out, zeroed first (one fill
                if not zeroed:              # kernel, cheaper than an epilogue that copies the sums out)
                    out.zero_()
                bufs[ACCUMULATOR] = out
            else:  # the split's sums, as out's NCHW-shaped view for the epilogue after the steps
                acc = self.prepare_accumulator(out.numel(), out.device)
                bufs[ACCUMULATOR] = self.torch.as_strided(acc, out.shape, out.stride())
        # the fused epilogue's arguments (emit.CONV_ARGS): null / 0 for what this conv does not have
        vals = {"bias": 0, "residual": 0, "zeros": 0, "relu": 0, "in_shift": 0, "in_zeros": 0, "in_res": 0, "in_out": 0,
                "zero": 0, "zero_total": 0, "out_ld": out_ld, "in_scale": 0, "in_ld": in_ld}
        cleared = zero is not None and takes_zero_range(kentry)
        if cleared:
            vals.update(_zero_range(name, zero))
            zero = None
        fused = bool(kentry.get("epilogue"))
        if epi is not None and fused:
            vals.update(bias=_ptr(epi.bias), residual=_ptr(epi.residual), relu=int(bool(epi.relu)),
                        zeros=counter_ptr(epi.counters, epi.slot))
        check_input_epilogue(name, kentry, in_epi)
        if in_epi is not None:
            vals.update(in_shift=_ptr(in_epi.shift), in_zeros=counter_ptr(in_epi.counters, in_epi.slot),
                        in_scale=_ptr(in_epi.scale))
            if in_epi.residual is not None or in_epi.out is not None:
                for t in (in_epi.residual, in_epi.out):   # the kernel indexes them as dense NHWC
                    if t is not None and pixel_pitch(t) != t.shape[1]:
                        raise RunError(f"kernel '{name}': its producer's residual and stored input must be dense NHWC")
                vals.update(in_res=_ptr(in_epi.residual), in_out=_ptr(in_epi.out))
        self._run_steps(name, kentry, bufs, vals)
        if not launches_epilogue(kentry, epi):
            return cleared
        # one launch: a split's sums read into out (the accumulator zeroed again), else in place
        src = bufs[ACCUMULATOR] if acc is not None else out
        self.epilogue(src, None, epi.bias, epi.residual, out, epi.counters, epi.slot, epi.relu, clear=acc is not None,
                      zero=zero)
        return cleared or zero is not None

    def _run_steps(self, name, kentry, bufs: dict, vals: dict) -> None:
        """A kernel's manifest steps: memsets of its buffers, launches with their arguments by name."""
        for i, step in enumerate(kentry["steps"]):
            op = step.get("op")
            if op == "memset":
                buf = bufs.get(step.get("buffer"))
                if buf is None:
                    raise RunError(f"kernel '{name}' step {i}: memset of unknown buffer {step.get('buffer')!r}")
                buf.zero_()
            elif op == "launch":
                args = []
                for a in step["args"]:
                    if a in bufs:
                        args.append((bufs[a].data_ptr(), _PTR))
                    elif a in vals:
                        args.append((vals[a], _I32 if a in _INT_ARGS else _I64 if a == "zero_total" else _PTR))
                    else:
                        raise RunError(f"kernel '{name}' step {i}: argument {a!r} is no known buffer "
                                       f"(known: {', '.join(list(bufs) + list(vals))})")
                self.dev.launch(kentry["cubin"], step["function"], step["grid"], step["block"],
                                int(step.get("smem", 0)), args, bool(step.get("pdl")), int(step.get("cluster", 0)))
            else:
                raise RunError(f"kernel '{name}' step {i}: unknown op {op!r} (known: memset, launch)")

    def pair_conv(self, name, kentry, inp, weight, out, weight2, out2, epi, epi2, in_epi=None, zero=None) -> bool:
        """Two 1x1 convs in one launch (codegen/pair.py): out = relu?(inp * weight + epi.bias + epi.residual), its
        zeros counted as epi says, then out2 = relu?(out * weight2 + epi2.bias), counted as epi2 says (epi2 has no
        residual). inp may hold its producer's raw sums (in_epi, no residual of its own); `zero` (float32) is
        cleared by the kernel: True then. Every tensor dense NHWC (NCHW-shaped channels_last views)."""
        for t in (inp, out, out2, epi.residual):
            if t is not None and pixel_pitch(t) != t.shape[1]:
                raise RunError(f"kernel '{name}': its tensors must be dense NHWC")
        if epi2.residual is not None or (in_epi is not None and (in_epi.residual is not None or in_epi.out is not None
                                                                 or in_epi.scale is not None)):
            raise RunError(f"kernel '{name}': no residual for the second conv, no residual or scale for the input")
        vals = {"bias": _ptr(epi.bias), "residual": _ptr(epi.residual), "zeros": counter_ptr(epi.counters, epi.slot),
                "relu": int(bool(epi.relu)), "in_shift": 0, "in_zeros": 0, "zero": 0, "zero_total": 0,
                "bias2": _ptr(epi2.bias), "zeros2": counter_ptr(epi2.counters, epi2.slot), "relu2": int(bool(epi2.relu))}
        if in_epi is not None:
            vals.update(in_shift=_ptr(in_epi.shift), in_zeros=counter_ptr(in_epi.counters, in_epi.slot))
        if zero is not None:
            vals.update(_zero_range(name, zero))
        bufs = {"input": inp, "weight": weight, "output": out, "weight2": weight2, "output2": out2}
        self._run_steps(name, kentry, bufs, vals)
        return zero is not None
