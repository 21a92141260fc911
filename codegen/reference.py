"""NumPy mirror of the generated kernels' index arithmetic (no GPU needed).

- `sparse_conv_fused` is the fused sparse convolution (sparse_conv.cu.j2): same grid of blocks, same
  channel chunks of KC staged as [pixel][channel], same per-channel pixel bitmasks in 32-bit words,
  same static tap table (`emit.tile_taps`), same bounds checks on the store. KC comes from
  `emit.geometry`, so it already leaves room for the kernel's cp.async weight ring (WD channels of
  per-thread taps); the ring only changes when weights arrive, not which channel's taps multiply
  which pixel, nor the order of the additions into an accumulator, so it needs no mirror here.
- `conv2d_direct` is the plain float64 convolution they are checked against.

Activations are NHWC [B, H, W, C]; weights are CRSN [C, R, S, N] (torch's NCRS transposed).
"""
from __future__ import annotations

import numpy as np

from .config import KernelConfig
from .emit import geometry, tile_taps
from .spec import ConvShape


def conv2d_direct(x: np.ndarray, w_crsn: np.ndarray, shape: ConvShape) -> np.ndarray:
    """Direct convolution in float64: out[b,p,q,n] = sum x[b, p*sh+r-ph, q*sw+s-pw, c] * w[c,r,s,n]."""
    (sh, sw), (ph, pw) = shape.stride, shape.padding
    x = np.pad(x.astype(np.float64), ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    w = w_crsn.astype(np.float64)
    out = np.zeros((x.shape[0], shape.P, shape.Q, shape.N))
    for r in range(shape.R):
        for s in range(shape.S):
            win = x[:, r:r + sh * (shape.P - 1) + 1:sh, s:s + sw * (shape.Q - 1) + 1:sw, :]
            out += np.einsum("bpqc,cn->bpqn", win, w[:, r, s, :])
    return out


def _pixel_index(taps):
    """Per in-tile pixel with taps: (p, rs array, oy array, ox array)."""
    return [(p, np.array([t[0] for t in lst]), np.array([t[1] for t in lst]), np.array([t[2] for t in lst]))
            for p, lst in enumerate(taps) if lst]


def _stage(x, b, h0, w0, c0, g):
    """The block's shared-memory tile xs[pixel][channel] for channels c0..c0+KC (zeros outside)."""
    H, W, C, IH, IW, KC = g["H"], g["W"], g["C"], g["IH"], g["IW"], g["KC"]
    xs = np.zeros((IH * IW, KC), dtype=x.dtype)
    for pix in range(IH * IW):
        h, w = h0 + pix // IW, w0 + pix % IW
        if 0 <= h < H and 0 <= w < W:
            hi = min(c0 + KC, C)
            if hi > c0:
                xs[pix, :hi - c0] = x[b, h, w, c0:hi]
    return xs


def _block_partial(x, w_crsn, shape, g, pix, b, h0, w0, c_begin, c_end, width):
    """The accumulators of one block walking channels [c_begin, c_end) in chunks of KC staged from
    c_begin (channels past C are zero-filled)."""
    TH, TW, KC, N = g["TH"], g["TW"], g["KC"], g["N"]
    acc = np.zeros((TH, TW, width))
    for c0 in range(c_begin, c_end, KC):
        xs = _stage(x, b, h0, w0, c0, g)
        nz = xs != 0
        masks = [[int(sum(1 << k for k in range(32) if wd * 32 + k < g["NPIX"] and nz[wd * 32 + k, cc]))
                  for wd in range(g["NWORDS"])] for cc in range(KC)]
        for cc in range(KC):
            m = masks[cc]
            if not any(m):
                continue
            wr = np.zeros((shape.R * shape.S, width))
            wr[:, :N] = w_crsn[c0 + cc].reshape(shape.R * shape.S, N)  # n >= N loads 0
            for p, rs, oy, ox in pix:
                if m[p // 32] >> (p % 32) & 1:
                    acc[oy, ox, :] += float(xs[p, cc]) * wr[rs]
    return acc


def sparse_conv_fused(x: np.ndarray, w_crsn: np.ndarray, shape: ConvShape, cfg: KernelConfig) -> np.ndarray:
    """Block (tile_c) covers channels [tile_c*TC, +TC) and adds its tile into the output (atomicAdd when
    TILES_C > 1)."""
    batch = x.shape[0]
    g = geometry(shape, batch, cfg)
    P, Q, N, C, TH, TW, TC, NB = g["P"], g["Q"], g["N"], g["C"], g["TH"], g["TW"], g["TC"], g["NB"]
    pix = _pixel_index(tile_taps(shape, cfg))
    out = np.zeros((batch, P, Q, N), dtype=np.float64)
    for b in range(batch):                                    # blockIdx.z
        for tile_hw in range(g["TILES_H"] * g["TILES_W"]):    # blockIdx.x
            tile_h, tile_w = divmod(tile_hw, g["TILES_W"])
            p0, q0 = tile_h * TH, tile_w * TW
            h0, w0 = p0 * g["SH"] - g["PH"], q0 * g["SW"] - g["PW"]
            for tile_c in range(g["TILES_C"]):                # blockIdx.y / TILES_N
                # all TILES_N channel groups at once: they differ only in which columns n they own
                width = g["TILES_N"] * NB
                c_begin = tile_c * TC
                acc = _block_partial(x, w_crsn, shape, g, pix, b, h0, w0, c_begin, min(c_begin + TC, C), width)
                pe, qe = min(TH, P - p0), min(TW, Q - q0)
                out[b, p0:p0 + pe, q0:q0 + qe, :] += acc[:pe, :qe, :N]  # atomicAdd when TILES_C > 1
    return out


def input_epilogue_zeros(x_raw: np.ndarray, shift: np.ndarray, shape: ConvShape, cfg: KernelConfig) -> int:
    """The zeros the blocks of a kernel taking its producer's epilogue (emit.IN_ARGS) count: each block at n
    tile 0 stages its (th*wh) x (tw*ww) block tile plus halo of channels [tile_c*TC, +TC), applies
    relu(v + shift[c]) in the image, and counts the zeros of the pixels of its own output tile."""
    B, H, W, C = x_raw.shape
    (ph, pw), bth, btw = shape.padding, cfg.th * cfg.wh, cfg.tw * cfg.ww
    ih, iw = (bth - 1) * shape.stride[0] + shape.R, (btw - 1) * shape.stride[1] + shape.S
    g = cfg.grid(shape, B)
    y = np.maximum(x_raw.astype(np.float32) + shift.astype(np.float32), np.float32(0))
    zeros = 0
    for b in range(B):
        for th in range(g["tiles_h"]):
            for tw in range(g["tiles_w"]):
                h0, w0 = th * bth - ph, tw * btw - pw
                for tc in range(g["tiles_c"]):
                    c0, c1 = tc * cfg.tc, min(tc * cfg.tc + cfg.tc, C)
                    for iy in range(ih):
                        for ix in range(iw):
                            h, w = h0 + iy, w0 + ix
                            own = 0 <= iy - ph < bth and 0 <= ix - pw < btw
                            if own and 0 <= h < H and 0 <= w < W:
                                zeros += int(np.count_nonzero(y[b, h, w, c0:c1] == 0))
    return zeros


def relu_sparse_input(rng: np.random.Generator, shape, sparsity: float, dtype=np.float32) -> np.ndarray:
    """Random activations with about `sparsity` zeros (ReLU-like: positive non-zeros)."""
    x = rng.random(shape).astype(dtype) + np.asarray(0.05, dtype)
    x[rng.random(shape) < sparsity] = 0
    return x


def epilogue(x, scale, shift, residual=None, relu=True):
    """Mirror of snn_epilogue on an NHWC array: returns (out, zeros)."""
    out = x * scale + shift
    if residual is not None:
        out = out + residual
    if relu:
        out = np.maximum(out, 0)
    return out, int(np.count_nonzero(out == 0))
