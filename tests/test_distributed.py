"""`snn-run infer` under torchrun (runtime/distributed.py): sharding, the merge in folder order, skipped files
reported once, one progress count, a failing rank; the gloo tests start real ranks (tests/dist_worker.py, a
stand-in session instead of a GPU) the way torchrun does, through environment variables."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from snn.cli import _without_option
from snn.runtime import distributed
from snn.runtime.distributed import Part, Progress, World, merge, shard
from snn.runtime.errors import RunError
from snn.runtime.images import Skipped
from snn.runtime.infer import LayerStats, Prediction, Result

WORKER = Path(__file__).with_name("dist_worker.py")


def test_world_from_env():
    assert World.from_env({}) is None
    assert World.from_env({"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "1"}) == World(2, 4, 1)
    assert World.from_env({"WORLD_SIZE": "1"}) == World(0, 1, 0)
    with pytest.raises(RunError, match="must be integers"):
        World.from_env({"WORLD_SIZE": "two", "RANK": "0"})
    with pytest.raises(RunError, match="not a place in the job"):
        World.from_env({"WORLD_SIZE": "2", "RANK": "2"})


@pytest.mark.parametrize("n,size", [(0, 3), (1, 4), (10, 3), (12, 4), (7, 1)])
def test_shards_cover_every_image_once_and_balance(n, size):
    shards = [shard(n, r, size) for r in range(size)]
    assert sorted(i for s in shards for i in s) == list(range(n))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert shards == [shard(n, r, size) for r in range(size)]  # deterministic


def _result(paths, bad=(), seconds=1.0, warning=None):
    preds = [Prediction(str(p), [(1, "one", 0.9)]) for p in paths]
    layers = [LayerStats(0, "c1", runs=len(paths), sparse_runs=1, sparsities=[0.5], kernels={"k": 1}),
              LayerStats(1, "c2", runs=len(paths))]
    return Result("net", preds, [Skipped(str(b), "cannot decode") for b in bad], seconds, seconds / 2, layers,
                  warning, "m.json", 2, "auto")


def test_merge_puts_predictions_in_folder_order_and_reports_each_skip_once():
    paths = [Path(f"d/{c}.png") for c in "abcdefg"]
    found = [Skipped("d/z.txt", "not an image file (unknown extension)")]
    # rank 0: a, d, g (g fails to decode); rank 1: b, e; rank 2: c, f (c fails)
    parts = [Part(1, "g1", 2, _result([paths[1], paths[4]], seconds=2.0)),
             Part(0, "g0", 2, _result([paths[0], paths[3]], bad=[paths[6]], warning="w")),
             Part(2, "g2", 1, _result([paths[5]], bad=[paths[2]], seconds=3.0, warning="w"))]
    m = merge(parts, paths, found)
    assert [p.path for p in m.predictions] == [str(paths[i]) for i in (0, 1, 3, 4, 5)]
    assert [s.path for s in m.skipped] == ["d/z.txt", str(paths[2]), str(paths[6])]
    assert m.seconds == 3.0 and m.warning == "w"
    assert [(s.name, s.runs, s.sparse_runs, s.kernels) for s in m.layers] == [("c1", 5, 3, {"k": 3}), ("c2", 5, 0, {})]
    lines = distributed.rank_lines(parts, m)
    assert lines[0].startswith("rank 0 on g0: 2 images in 1.00 s (2.0 images/s)")
    assert lines[-1] == "3 GPUs: 5 images in 3.00 s (1.7 images/s)"
    assert [r["rank"] for r in distributed.rank_summary(parts)] == [0, 1, 2]


class _Store:
    def __init__(self):
        self.v = {}

    def add(self, k, n):
        self.v[k] = self.v.get(k, 0) + n
        return self.v[k]


class _Bar:
    def __init__(self):
        self.n = 0

    def update(self, n):
        self.n += n


def test_one_progress_count_for_the_whole_job():
    store, bar = _Store(), _Bar()
    others = [Progress(store, World(r, 3, r)) for r in (1, 2)]
    zero = Progress(store, World(0, 3, 0), bar)
    zero.add(2)
    others[0].add(3)
    others[1].add(4)
    for p in others:
        p.finish()
    zero.finish()   # returns once every rank has finished, the bar at the job's total
    assert bar.n == 9
    alone = _Bar()
    Progress(None, World(0, 2, 0), alone).add(5)   # no store: rank 0 counts its own
    assert alone.n == 5


def test_devices_option_relaunches_under_torchrun():
    assert _without_option(["snn-run", "infer", "--devices", "4", "d", "--devices=2", "--top", "3"], "--devices") == \
        ["snn-run", "infer", "d", "--top", "3"]
    argv = distributed.torchrun_argv(4, ["/bin/snn-run", "infer", "d"])
    assert argv[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4"]
    assert argv[5:] == ["--no-python", "/bin/snn-run", "infer", "d"]


# ---------------------------------------------------------------- real ranks over gloo

def _gloo():
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch without the gloo backend")


def _folder(tmp_path):
    d = tmp_path / "photos"
    (d / "sub").mkdir(parents=True)
    for i in range(9):
        (d / ("sub" if i % 4 == 0 else ".") / f"img{i}.png").write_bytes(b"x")
    (d / "broken5.png").write_bytes(b"x")
    (d / "notes.txt").write_text("no image")
    return d


def test_devices_exit_code_comes_through_torchrun(monkeypatch, tmp_path):
    """torchrun reports any non-zero worker as failed: under --devices a job that only skipped files exits 0 to it
    and rank 0 leaves 3 in the exit file, which run_torchrun returns; other codes pass through."""
    for script, want in (("open(os.environ['SNN_INFER_EXIT_FILE'], 'w').write('3')", 3), ("sys.exit(1)", 1), ("", 0)):
        monkeypatch.setattr(distributed, "torchrun_argv",
                            lambda n, argv, s=script: [sys.executable, "-c", f"import os, sys; {s}"])
        assert distributed.run_torchrun(2, ["snn-run", "infer"]) == want


def _job(folder, out, world, fail=-1, env_extra=None):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(world),
                   LOCAL_RANK=str(r), **(env_extra or {}))
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(folder), str(out), str(fail)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    codes = [p.wait(timeout=120) for p in procs]
    errs = [p.stderr.read() for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    ranks = [json.loads(Path(f"{out}.rank{r}.txt").read_text()) for r in range(world)]
    assert codes == [r["code"] for r in ranks], errs
    return codes, ranks


def test_three_ranks_merge_into_the_folder_order_of_one(tmp_path):
    _gloo()
    folder = _folder(tmp_path)
    codes3, ranks3 = _job(folder, tmp_path / "three.json", 3)
    codes1, _ = _job(folder, tmp_path / "one.json", 1)
    assert codes3 == [3, 3, 3] and codes1 == [3]   # skipped files: exit 3 on every rank
    three, one = (json.loads((tmp_path / f).read_text()) for f in ("three.json", "one.json"))
    assert three["images"] == one["images"] and len(three["images"]) == 9
    assert [i["path"] for i in three["images"]] == sorted((i["path"] for i in three["images"]),
                                                          key=lambda p: (Path(p).parent != folder, p))
    assert three["skipped"] == one["skipped"] == [
        {"path": str(folder / "notes.txt"), "reason": "not an image file (unknown extension)"},
        {"path": str(folder / "broken5.png"), "reason": "cannot decode"}]
    assert [(r["rank"], r["images"]) for r in three["ranks"]] == [(0, 3), (1, 3), (2, 3)]
    assert three["layers"][0]["runs"] == 10
    exit_file = tmp_path / "exit"
    codes, _ = _job(folder, tmp_path / "again.json", 2, env_extra={distributed.EXIT_FILE: str(exit_file)})
    assert codes == [0, 0] and exit_file.read_text() == "3"   # as under --devices
    printed = ranks3[0]["printed"]
    assert "3 GPUs: 9 images in 0.50 s (18.0 images/s)" in printed
    assert sum(line.startswith("skipped ") for line in printed) == 2
    assert ranks3[1]["printed"] == ranks3[2]["printed"] == []   # only rank 0 speaks


def test_a_failing_rank_fails_the_job_and_nothing_is_written(tmp_path):
    _gloo()
    folder = _folder(tmp_path)
    codes, ranks = _job(folder, tmp_path / "out.json", 3, fail=1)
    assert codes == [1, 1, 1]
    assert not (tmp_path / "out.json").exists() and not list(tmp_path.glob(".out.json*"))
    assert ranks[0]["printed"] == ["err rank 1: RuntimeError: stand-in rank 1 cannot load its bundle",
                                   "err 1 of 3 ranks failed: nothing written"]
