"""`snn-run infer` over several GPUs: data parallel under torchrun, through torch.distributed.

    torchrun --nproc-per-node 4 $(which snn-run) infer PHOTOS --output preds.csv     (or: snn-run infer --devices 4)

Each rank (a process torchrun starts, its GPU the LOCAL_RANK-th) loads the same bundle, classifies its shard of the
folder (`shard`: every WORLD_SIZE-th image from its rank, so the shards differ by at most one image) and sends its
Result to rank 0 (`gather_object` over gloo: only Python objects travel, no tensors, so no NCCL is needed). Rank 0
merges them into one Result in the folder's order (`merge`), prints and writes it as plain `infer` does, with each
rank's throughput and the total. Every skipped file is reported once: files that are not images by rank 0 (every
rank finds the same ones), files that fail to decode by the rank that read them. A rank that fails sends its
reason instead of a Result: rank 0 prints every failed rank's reason, writes nothing and the job exits 1 on every
rank. One progress bar, rank 0's, counts the images of all ranks through the process group's key-value store.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import RunError
from .images import Skipped
from .infer import EXIT_SKIPPED, LayerStats, Result

_DONE, _FINISHED = "snn_infer/images_done", "snn_infer/ranks_finished"


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int

    @classmethod
    def from_env(cls, env=None) -> "World | None":
        """The process's place in a torchrun job (RANK, WORLD_SIZE, LOCAL_RANK), or None outside one."""
        env = os.environ if env is None else env
        if "WORLD_SIZE" not in env:
            return None
        try:
            w = cls(int(env.get("RANK", "0")), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", env.get("RANK", "0"))))
        except ValueError:
            raise RunError(f"RANK={env.get('RANK')!r} WORLD_SIZE={env.get('WORLD_SIZE')!r} LOCAL_RANK="
                           f"{env.get('LOCAL_RANK')!r}: torchrun's variables must be integers") from None
        if not 0 <= w.rank < w.size or w.local_rank < 0:
            raise RunError(f"RANK={w.rank} WORLD_SIZE={w.size} LOCAL_RANK={w.local_rank}: not a place in the job")
        return w


def shard(n: int, rank: int, size: int) -> list[int]:
    """The indices of the images rank `rank` of `size` classifies: every size-th from its rank."""
    return list(range(rank, n, size))


@dataclass
class Part:
    """What a rank sends to rank 0: its Result, or why it has none."""
    rank: int
    device: str = ""
    images: int = 0
    result: Result | None = None
    error: str | None = None


def merge(parts: list[Part], paths: list[Path], found_skipped: list[Skipped]) -> Result:
    """One Result from the ranks' (all succeeded): predictions in the folder's order; the files that are not images
    first (found once, by discovery), then those that failed to decode, in the folder's order; per-layer counts
    added up; the job's seconds those of its slowest rank."""
    results = [p.result for p in sorted(parts, key=lambda p: p.rank)]
    order = {str(p): i for i, p in enumerate(paths)}
    preds = sorted((q for r in results for q in r.predictions), key=lambda q: order[q.path])
    bad = sorted((s for r in results for s in r.skipped), key=lambda s: order.get(s.path, len(order)))
    layers: dict[str, LayerStats] = {}
    for r in results:
        for s in r.layers:
            m = layers.setdefault(s.name, LayerStats(s.index, s.name))
            m.runs += s.runs
            m.sparse_runs += s.sparse_runs
            m.sparsities += s.sparsities
            m.ms += s.ms
            for k, v in s.kernels.items():
                m.kernels[k] = m.kernels.get(k, 0) + v
    warnings = list(dict.fromkeys(r.warning for r in results if r.warning))
    first = results[0]
    return replace(first, predictions=preds, skipped=list(found_skipped) + bad,
                   seconds=max(r.seconds for r in results), forward_seconds=max(r.forward_seconds for r in results),
                   layers=sorted(layers.values(), key=lambda s: s.index), warning="; ".join(warnings) or None)


def rank_lines(parts: list[Part], result: Result) -> list[str]:
    """Each rank's throughput, then the job's."""
    lines = []
    for p in sorted(parts, key=lambda p: p.rank):
        s = p.result.seconds
        lines.append(f"rank {p.rank} on {p.device}: {p.images} images in {s:.2f} s"
                     + (f" ({p.images / s:.1f} images/s)" if s else ""))
    s = result.seconds
    lines.append(f"{len(parts)} GPUs: {sum(p.images for p in parts)} images in {s:.2f} s"
                 + (f" ({sum(p.images for p in parts) / s:.1f} images/s)" if s else ""))
    return lines


def rank_summary(parts: list[Part]) -> list[dict]:
    return [{"rank": p.rank, "device": p.device, "images": p.images, "seconds": round(p.result.seconds, 4),
             "images_per_s": round(p.images / p.result.seconds, 2) if p.result.seconds else None}
            for p in sorted(parts, key=lambda p: p.rank)]


class Progress:
    """One progress bar for the job: every rank adds the images it finished to a counter in the process group's
    store; rank 0 draws the total (after each of its batches, and while it waits for the others)."""

    def __init__(self, store, world: World, bar=None):
        self.store, self.world, self.bar, self.shown = store, world, bar, 0

    def add(self, n: int) -> None:
        if self.store is not None:
            self.store.add(_DONE, n)
        elif self.bar is not None:  # no store: rank 0's own images only
            self.bar.update(n)
            return
        self._draw()

    def _draw(self) -> None:
        if self.bar is not None and self.store is not None:
            total = self.store.add(_DONE, 0)
            self.bar.update(total - self.shown)
            self.shown = total

    def finish(self) -> None:
        """This rank is done (or failed); rank 0 waits here until every rank is."""
        if self.store is None:
            return
        self.store.add(_FINISHED, 1)
        if self.world.rank == 0:
            while self.store.add(_FINISHED, 0) < self.world.size:
                self._draw()
                time.sleep(0.05)
            self._draw()


def _default_store(dist):
    # torch.distributed keeps the store that init_process_group used; it has no public getter.
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None


def run(world: World, paths: list[Path], found_skipped: list[Skipped], make_session, top: int, report,
        label: str = "snn", echo=None) -> int:
    """Classify this rank's shard with make_session() (a Session, or a stand-in with .device.name, .warning and
    .run(paths, skipped, top, progress) -> Result); rank 0 merges and calls report(result, rank_lines, ranks) ->
    exit code. Returns the job's exit code on every rank."""
    import click
    import torch.distributed as dist

    echo = echo or click.echo
    dist.init_process_group("gloo", rank=world.rank, world_size=world.size)
    try:
        mine = shard(len(paths), world.rank, world.size)
        part = Part(world.rank, images=0)
        bar = (click.progressbar(length=len(paths), label=f"{label} on {world.size} GPUs", file=sys.stderr)
               if world.rank == 0 else None)
        if bar is not None:
            bar.__enter__()
        progress = Progress(_default_store(dist), world, bar)
        try:
            session = make_session()
            part.device = session.device.name
            if world.rank == 0 and session.warning:
                echo(f"warning: {session.warning}", err=True)
            part.result = session.run([paths[i] for i in mine], [], top, progress=progress.add)
            part.images = len(part.result.predictions)
        except Exception as e:  # the job fails with this rank's reason, reported by rank 0
            part.error = str(e) if isinstance(e, RunError) or type(e).__name__ == "SpecError" \
                else f"{type(e).__name__}: {e}"
        finally:
            progress.finish()
            if bar is not None:
                bar.__exit__(None, None, None)
        parts = [None] * world.size if world.rank == 0 else None
        dist.gather_object(part, parts, dst=0)
        code = [0]
        if world.rank == 0:
            failed = [p for p in parts if p.error]
            if failed:
                for p in failed:
                    echo(f"rank {p.rank}{f' ({p.device})' if p.device else ''}: {p.error}", err=True)
                echo(f"{len(failed)} of {world.size} ranks failed: nothing written", err=True)
                code[0] = 1
            else:
                result = merge(parts, paths, found_skipped)
                code[0] = report(result, rank_lines(parts, result), rank_summary(parts))
        dist.broadcast_object_list(code, src=0)
        if os.environ.get(EXIT_FILE) and code[0] == EXIT_SKIPPED:  # started by --devices: through the file
            if world.rank == 0:
                Path(os.environ[EXIT_FILE]).write_text(str(EXIT_SKIPPED))
            return 0
        return code[0]
    finally:
        dist.destroy_process_group()


# Set by run_torchrun: rank 0 writes the job's exit code here, and a job that only skipped files exits 0 to
# torchrun (which reports any other code as a failed worker), so that `--devices` still exits 3 for it.
EXIT_FILE = "SNN_INFER_EXIT_FILE"


def run_torchrun(devices: int, argv: list[str]) -> int:
    """`snn-run infer --devices N`: this command line (argv, without --devices) under torchrun; its exit code."""
    import subprocess
    import tempfile
    cmd = torchrun_argv(devices, argv)
    with tempfile.TemporaryDirectory() as tmp:
        code_file = Path(tmp) / "exit"
        try:
            rc = subprocess.call(cmd, env={**os.environ, EXIT_FILE: str(code_file)})
        except OSError as e:
            raise RunError(f"cannot start torchrun ({' '.join(cmd[:3])}): {e.strerror or e}") from None
        recorded = code_file.read_text().strip() if code_file.exists() else ""
    return int(recorded) if rc == 0 and recorded.isdigit() else rc


def torchrun_argv(devices: int, argv: list[str]) -> list[str]:
    """The command that runs this `snn-run` command line under torchrun on `devices` GPUs of this machine
    (argv: the command line without its --devices option)."""
    import shutil
    exe = shutil.which(argv[0]) or argv[0]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={devices}",
            "--no-python", exe, *argv[1:]]
