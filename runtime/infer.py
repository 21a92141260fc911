"""`snn-run infer`: classify a folder of images with a spec, its kernel cache and weights."""
from __future__ import annotations

import csv
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from snn.codegen.spec import load_spec

from . import images
from .errors import RunError


@dataclass
class Prediction:
    path: str
    top: list[tuple[int, str, float]]  # (class index, label, probability)


@dataclass
class LayerStats:
    index: int
    name: str
    runs: int = 0
    sparse_runs: int = 0
    sparsities: list[float] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)
    kernels: dict[str, int] = field(default_factory=dict)


@dataclass
class Result:
    network: str
    predictions: list[Prediction]
    skipped: list[images.Skipped]
    seconds: float
    forward_seconds: float
    layers: list[LayerStats]
    warning: str | None
    manifest: str
    batch: int
    force: str

    @property
    def conv_runs(self) -> int:
        return sum(s.runs for s in self.layers)

    @property
    def sparse_runs(self) -> int:
        return sum(s.sparse_runs for s in self.layers)

    def summary(self) -> dict:
        n = len(self.predictions)
        return {"images": n, "skipped": len(self.skipped), "seconds": round(self.seconds, 4),
                "images_per_s": round(n / self.seconds, 2) if self.seconds else None,
                "forward_images_per_s": round(n / self.forward_seconds, 2) if self.forward_seconds else None,
                "conv_layer_runs": self.conv_runs, "sparse_layer_runs": self.sparse_runs,
                "sparse_share": round(self.sparse_runs / self.conv_runs, 4) if self.conv_runs else 0.0}


def _label(names, i: int) -> str:
    return names[i] if names and 0 <= i < len(names) else f"class {i}"


def _load_batch(pool, paths):
    arrays, ok, skipped = [], [], []

    def one(p):
        try:
            return p, images.preprocess(p), None
        except ValueError as e:
            return p, None, str(e)
        except OSError as e:
            return p, None, f"cannot read ({e.strerror or e})"

    for p, a, err in pool.map(one, paths):
        if err:
            skipped.append(images.Skipped(str(p), err))
        else:
            arrays.append(a)
            ok.append(p)
    return arrays, ok, skipped


class Session:
    """An Engine (runtime/engine.py) for the bundle of this spec and GPU, and a folder to classify."""

    def __init__(self, spec: str, cache_dir: str, gpu: str, batch: int | None, weights_arg: str | None,
                 force: str, trace: bool, seed: int = 0, graph: bool = True, tuning: str | None = None,
                 precision: str | None = None):
        from . import manifest
        from .cuda import Device
        from .engine import Engine
        if batch is not None and batch < 1:
            raise RunError(f"--batch must be at least 1, got {batch}")
        net = load_spec(spec)
        dev = Device()
        path = manifest.locate(cache_dir, net, spec, gpu, batch or 1, dev.name, dev.compute_capability)
        self.engine = Engine(path.parent, weights_arg, batch, graph, tuning, force, trace, seed, spec=spec,
                             device=dev, precision=precision)
        e = self.engine
        self.net, self.device, self.cache, self.executor, self.graph = e.net, e.device, e.cache, e.executor, e.graph
        self.class_names, self.warning, self.batch, self.force = e.class_names, e.warning, e.batch, force
        self.precision = e.precision  # the bundle's: the one asked for, if any, is the same

    torch_device = "cuda"
    graph = None  # a runtime.graph.GraphRunner with --graph

    def forward(self, x):
        return self.graph.forward(x) if self.graph is not None else self.executor.forward(x)

    def run(self, paths: list[Path], skipped: list[images.Skipped], top: int, progress=None) -> Result:
        import torch
        stats: dict[str, LayerStats] = {c.name: LayerStats(c.index, c.name) for c in self.net.convs}
        preds: list[Prediction] = []
        skipped = list(skipped)
        forward_s = 0.0
        t_start = time.perf_counter()
        chunks = [paths[i:i + self.batch] for i in range(0, len(paths), self.batch)]
        with ThreadPoolExecutor(max_workers=8) as pool, ThreadPoolExecutor(max_workers=1) as ahead:
            # the next batch is decoded while the GPU works on this one
            pending = ahead.submit(_load_batch, pool, chunks[0]) if chunks else None
            for k, chunk in enumerate(chunks):
                arrays, ok, bad = pending.result()
                if k + 1 < len(chunks):
                    pending = ahead.submit(_load_batch, pool, chunks[k + 1])
                skipped.extend(bad)
                if arrays:
                    n = len(arrays)
                    bucket = self.cache.bucket(n, self.batch)
                    # a short last batch is padded with its own images: the kernels are built per batch
                    # size, and real images keep the measured sparsity representative
                    arrays = arrays + [arrays[i % n] for i in range(bucket - n)]
                    x = torch.from_numpy(np.stack(arrays)).to(self.torch_device)
                    if self.torch_device == "cuda":
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    with torch.inference_mode():
                        logits = self.forward(x)[:n]
                        probs = torch.softmax(logits.float(), dim=1)
                        p, idx = probs.topk(min(top, probs.shape[1]), dim=1)
                    p, idx = p.cpu().tolist(), idx.cpu().tolist()
                    forward_s += time.perf_counter() - t0
                    for path, pi, ii in zip(ok, p, idx):
                        preds.append(Prediction(str(path), [(i, _label(self.class_names, i), q) for i, q in zip(ii, pi)]))
                    for t in self.executor.last_trace:
                        s = stats[t.name]
                        s.runs += 1
                        if t.sparsity is not None:
                            s.sparsities.append(t.sparsity)
                        if t.ms is not None:
                            s.ms.append(t.ms)
                        if t.path == "sparse":
                            s.sparse_runs += 1
                            s.kernels[t.kernel] = s.kernels.get(t.kernel, 0) + 1
                if progress:
                    progress(len(chunk))
        seconds = time.perf_counter() - t_start
        if self.graph is not None and self.graph.notes:  # layers a SWITCH body could not hold: dense in the graph
            self.warning = "; ".join([w for w in (self.warning,) if w] + self.graph.notes)
        return Result(self.net.name, preds, skipped, seconds, forward_s,
                      sorted(stats.values(), key=lambda s: s.index), self.warning, str(self.cache.path),
                      self.batch, self.force)


def format_predictions(result: Result) -> list[str]:
    return [f"{p.path}: " + ", ".join(f"{label} ({q:.1%})" for _, label, q in p.top) for p in result.predictions]


def format_trace(result: Result) -> list[str]:
    lines = [f"{'#':>4}  {'layer':<48} {'sparsity':>8}  {'sparse':>7}  {'ms':>8}  kernel"]
    for s in result.layers:
        sp = f"{np.mean(s.sparsities):.3f}" if s.sparsities else "-"
        ms = f"{np.mean(s.ms):.3f}" if s.ms else "-"
        kern = max(s.kernels, key=s.kernels.get) if s.kernels else "cudnn"
        lines.append(f"{s.index:>4}  {s.name:<48} {sp:>8}  {s.sparse_runs:>3}/{s.runs:<3}  {ms:>8}  {kern}")
    return lines


def format_summary(result: Result) -> str:
    s = result.summary()
    ips = f"{s['images_per_s']:.1f} images/s" if s["images_per_s"] else "no images"
    fwd = f", forward pass {s['forward_images_per_s']:.1f} images/s" if s["forward_images_per_s"] else ""
    return (f"{result.network}: {s['images']} images in {s['seconds']:.2f} s ({ips}{fwd}); "
            f"{s['sparse_layer_runs']} of {s['conv_layer_runs']} conv layer runs sparse "
            f"({s['sparse_share']:.1%}); {s['skipped']} file(s) skipped")


def write_output(result: Result, path: str, top: int, ranks: list[dict] | None = None) -> None:
    """The predictions as CSV or JSON (ranks: each GPU's share of a torchrun job, JSON only), written to a
    temporary file first: an interrupted write leaves no half file."""
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp")
    _write(result, out.suffix.lower(), tmp, top, ranks)
    os.replace(tmp, out)


def _write(result: Result, suffix: str, out: Path, top: int, ranks: list[dict] | None) -> None:
    if suffix == ".json":
        doc = {"network": result.network, "manifest": result.manifest, "batch": result.batch,
               "force": result.force, "warning": result.warning, "summary": result.summary(),
               **({"ranks": ranks} if ranks is not None else {}),
               "images": [{"path": p.path, "top": [{"index": i, "label": l, "probability": q} for i, l, q in p.top]}
                          for p in result.predictions],
               "skipped": [asdict(s) for s in result.skipped],
               "layers": [{"index": s.index, "name": s.name, "runs": s.runs, "sparse_runs": s.sparse_runs,
                           "mean_sparsity": float(np.mean(s.sparsities)) if s.sparsities else None,
                           "kernels": s.kernels} for s in result.layers]}
        text = json.dumps(doc, indent=1)
        out.write_text(text + "\n")
    elif suffix == ".csv":
        with out.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["path"] + [f"{c}{k}" for k in range(1, top + 1) for c in ("label", "index", "prob")])
            for p in result.predictions:
                w.writerow([p.path] + [x for i, l, q in p.top for x in (l, i, f"{q:.6f}")])
    else:
        raise RunError(f"--output {out}: unknown format, use a .csv or .json file name")


OUTPUT_SUFFIXES = (".csv", ".json")
EXIT_SKIPPED = 3  # ran, but some files were not images or could not be read


def time_batch(session: Session, paths: list[Path], reps: int = 20) -> tuple[float, int]:
    """(median ms, batch) of one forward pass over the first batch of decodable images (padded to the bundle's
    batch size as `run` does), after a warm-up that captures the graph: the steady state, not the first call."""
    import statistics

    import torch

    from .measure.timing import wall_times_ms
    with ThreadPoolExecutor(max_workers=8) as pool:
        arrays, _, _ = _load_batch(pool, paths[:session.batch])
    if not arrays:
        raise RunError("no decodable image to time")
    b = session.cache.bucket(len(arrays), session.batch)
    x = torch.from_numpy(np.stack([arrays[i % len(arrays)] for i in range(b)])).to(session.torch_device)
    with torch.inference_mode():
        out = wall_times_ms(session.forward, [x], reps, 3, torch.cuda.synchronize)
    return statistics.median(out), b


def compare_dense(session: Session, args: tuple, paths: list[Path]) -> str:
    """One line: this session's forward time against the same bundle with every conv dense (cuDNN FP32; the image's
    conv on the bundle's direct kernel either way)."""
    ms, b = time_batch(session, paths)
    dense = Session(*args[:5], "dense", False, *args[7:])
    ms_d, _ = time_batch(dense, paths)
    return (f"batch of {b}: snn {ms:.2f} ms per forward pass, dense path (cuDNN FP32) {ms_d:.2f} ms: "
            f"{ms_d / ms:.2f}x (median of 20, after warm-up)")


def infer_command(image_dir: str, spec: str, cache_dir: str, gpu: str, batch: int | None, weights: str | None,
                  output: str | None, top: int, trace: bool, force: str, seed: int = 0, graph: bool = True,
                  tuning: str | None = None, compare: bool = False, precision: str | None = None) -> int:
    """What `snn-run infer` does; returns the exit code. User mistakes raise RunError/SpecError. Under torchrun
    (WORLD_SIZE set) each rank classifies its shard and rank 0 reports (runtime/distributed.py). precision:
    None runs the bundle in the precision it was built for; another one than the bundle's is refused."""
    import click

    from . import distributed
    world = distributed.World.from_env()
    if world is not None and compare:
        raise RunError("--compare-dense times one GPU: run it without torchrun")
    if precision not in (None, "fp32") and compare:
        raise RunError(f"--compare-dense compares with cuDNN FP32: run it with --precision fp32, not {precision}")
    if compare:  # an FP32 run: a 16-bit bundle is refused at load, naming the fp32 rebuild
        precision = "fp32"
    if output and Path(output).suffix.lower() not in OUTPUT_SUFFIXES:
        raise RunError(f"--output {output}: unknown format, use a .csv or .json file name")
    load_spec(spec)  # spec mistakes first: they need neither torch nor a GPU
    try:
        paths, skipped = images.discover(image_dir)
    except FileNotFoundError as e:
        raise RunError(str(e)) from None
    if not paths:
        raise RunError(f"{image_dir}: no image files found (looked for {', '.join(sorted(images.IMAGE_SUFFIXES))})")
    from .cuda import import_torch, require_gpu
    require_gpu()
    torch = import_torch()
    images._pil()
    args = (spec, cache_dir, gpu, batch, weights, force, trace, seed, graph, tuning, precision)

    def report(result: Result, rank_lines=(), ranks=None) -> int:
        for line in format_predictions(result):
            click.echo(line)
        if trace:
            click.echo("")
            for line in format_trace(result):
                click.echo(line)
        for s in result.skipped:
            click.echo(f"skipped {s.path}: {s.reason}", err=True)
        click.echo(format_summary(result))
        for line in rank_lines:
            click.echo(line)
        if compare:
            click.echo(compare_dense(session, args, paths))
        if output:
            write_output(result, output, top, ranks)
            click.echo(f"wrote {output}")
        return EXIT_SKIPPED if result.skipped else 0

    if world is not None:
        def make_session():
            n = torch.cuda.device_count()
            if world.local_rank >= n:
                raise RunError(f"LOCAL_RANK {world.local_rank} has no GPU: {n} visible on this machine")
            torch.cuda.set_device(world.local_rank)
            return Session(*args)
        return distributed.run(world, paths, skipped, make_session, top, report, label=load_spec(spec).name)
    session = Session(*args)
    if session.warning:
        click.echo(f"warning: {session.warning}", err=True)
    label = f"{session.net.name} on {session.device.name}"
    if session.precision != "fp32":  # the bundle's precision, perhaps not asked for: say it
        label += f" in {session.precision}"
    with click.progressbar(length=len(paths), label=label, file=sys.stderr) as bar:
        result = session.run(paths, skipped, top, progress=bar.update)
    return report(result)
