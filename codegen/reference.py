"""NumPy mirror of the generated kernels' index arithmetic (no GPU needed).

- `coo_convert` is the dense -> COO* kernel (coo_convert.cu.j2): same tile numbering, same capacity,
  same (pixel, channel) order and in-tile position encoding pos = (iy*IW + ix)*TC + c_local.
- `sparse_conv_fused` is the fused sparse convolution (sparse_conv.cu.j2): same grid of blocks, same
  channel chunks of KC staged as [pixel][channel], same per-channel pixel bitmasks in 32-bit words,
  same static tap table (`emit.tile_taps`), same bounds checks on the store. KC comes from
  `emit.geometry`, so it already leaves room for the kernel's cp.async weight ring (WD channels of
  per-thread taps); the ring only changes when weights arrive, not which channel's taps multiply
  which pixel, nor the order of the additions into an accumulator, so it needs no mirror here.
  With `groups` = G > 1 it mirrors the in-block channel split: G warp-groups per block, each over
  its own tc channels, partial tiles summed in group order (the shared-memory reduction).
- `sparse_conv_coo` runs the convolution from the COO* buffers, proving they carry everything needed.
- `conv2d_direct` is the plain float64 convolution they are checked against.

Activations are NHWC [B, H, W, C]; weights are CRSN [C, R, S, N] (torch's NCRS transposed).
"""
from __future__ import annotations

import numpy as np

from .config import KernelConfig
from .emit import coo_layout, geometry, tile_taps
from .spec import ConvShape


def weights_crsn(w_ncrs: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(w_ncrs, (1, 2, 3, 0)))


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


def _group_partial(x, w_crsn, shape, g, pix, b, h0, w0, c_begin, c_end, width):
    """The accumulators of one warp-group (the whole block when G = 1) walking channels
    [c_begin, c_end) in chunks of KC staged from c_begin (channels past C are zero-filled)."""
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


def sparse_conv_fused(x: np.ndarray, w_crsn: np.ndarray, shape: ConvShape, cfg: KernelConfig,
                      groups: int = 1) -> np.ndarray:
    """groups = G > 1: a block (tile_c) covers channels [tile_c*G*TC, +G*TC); group gi walks the
    gi-th TC of them (possibly none past C) into its own accumulators; the block sums the G partial
    tiles in order gi = 0..G-1 (the shared-memory reduction) and stores (atomicAdd when TILES_C > 1)."""
    batch = x.shape[0]
    g = geometry(shape, batch, cfg, groups)
    P, Q, N, C, TH, TW, TC, NB = g["P"], g["Q"], g["N"], g["C"], g["TH"], g["TW"], g["TC"], g["NB"]
    G = g["G"]
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
                acc = np.zeros((TH, TW, width))
                for gi in range(G):                           # threadIdx.y
                    c_begin = tile_c * G * TC + gi * TC
                    c_end = min(c_begin + TC, C)
                    acc = acc + _group_partial(x, w_crsn, shape, g, pix, b, h0, w0, c_begin, c_end, width)
                pe, qe = min(TH, P - p0), min(TW, Q - q0)
                out[b, p0:p0 + pe, q0:q0 + qe, :] += acc[:pe, :qe, :N]  # atomicAdd when TILES_C > 1
    return out


def coo_convert(x: np.ndarray, shape: ConvShape, cfg: KernelConfig):
    """-> (count[tiles], vals[tiles, CAP], pos[tiles, CAP]); unused slots are left 0 here (untouched on GPU)."""
    batch = x.shape[0]
    g = geometry(shape, batch, cfg)
    lay = coo_layout(shape, batch, cfg)
    cap, TC = lay["capacity"], g["TC"]
    count = np.zeros(lay["tiles"], dtype=np.int32)
    vals = np.zeros((lay["tiles"], cap), dtype=x.dtype)
    pos = np.zeros((lay["tiles"], cap), dtype=np.uint32)
    gk = dict(g, KC=TC)  # the conversion stages all TC channels of a tile
    for b in range(batch):
        for tile_hw in range(g["TILES_H"] * g["TILES_W"]):
            tile_h, tile_w = divmod(tile_hw, g["TILES_W"])
            h0 = tile_h * g["TH"] * g["SH"] - g["PH"]
            w0 = tile_w * g["TW"] * g["SW"] - g["PW"]
            for tile_c in range(g["TILES_C"]):
                t = (b * g["TILES_H"] * g["TILES_W"] + tile_hw) * g["TILES_C"] + tile_c
                flat = _stage(x, b, h0, w0, tile_c * TC, gk).reshape(-1)  # e = pixel*TC + c_local
                e = np.flatnonzero(flat)
                count[t] = len(e)
                vals[t, :len(e)] = flat[e]
                pos[t, :len(e)] = e
    return count, vals, pos


def sparse_conv_coo(count, vals, pos, w_crsn: np.ndarray, shape: ConvShape, batch: int,
                    cfg: KernelConfig) -> np.ndarray:
    """Convolution from COO*: decode each non-zero's tile and in-tile position, scatter through the taps."""
    g = geometry(shape, batch, cfg)
    taps = tile_taps(shape, cfg)
    P, Q, N, TH, TW, TC = g["P"], g["Q"], g["N"], g["TH"], g["TW"], g["TC"]
    out = np.zeros((batch, P + TH, Q + TW, N))  # room for the tile overhang, cropped at the end
    wf = w_crsn.reshape(shape.C, shape.R * shape.S, N).astype(np.float64)
    for t in range(len(count)):
        rest, tile_c = divmod(t, g["TILES_C"])
        b, tile_hw = divmod(rest, g["TILES_H"] * g["TILES_W"])
        tile_h, tile_w = divmod(tile_hw, g["TILES_W"])
        p0, q0 = tile_h * TH, tile_w * TW
        for j in range(count[t]):
            p, cl = divmod(int(pos[t, j]), TC)
            c = tile_c * TC + cl
            for rs, oy, ox in taps[p]:
                out[b, p0 + oy, q0 + ox, :] += float(vals[t, j]) * wf[c, rs]
    return out[:, :P, :Q, :]


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
