"""One rank of a stand-in `snn-run infer` job (tests/test_distributed.py starts WORLD_SIZE of these, as torchrun
would): runtime.distributed.run over gloo with a session that classifies by file name, not a GPU.

    python dist_worker.py FOLDER OUT.json [FAIL_RANK]
Every rank writes its exit code and what it printed to OUT.rank<R>.txt; rank 0's report writes OUT.json.
"""
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from snn.runtime import distributed, images
from snn.runtime.infer import LayerStats, Prediction, Result, write_output


class StandIn:
    """Classifies an image by its file name (class = the number in it); a file named broken* fails to decode.
    Two images a batch; reports its progress per batch, like Session.run."""

    def __init__(self, rank: int, fail: bool):
        if fail:
            raise RuntimeError(f"stand-in rank {rank} cannot load its bundle")
        self.device = SimpleNamespace(name=f"fake-gpu-{rank}")
        self.warning = None

    def run(self, paths, skipped, top, progress=None):
        preds, bad = [], list(skipped)
        for i in range(0, len(paths), 2):
            for p in paths[i:i + 2]:
                if p.name.startswith("broken"):
                    bad.append(images.Skipped(str(p), "cannot decode"))
                else:
                    k = int("".join(ch for ch in p.stem if ch.isdigit()) or 0)
                    preds.append(Prediction(str(p), [(k, f"class {k}", 1.0)]))
            if progress:
                progress(len(paths[i:i + 2]))
        layer = LayerStats(0, "conv1", runs=len(paths), sparse_runs=len(paths) // 2, kernels={"k": len(paths) // 2})
        return Result("standin", preds, bad, 0.5, 0.25, [layer], None, "manifest.json", 2, "auto")


def main():
    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    fail = int(sys.argv[3]) if len(sys.argv) > 3 else -1
    world = distributed.World.from_env()
    paths, skipped = images.discover(folder)
    printed = []

    def echo(msg="", err=False):
        printed.append(("err " if err else "") + msg)

    def report(result, rank_lines, ranks):
        printed.extend(rank_lines)
        printed.extend(f"skipped {s.path}: {s.reason}" for s in result.skipped)
        write_output(result, str(out), 1, ranks)
        return 3 if result.skipped else 0

    code = distributed.run(world, paths, skipped, lambda: StandIn(world.rank, world.rank == fail), 1, report,
                           echo=echo)
    Path(f"{out}.rank{world.rank}.txt").write_text(json.dumps({"code": code, "printed": printed}))
    return code


if __name__ == "__main__":
    sys.exit(main())
