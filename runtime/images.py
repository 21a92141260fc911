"""Image input: recursive discovery and standard ImageNet preprocessing (PIL + numpy, no torch)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# What PIL reads on every install; anything else found in the folder is reported as skipped.
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff", ".ppm",
                  ".pgm", ".pbm", ".pnm"}
# Five small photos shipped with snn (public domain or CC0; sources in docs/runtime.md, "Sample photos"):
# what `snn-run infer` classifies when no folder is named.
SAMPLES_DIR = Path(__file__).resolve().parent / "samples"
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


def discover(root: str | os.PathLike) -> tuple[list[Path], list[Skipped]]:
    """Image files under root (recursive, sorted) and the other files, reported as skipped.

    Hidden files and folders are ignored (.DS_Store, .git).
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or directory")
    if root.is_file():
        files = [root]
    else:
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            files.extend(Path(dirpath) / f for f in sorted(filenames) if not f.startswith("."))
    images, skipped = [], []
    for f in files:
        if f.suffix.lower() in IMAGE_SUFFIXES:
            images.append(f)
        else:
            skipped.append(Skipped(str(f), "not an image file (unknown extension)"))
    return images, skipped


def _pil():
    try:
        from PIL import Image
    except ImportError:
        from .errors import RunError
        raise RunError("reading images needs Pillow: pip install -e '.[gpu]'") from None
    return Image


def preprocess(path: str | os.PathLike, size: int = 224, resize: int = 256) -> np.ndarray:
    """[3, size, size] float32: shorter side to `resize` (bilinear), centre crop, ImageNet mean/std.

    Raises ValueError with a short reason when the file cannot be decoded.
    """
    Image = _pil()
    try:
        with Image.open(path) as im:
            im.load()
            im = im.convert("RGB")
    except Exception as e:  # PIL raises many types for corrupt files
        raise ValueError(f"cannot decode image ({type(e).__name__}: {e})") from None
    w, h = im.size
    if w < h:
        nw, nh = resize, max(1, int(resize * h / w))
    else:
        nw, nh = max(1, int(resize * w / h)), resize
    im = im.resize((nw, nh), Image.BILINEAR)
    left, top = int(round((nw - size) / 2.0)), int(round((nh - size) / 2.0))
    im = im.crop((left, top, left + size, top + size))
    a = np.asarray(im, dtype=np.float32) / 255.0
    a = (a - MEAN) / STD
    return np.ascontiguousarray(a.transpose(2, 0, 1))
