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


@run_main.command("infer")
@click.argument("image_dir", type=click.Path(path_type=str))
@click.option("--spec", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Network spec (YAML), e.g. network_specs/resnet152.yaml.")
@click.option("--cache", "cache_dir", default="generated", type=click.Path(file_okay=False, path_type=str),
              help="Folder holding <network>/<gpu>/manifest.json, as written by `snn-codegen build`.")
@click.option("--gpu", default="auto", help="GPU name of the build to use; auto: the one matching this device.")
@click.option("--batch", default=32, type=click.IntRange(min=1), help="Images per batch (kernels exist per batch size).")
@click.option("--weights", default=None, metavar="PATH|torchvision",
              help="A torchvision state_dict (.pth), or 'torchvision' for its pretrained weights. "
                   "Without it: seeded random weights, and the labels mean nothing.")
@click.option("--output", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="Also write the predictions to this .csv or .json file.")
@click.option("--top", default=5, type=click.IntRange(1, 1000), help="Labels shown per image.")
@click.option("--trace", is_flag=True, help="Per conv layer: measured sparsity, path taken, kernel, time.")
@click.option("--force", default="auto", type=click.Choice(["auto", "dense", "sparse"]),
              help="auto: per layer and batch from the zero counter; dense: cuDNN everywhere; "
                   "sparse: the sparse kernels on every layer that has them.")
@click.option("--seed", default=0, help="Seed of the random weights (without --weights).")
def infer_cmd(image_dir, spec, cache_dir, gpu, batch, weights, output, top, trace, force, seed):
    """Classify every image under IMAGE_DIR (recursively: JPEG, PNG, BMP, WebP, ...).

    Prints the top labels per image and a summary (images/s, share of conv layers that ran sparse).
    Files that are not images or cannot be decoded are reported by name and skipped; the exit code
    is then 3 (1 for errors). Needs an NVIDIA GPU, PyTorch and the kernel cache for this GPU.
    """
    from runtime.errors import RunError
    from runtime.infer import infer_command
    try:
        code = infer_command(image_dir, spec, cache_dir, gpu, batch, weights, output, top, trace, force, seed)
    except (RunError, SpecError) as e:
        raise click.ClickException(str(e)) from None
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(codegen_main())
