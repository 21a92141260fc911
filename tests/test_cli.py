"""The CLI surface: console scripts, --help on every command, inspect's table/JSON and its errors."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from snn import cli

ROOT = Path(__file__).resolve().parents[1]
RESNET152 = str(ROOT / "network_specs" / "resnet152.yaml")


def all_commands(group, prefix=()):
    for name, cmd in group.commands.items():
        yield (*prefix, name), cmd
        if isinstance(cmd, click.Group):
            yield from all_commands(cmd, (*prefix, name))


@pytest.mark.parametrize("group", [cli.codegen_main, cli.run_main])
def test_every_command_has_help_with_documented_options(group):
    runner = CliRunner()
    assert runner.invoke(group, ["--help"]).exit_code == 0
    for path, cmd in all_commands(group):
        r = runner.invoke(group, [*path, "--help"])
        assert r.exit_code == 0, (path, r.output)
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                assert p.help, f"{' '.join(path)} {p.opts[0]} has no help text"


def test_console_scripts_are_installed():
    bindir = Path(sys.executable).parent
    for script in ("snn-codegen", "snn-run"):
        exe = shutil.which(script, path=str(bindir)) or shutil.which(script)
        if exe is None:
            pytest.fail(f"{script} is not installed: run the README's set-up command (make setup)")
        r = subprocess.run([exe, "--help"], capture_output=True, text=True)
        assert r.returncode == 0 and "Usage:" in r.stdout


def test_inspect_resnet152_table():
    r = CliRunner().invoke(cli.codegen_main, ["inspect", RESNET152])
    assert r.exit_code == 0, r.output
    assert "155 convolutions" in r.output and "23 distinct conv shapes" in r.output
    assert "layer3.35.conv2" in r.output and "256→256" in r.output
    assert len([l for l in r.output.splitlines() if l.strip()[:1].isdigit()]) == 155


def test_inspect_json_matches_table():
    r = CliRunner().invoke(cli.codegen_main, ["inspect", "--json", RESNET152])
    info = json.loads(r.output)
    assert info["convs"] == 155 and len(info["layers"]) == 155
    assert sum(l["mac_share"] for l in info["layers"]) < 1.0  # the classifier holds the rest
    first = info["layers"][0]
    assert (first["C"], first["N"], first["R"], first["stride"], first["P"]) == (3, 64, 7, [2, 2], 112)


@pytest.mark.parametrize("content, expected", [
    (None, "no such file"),
    ("name: x\n", "field 'input' must be a mapping"),
    ("name: [\n", "YAML syntax error"),
])
def test_inspect_errors_are_one_line(tmp_path, content, expected):
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    r = CliRunner().invoke(cli.codegen_main, ["inspect", str(path)])
    assert r.exit_code == 1
    assert expected in r.output and str(path) in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["resnet50", "resnet50.yaml"])
def test_a_bare_spec_name_is_a_shipped_spec_and_the_file_is_named(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing of that name here
    r = subprocess.run([sys.executable, "-m", "snn.cli", "inspect", name, "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["convs"] == 53
    assert r.stderr.strip() == f"spec: {ROOT / 'network_specs' / 'resnet50.yaml'}"


def test_an_unknown_spec_name_lists_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli.codegen_main, ["inspect", "resnet18"])
    assert r.exit_code == 1
    assert r.output.strip() == ("Error: resnet18: no such file, and no shipped spec of that name (shipped: densenet121, "
                                "densenet169, densenet201, resnet101, resnet152, resnet50, vgg16, vgg19)")
    r = CliRunner().invoke(cli.run_main, ["infer", str(tmp_path), "--spec", "resnet18"])
    assert r.exit_code == 1 and "no shipped spec of that name" in r.output


def test_a_local_file_wins_over_a_shipped_spec(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "resnet50.yaml").write_text((ROOT / "network_specs" / "vgg16.yaml").read_text())
    r = CliRunner().invoke(cli.codegen_main, ["inspect", "resnet50.yaml", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["convs"] == 13
