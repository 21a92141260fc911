"""Command-line entry points: `snn-codegen` (offline, no GPU) and `snn-run` (on the GPU).

Thin by design: each command parses its options and calls into codegen/ or runtime/. User mistakes
surface as click.ClickException: one line, exit code 1, no traceback.
"""
from __future__ import annotations

import functools
import json
import sys

import click

from codegen.spec import SpecError, load_spec


def user_errors(fn):
    """Turn the project's user-facing exceptions into one clean line and a non-zero exit."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpecError as e:
            raise click.ClickException(str(e)) from None
    return wrapper


SPEC = click.argument("spec", type=click.Path(dir_okay=False, path_type=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(package_name="snn")
def codegen_main():
    """Offline half of snn: read a YAML network spec, plan tile sizes with the cost model,
    render CUDA sources and compile them into an ahead-of-time cubin cache. Needs no GPU."""


@codegen_main.command("inspect")
@SPEC
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@user_errors
def inspect_cmd(spec, as_json):
    """Show the convolution layers of SPEC: shapes, MACs and share of the network's MACs."""
    from codegen.inspect import format_table, summary
    net = load_spec(spec)
    info = summary(net)
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    click.echo(format_table(info["layers"]))
    click.echo(f"\n{net.name}: {info['convs']} convolutions, {info['distinct_conv_shapes']} distinct conv shapes, "
               f"{info['macs'] / 1e9:.2f} GMACs, {info['params'] / 1e6:.2f} M parameters")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(package_name="snn")
def run_main():
    """Online half of snn: load the cubin cache with cuda-python and run networks on the GPU,
    choosing per layer between cuDNN (dense) and the generated sparse kernels."""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(codegen_main())
