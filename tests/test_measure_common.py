"""measure.common without a GPU or torch: parsing the CLI's lists (and their one-line errors), the small
statistics, grouping conv layers by shape; and no measure module imports torch when imported."""
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from snn import cli
from snn.codegen.spec import load_spec
from snn.runtime.errors import RunError
from snn.runtime.measure import common

ROOT = Path(__file__).resolve().parents[1]
CPU_MODULES = [f"snn.runtime.measure.{m}" for m in ("common", "timing", "inputs", "profiles", "layer", "e2e",
                                                    "summary", "plots", "report")] + ["snn.runtime.calibrate"]


def test_no_torch_imported_by_the_measure_modules():
    # a fresh interpreter: this one may have torch loaded by another test
    code = "import sys\n" + "".join(f"import {m}\n" for m in CPU_MODULES) + "assert 'torch' not in sys.modules\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_parse_batches_and_levels():
    assert common.parse_batches("32,1,8,8") == [1, 8, 32]
    for bad in ("", "0", "a,1", "-1"):
        with pytest.raises(RunError, match="--batch"):
            common.parse_batches(bad)
    assert common.parse_levels("0.9,0.5,0.7") == [0.5, 0.7, 0.9]
    assert common.parse_levels("0.4:0.5:0.05") == [0.4, 0.45, 0.5]
    with pytest.raises(RunError):
        common.parse_levels("1.5")


def test_lowest_winning_level_needs_wins_all_the_way_up():
    # sparse wins at 0.5, loses at 0.6, wins from 0.7: the threshold is 0.7, not 0.5
    pairs = {0.5: (9, 10), 0.6: (11, 10), 0.7: (8, 10), 0.8: (6, 10), 0.9: (4, 10)}
    assert common.lowest_winning_level(pairs) == 0.7
    assert common.lowest_winning_level({0.5: (5, 10), 0.9: (2, 10)}) == 0.5
    assert common.lowest_winning_level({0.5: (5, 10), 0.9: (20, 10)}) is None
    assert common.lowest_winning_level({0.5: (10, 10)}) is None  # a tie is no win


def test_geomean_median_stats():
    assert common.geomean([1, 4]) == pytest.approx(2.0)
    assert common.geomean([None, 0, 2.0]) == pytest.approx(2.0)
    assert common.geomean([]) is None
    s = common.stats([3, 1, 2, 100])
    assert s["median_us"] == 2.5 and s["n"] == 4 and s["times_us"] == [3, 1, 2, 100]


def test_distinct_shapes_and_sampling_on_densenet():
    net = load_spec(ROOT / "network_specs/densenet201.yaml")
    groups = common.distinct_shapes(net, [c.name for c in net.convs])
    assert sum(len(g["layers"]) for g in groups) == len(net.convs)
    assert len({g["shape"] for g in groups}) == len(groups)
    three = [g for g in groups if g["shape"].R == 3]
    picked = common.sample_groups(groups, 20)
    assert len(picked) == 20
    assert all(g in picked for g in three)  # every 3x3 shape is kept
    assert [g for g in groups if g in picked] == picked  # network order kept
    assert common.sample_groups(groups, None) == groups


@pytest.mark.parametrize("args, msg", [
    (["bench", "layers", "--spec", "network_specs/vgg19.yaml", "--batch", "0"], "--batch"),
    (["bench", "layers", "--spec", "network_specs/vgg19.yaml", "--levels", "2"], "level"),
    (["bench", "e2e", "--spec", "network_specs/vgg19.yaml", "--sparsity-profile", "1.2"], "--sparsity-profile"),
    (["calibrate", "--spec", "network_specs/vgg19.yaml", "--batch", "x"], "--batch"),
])
def test_cli_user_errors_are_one_line(args, msg):
    r = CliRunner().invoke(cli.run_main, args)
    assert r.exit_code == 1
    assert msg in r.output and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
