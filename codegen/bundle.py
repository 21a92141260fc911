"""The bundle: what `snn-codegen build` hands to the runtime, self-contained and relocatable.

    <out>/<network>/<gpu>/
        manifest.json    kernels (cubin path relative to the bundle, its sha256, config, launch steps,
                         resources) and, per layer and batch, the kernel of every sparsity level
        cubins/          <kernel>.cubin, copied from the compiler cache
        src/             <kernel>.cu, the generated sources (`make cubins GEN=<bundle>/src`)
        spec.yaml        the network spec it was built from
        tuning.json      written by `snn-run calibrate` only; never read or written by the build

A bf16 / fp16 bundle ("precision" in the manifest) holds the spec, the epilogue (and max pool) in that precision,
the tensor-core conv kernels (codegen/tensorcore.py) and a manifest that records every conv as dense: the 16-bit engine runs each
one on the tensor cores, cuDNN's or those kernels, whichever it measured faster for the layer at load.

Nothing in a bundle points outside it: copy the folder to the GPU machine and it runs there. The
manifest is written last, so a build interrupted half-way leaves the previous manifest (or none).
This module writes bundles; runtime/manifest.py reads them.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .cache import file_sha256, write_if_changed

FORMAT = 2           # 2: a direct kernel may read its input NCHW (its entry's "input_layout")
MANIFEST = "manifest.json"
CUBINS = "cubins"
SOURCES = "src"
SPEC = "spec.yaml"
TUNING = "tuning.json"
PRECISIONS = ("fp32", "bf16", "fp16")
DEFAULT_PRECISION = "fp32"  # what a manifest without "precision" was built for (it predates the field)
DENSE_16BIT = ("16-bit: tensor cores (cuDNN, or the bundle's tensor-core kernel where measured faster at load); "
               "16-bit sparse kernels measured slower on every shape, docs/results/precision/h100")


def precision(manifest: dict) -> str:
    """The precision a bundle was built for and runs in."""
    return manifest.get("precision", DEFAULT_PRECISION)


def cubin_relpath(kernel: str) -> str:
    return f"{CUBINS}/{kernel}.cubin"


def place(src: Path, dst: Path) -> None:
    """Copy the cache's file to dst, atomically. A copy, not a hard link: a bundle file changed in place
    must not change the cache (a bundle is a few MB)."""
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_cubins(bundle: Path, records: dict[str, dict]) -> dict[str, dict]:
    """cubins/<name>.cubin for every record (name -> cache record); stale cubins removed.
    Returns name -> {"cubin": relative path, "sha256"}."""
    folder = bundle / CUBINS
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, rec in records.items():
        src, dst = Path(rec["cubin"]), bundle / cubin_relpath(name)
        sha = rec.get("sha256") or file_sha256(src)
        try:
            same = dst.is_file() and file_sha256(dst) == sha
        except OSError:
            same = False
        if not same:
            place(src, dst)
        out[name] = {"cubin": cubin_relpath(name), "sha256": sha}
    for stale in folder.glob("*.cubin"):
        if stale.stem not in records:
            stale.unlink()
    return out


def write_sources(bundle: Path, sources: dict[str, str]) -> int:
    """src/<name>.cu, each rewritten only when its text changed; stale ones removed. Returns files written."""
    folder = bundle / SOURCES
    folder.mkdir(parents=True, exist_ok=True)
    written = sum(write_if_changed(folder / f"{name}.cu", text) for name, text in sources.items())
    for stale in folder.glob("*.cu"):
        if stale.stem not in sources:
            stale.unlink()
    return written


def write_spec(bundle: Path, spec_text: str | None) -> str | None:
    if spec_text is None:
        return None
    write_if_changed(bundle / SPEC, spec_text)
    return SPEC


def write_manifest(bundle: Path, manifest: dict) -> Path:
    path = bundle / MANIFEST
    write_if_changed(path, json.dumps(manifest, indent=1) + "\n")
    return path


def cubin_entries(manifest: dict) -> dict[str, dict]:
    """Every entry of a manifest that names a cubin: kernels, the epilogue, the selector and the max pool."""
    out = {name: k for name, k in manifest.get("kernels", {}).items()}
    for key in ("epilogue", "selector", "maxpool"):
        if isinstance(manifest.get(key), dict):
            out[f"<{key}>"] = manifest[key]
    return out


def verify(bundle: str | Path, manifest: dict | None = None, names=None) -> list[str]:
    """Problems of a bundle, empty if every referenced cubin is inside it and matches its checksum.
    names: only these kernel entries (the runtime checks what one batch size uses)."""
    bundle = Path(bundle)
    if manifest is None:
        manifest = json.loads((bundle / MANIFEST).read_text())
    problems = []
    entries = cubin_entries(manifest)
    for name, entry in entries.items():
        if names is not None and name not in names and not name.startswith("<"):
            continue
        rel = entry.get("cubin")
        if not isinstance(rel, str) or Path(rel).is_absolute() or ".." in Path(rel).parts:
            problems.append(f"{name}: cubin path {rel!r} is not a path inside the bundle")
            continue
        path = bundle / rel
        if not path.is_file():
            problems.append(f"{name}: {rel} is missing")
        elif entry.get("sha256") and file_sha256(path) != entry["sha256"]:
            problems.append(f"{name}: {rel} does not match its sha256 (the bundle was modified or damaged)")
    return problems

