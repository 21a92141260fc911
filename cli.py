"""Command-line entry points: `snn-codegen` (offline, no GPU) and `snn-run` (on the GPU).

Thin by design: each command parses its options and calls into codegen/ or runtime/. User mistakes
surface as click.ClickException: one line, exit code 1, no traceback.
"""
from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import click

from snn.codegen.bundle import PRECISIONS
from snn.codegen.errors import UserError
from snn.codegen.spec import SpecError, load_spec


def user_errors(fn):
    """Turn the project's user-facing exceptions into one clean line and a non-zero exit."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (SpecError, UserError) as e:
            raise click.ClickException(str(e)) from None
    return wrapper


def _resolve_spec(ctx, param, value):
    """A bare name (resnet152, resnet152.yaml) names a spec that ships with snn; say which file that is."""
    if value is None:
        return value
    from snn.codegen.spec import resolve_spec
    try:
        path = resolve_spec(value)
    except SpecError as e:
        raise click.ClickException(str(e)) from None
    if str(path) != value:
        click.echo(f"spec: {path}", err=True)
    return str(path)


SPEC = click.argument("spec", type=click.Path(dir_okay=False, path_type=str), callback=_resolve_spec)


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
    from snn.codegen.inspect import format_table, summary
    net = load_spec(spec)
    info = summary(net)
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    click.echo(format_table(info["layers"]))
    click.echo(f"\n{net.name}: {info['convs']} convolutions ({info['sparse_convs']} can run sparse), "
               f"{info['distinct_conv_shapes']} distinct conv shapes, "
               f"{info['macs'] / 1e9:.2f} GMACs, {info['params'] / 1e6:.2f} M parameters")


@codegen_main.command("plan")
@SPEC
@click.option("--gpu", "gpu_name", required=True, metavar="NAME",
              help="Target GPU: a name from codegen/gpus (v100, rtx2080ti, a100, h100, h200), a path to a YAML "
                   "file with the same fields, or 'auto' to ask the installed GPU through cuda-python.")
@click.option("--batch", type=click.IntRange(min=1), default=1, help="Images per batch (B).")
@click.option("--levels", default="0.4:0.9:0.05",
              help="Sparsity levels to plan for: start:stop:step (stop included) or a comma list like 0.5,0.7.")
@click.option("--layer", "layers", multiple=True, metavar="NAME",
              help="Plan only this conv layer (node name as in `snn-codegen inspect`); repeat for several.")
@click.option("--model", type=click.Choice(["snn", "pipes", "paper"]), default="snn",
              help="Cost model for stage 3: 'snn' (per-channel latency vs issue share, fitted to H100 timings), "
                   "'pipes' (the model before the fit: FP32 and shared-memory pipes per block) or 'paper' "
                   "(Eqs. 3-9 of the cuSNN paper, known slips fixed).")
@click.option("--explain", is_flag=True,
              help="Show, per distinct shape and level, how many configs survived each stage and the best "
                   "candidates with their numbers (use with --layer to keep it short).")
@click.option("--top", type=click.IntRange(min=1), default=5, help="Candidates shown per level with --explain.")
@click.option("--json", "as_json", is_flag=True, help="Print the full plan (and the --explain data) as JSON.")
@click.option("--candidates", type=click.IntRange(min=1, max=8), default=1,
              help="Also plan the model's next best configs per level, as `snn-codegen build --candidates` does.")
@user_errors
def plan_cmd(spec, gpu_name, batch, levels, layers, model, explain, top, as_json, candidates):
    """Choose a kernel configuration for every conv layer of SPEC at every sparsity level, with the
    three-stage cost model: occupancy >= 50 %, least data movement (top third), least predicted
    time by waves. Identical layer shapes are planned once. See docs/costmodel.md."""
    from snn.codegen.gpu import load_gpu
    from snn.codegen.plan import explain_plan, format_explain, format_plan, parse_levels, plan_network
    net = load_spec(spec)
    gpu = load_gpu(gpu_name)
    plan = plan_network(net, gpu, batch, parse_levels(levels), model, layers or None, candidates)
    explained = explain_plan(plan, top) if explain else []
    if as_json:
        out = plan.to_dict()
        out["gpu_description"] = gpu.to_dict()
        if explain:
            out["explain"] = explained
        click.echo(json.dumps(out, indent=1))
        return
    for entry in explained:
        for info in entry["levels"].values():
            click.echo(format_explain(info, entry["layers"]))
        click.echo()
    click.echo(format_plan(plan))


@codegen_main.command("build")
@SPEC
@click.option("--gpu", default="h100", metavar="NAME|auto",
              help="Target GPU (a file of codegen/gpus/), or auto to ask the local driver.")
@click.option("--arch", default=None, metavar="sm_XX", help="nvcc arch; default: the GPU's.")
@click.option("--batch", "batch", default="1", metavar="B[,B...]", help="Batch sizes to build kernels for.")
@click.option("--levels", default="0.4:0.9:0.05", metavar="START:STOP:STEP",
              help="Sparsity levels to plan (stop included), or a comma list.")
@click.option("--out", default="generated", type=click.Path(file_okay=False, path_type=str),
              help="The bundle lands in OUT/<network>/<gpu>/.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Parallel nvcc jobs (make -j); default: the number of CPUs.")
@click.option("--rebuild", is_flag=True, help="Recompile every kernel, ignoring the compiler cache.")
@click.option("--model", type=click.Choice(["snn", "pipes", "paper"]), default="snn",
              help="Stage-3 cost model that picks the configs (docs/costmodel.md); recorded in the manifest.")
@click.option("--candidates", type=click.IntRange(min=1, max=8), default=1,
              help="Kernels per layer and level: the model's pick and its next best configs (one of each other "
                   "kernel family first); `snn-run calibrate` measures them on real activations and keeps the fastest.")
@click.option("--clusters", is_flag=True,
              help="Sum channel splits of up to 8 blocks in thread-block clusters (sm_90+) instead of atomics and "
                   "an epilogue launch; off by default: measured slower on the H100 (docs/kernels.md).")
@click.option("--tf32x3", is_flag=True,
              help="Also offer the dense FP32 kernel in 3xTF32 tiles (sm_80+): products on the tensor cores, each "
                   "operand split into two TF32 parts, at FP32's accuracy but not its rounding; `snn-run calibrate` "
                   "keeps them where they measure faster (H200: ResNet-152 1.40 -> 1.33 ms at batch 1, DenseNet-201 "
                   "no faster; docs/kernels.md). Off by default: the bundle stays exact FP32.")
@click.option("--precision", default="fp32", type=click.Choice(PRECISIONS),
              help="fp32: exact, the sparse kernels; bf16 / fp16: every conv dense on cuDNN's tensor cores (16-bit "
                   "sparse kernels measured slower), so nothing is compiled and no nvcc is needed. Recorded in the "
                   "manifest: `snn-run` runs the bundle in it.")
@user_errors
def build_cmd(spec, gpu, arch, batch, levels, out, jobs, rebuild, model, candidates, clusters, tf32x3, precision):
    """Plan, render and compile the sparse kernels of SPEC into a relocatable bundle
    OUT/<network>/<gpu>/ (manifest.json, cubins/, src/, spec.yaml): copy that folder to the GPU machine
    and it runs there.

    nvcc runs through the Makefile's cubins rule, in parallel, on the misses of the compiler cache
    ($SNN_CACHE_DIR, default ~/.cache/snn/cubins). The build fails if any kernel has a stack frame or
    spills. Needs nvcc (set NVCC=/path to choose one), no GPU."""
    import signal

    from snn.codegen import compile as nvcc
    from snn.codegen.build import build_spec

    def bar(n):
        return click.progressbar(length=n, label=f"nvcc: {n} kernel(s)", show_pos=True)

    def interrupted(signum, frame):  # Ctrl-C, and SIGTERM alike: stop, keep what is compiled
        nvcc.STOP.set()
        raise KeyboardInterrupt
    previous = {s: signal.signal(s, interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = build_spec(spec, gpu, batch, levels, out, jobs=jobs, rebuild=rebuild, arch=arch, model=model,
                            candidates=candidates, clusters=clusters, tf32x3=tf32x3, progress_factory=bar,
                            precision=precision)
    except KeyboardInterrupt:
        click.echo("interrupted: the kernels compiled so far are in the compiler cache; the same command "
                   "continues from there", err=True)
        sys.exit(130)
    finally:
        nvcc.STOP.clear()
        for s, handler in previous.items():
            signal.signal(s, handler)
    click.echo(result.summary())


@codegen_main.command("import")
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--out", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="Spec to write; default: <model stem or name>.yaml in the current folder.")
@click.option("--weights-out", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="State_dict (.pth) to write the model's weights to, for `snn-run ... --weights`. An ONNX "
                   "model: default <model stem>.pth in the current folder (skipped, with a note, where PyTorch "
                   "is missing). A torchvision name: written only when given (seeded random weights).")
@click.option("--name", default=None,
              help="The network's name in the spec; default: the model file's stem, or the torchvision name.")
@click.option("--input-shape", default=None, metavar="C,H,W",
              help="A torchvision model's per-image input shape; default 3,224,224 (inception_v3: 3,299,299).")
@user_errors
def import_cmd(model, out, weights_out, name, input_shape):
    """Convert MODEL into a YAML network spec (and a weights file): an ONNX model (.onnx), or the name of
    a torchvision classification model (resnet50, resnext50_32x4d, densenet121, vgg16_bn, ...), built
    with random weights (no download) and traced with torch.fx.

    Supported: convolutions (grouped and depthwise too), batch norm, ReLU, residual add, channel concat,
    max/average/adaptive average pooling, flatten, linear; dropout and identity are skipped. Anything
    else is reported as one line naming the node or module, and nothing is written. See
    docs/spec-format.md, "Importing an ONNX model" and "Importing a PyTorch model"."""
    import re

    from snn.codegen.importer import import_onnx, import_torch
    from snn.codegen.importer.common import TORCH_MISSING, torch_available
    path = Path(model)
    note = None
    if path.suffix.lower() == ".onnx" or path.exists():
        if input_shape is not None:
            raise UserError("--input-shape is for a torchvision model; an ONNX model has its own input shape")
        stem = path.stem
        if weights_out is None:
            if torch_available():
                weights_out = f"{stem}.pth"
            else:
                note = f"weights not written: {TORCH_MISSING}"
        result = import_onnx(model, out or f"{stem}.yaml", weights_out, name)
    elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", model):
        shape = None
        if input_shape is not None:
            try:
                shape = tuple(int(v) for v in input_shape.split(","))
            except ValueError:
                shape = ()
            if len(shape) != 3 or min(shape) < 1:
                raise UserError(f"--input-shape {input_shape!r}: expected C,H,W, three positive integers "
                                "(e.g. 3,224,224)")
        if weights_out is None:
            note = ("weights not written: `snn-run ... --weights torchvision` loads torchvision's pretrained "
                    "ones; --weights-out FILE.pth writes this import's random ones")
        result = import_torch(model, out or f"{model}.yaml", weights_out, name, shape)
    else:
        raise UserError(f"{model}: no such file (MODEL is an .onnx file or a torchvision model name such as "
                        "resnet50)")
    click.echo(f"spec: {result.spec_path}")
    if result.weights_path is not None:
        click.echo(f"weights: {result.weights_path}")
    if note:
        click.echo(note, err=True)
    click.echo(f"{result.network.name}: {result.nodes} nodes, {result.convs} convolutions "
               f"({result.sparse_convs} can run sparse)")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(package_name="snn")
def run_main():
    """Online half of snn: load the cubin cache with cuda-python and run networks on the GPU,
    choosing per layer between cuDNN (dense) and the generated sparse kernels."""


@run_main.command("infer")
@click.argument("image_dir", required=False, type=click.Path(path_type=str))
@click.option("--spec", default="resnet152", show_default=True, type=click.Path(dir_okay=False, path_type=str),
              callback=_resolve_spec, help="Network spec (YAML), or the name of a shipped one.")
@click.option("--cache", "cache_dir", default="generated", type=click.Path(file_okay=False, path_type=str),
              help="Folder holding <network>/<gpu>/manifest.json, as written by `snn-codegen build`.")
@click.option("--gpu", default="auto", help="GPU name of the build to use; auto: the one matching this device.")
@click.option("--batch", default=None, type=click.IntRange(min=1),
              help="Images per batch (kernels exist per batch size); default: the largest the bundle was built for.")
@click.option("--weights", default=None, metavar="PATH|torchvision",
              help="A torchvision state_dict (.pth), or 'torchvision' for its pretrained weights. "
                   "Without it: seeded random weights, and the labels mean nothing.")
@click.option("--output", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="Also write the predictions to this .csv or .json file.")
@click.option("--top", default=5, type=click.IntRange(1, 1000), help="Labels shown per image.")
@click.option("--trace", is_flag=True, help="Per conv layer: measured sparsity, path taken, kernel, time.")
@click.option("--path", "force", default="auto", type=click.Choice(["auto", "dense", "sparse"]),
              help="auto: per layer and batch from the zero counter; dense: cuDNN everywhere; "
                   "sparse: the sparse kernels on every layer that has them.")
@click.option("--seed", default=0, help="Seed of the random weights (without --weights).")
@click.option("--graph/--no-graph", default=True,
              help="Run each batch size as one captured CUDA graph with the dense/sparse choice taken on the "
                   "GPU (docs/graphs.md); --no-graph: launch layer by layer from Python and read every "
                   "counter on the host (debugging, baseline; --trace then also times each layer).")
@click.option("--tuning", "tuning_path", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="Tuning file from `snn-run calibrate` to use; default: tuning.json in the bundle, if any.")
@click.option("--compare-dense", is_flag=True,
              help="Also time one batch on snn and on the dense path (every conv snn could run sparse on cuDNN FP32, "
                   "same executor) and print both.")
@click.option("--precision", default=None, type=click.Choice(PRECISIONS),
              help="The precision the bundle was built for (`snn-codegen build --precision`), the default; one "
                   "other than the bundle's is refused. fp32: exact, the sparse kernels where they pay; bf16 / fp16: "
                   "every conv on cuDNN's tensor cores with its bias, residual and ReLU fused into one call (no "
                   "sparse path in 16 bits: measured slower, docs/performance.md).")
@click.option("--devices", default=None, type=click.IntRange(min=1),
              help="Classify on this many GPUs of this machine: runs this command under torchrun, each GPU a "
                   "shard of the folder, one merged output (the same as `torchrun --nproc-per-node N snn-run "
                   "infer ...`).")
def infer_cmd(image_dir, spec, cache_dir, gpu, batch, weights, output, top, trace, force, seed, graph, tuning_path,
              compare_dense, precision, devices):
    """Classify every image under IMAGE_DIR (recursively: JPEG, PNG, BMP, WebP, ...); without IMAGE_DIR, the
    five sample photos that ship with snn.

    Prints the top labels per image and a summary (images/s, share of conv layers that ran sparse).
    Files that are not images or cannot be decoded are reported by name and skipped; the exit code
    is then 3 (1 for errors). Needs an NVIDIA GPU, PyTorch and the bundle built for this GPU.
    """
    from snn.runtime.errors import RunError
    from snn.runtime.infer import infer_command
    if devices is not None:
        if "WORLD_SIZE" in os.environ:
            raise click.ClickException("--devices starts torchrun itself: leave it out under torchrun")
        from snn.runtime.distributed import run_torchrun
        sys.exit(run_torchrun(devices, _without_option(sys.argv, "--devices")))
    try:
        from snn.runtime.images import SAMPLES_DIR
        code = infer_command(image_dir or str(SAMPLES_DIR), spec, cache_dir, gpu, batch, weights, output, top, trace,
                             force, seed, graph, tuning_path, compare_dense, precision)
    except (RunError, SpecError) as e:
        if os.environ.get("RANK", "0") != "0":  # under torchrun every rank meets the same mistake: rank 0 says it
            sys.exit(1)
        raise click.ClickException(str(e)) from None
    sys.exit(code)


def _without_option(argv: list[str], name: str) -> list[str]:
    """argv without `name VALUE` / `name=VALUE`."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


# -- calibrate and bench (runtime/calibrate.py, runtime/measure/) ---------------------------------------
def _run_errors(fn):
    """RunError / SpecError / UserError -> one line, exit 1."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from snn.runtime.errors import RunError
        try:
            return fn(*args, **kwargs)
        except (RunError, SpecError, UserError) as e:
            raise click.ClickException(str(e)) from None
    return wrapper


def _bench_options(fn):
    opts = [
        click.option("--spec", required=True, type=click.Path(dir_okay=False, path_type=str), callback=_resolve_spec,
                     help="Network spec (YAML), e.g. network_specs/resnet152.yaml."),
        click.option("--cache", "cache_dir", default="generated", type=click.Path(file_okay=False, path_type=str),
                     help="Folder holding <network>/<gpu>/manifest.json, as written by `snn-codegen build`."),
        click.option("--gpu", default="auto", help="GPU name of the build to use; auto: the one matching this device."),
        click.option("--images", "images_dir", default=None, type=click.Path(path_type=str),
                     help="Photos whose activations become the inputs (and their mirror images); "
                          "without it, smooth synthetic images (said so in the output)."),
        click.option("--weights", default=None, metavar="PATH|torchvision",
                     help="As for infer; default: seeded random weights with BN statistics calibrated."),
        click.option("--seed", default=0, help="Seed of the random weights and of the input sets."),
        click.option("--reps", default=None, type=click.IntRange(min=1), help="Timed runs per measurement (median)."),
        click.option("--warmup", default=None, type=click.IntRange(min=0), help="Untimed runs first."),
        click.option("--cpu-dry-run", is_flag=True, hidden=True,
                     help="Run the whole pipeline on the CPU with the torch emulation (tests; timings mean nothing)."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _bar(label):
    return lambda n: click.progressbar(length=n, label=label, show_pos=True, file=sys.stderr)


def _checkpoint(out, kind, spec):
    """Write the document so far after every shape/batch: an interrupted run keeps what it measured."""
    from snn.runtime.measure.common import write_json
    name = f"{kind}_{load_spec(spec).name}"
    return lambda doc: write_json(doc, f"{out}/{name}.json")


def _finish(doc, out, name):
    from snn.runtime.measure.common import write_json
    from snn.runtime.measure.report import report
    path = write_json(doc, f"{out}/{name}.json")
    click.echo(f"wrote {path}")
    md, pngs, note = report(out)
    click.echo(f"wrote {md}" + (f" and {len(pngs)} plot(s)" if pngs else ""))
    if note:
        click.echo(f"note: {note}", err=True)


@run_main.command("calibrate")
@_bench_options
@click.option("--batch", "batch", default=None, metavar="B[,B...]", help="Batch buckets; default: all built.")
@click.option("--levels", default=None, help="Levels (start:stop:step or a comma list); default: all built.")
@click.option("--remeasure", is_flag=True, help="Measure again what the tuning file already holds.")
@click.option("--tuning", "tuning_path", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="Tuning file to write (and resume from); default: tuning.json in the bundle.")
@click.option("--out", default=None, type=click.Path(file_okay=False, path_type=str),
              help="Also write calibrate_<network>.json, plots and summary.md into this folder.")
@click.option("--exhaustive", is_flag=True,
              help="Also build (nvcc, through the cubin cache) and time a sample of stage-1 survivors for a sample "
                   "of layers at the first batch: the model's choice against the best measured (paper Fig. 8).")
@click.option("--exhaustive-layers", default=4, type=click.IntRange(min=1), help="Layers (distinct 3x3 shapes first) sampled.")
@click.option("--exhaustive-configs", default=24, type=click.IntRange(min=2), help="Configs per layer, the model's choice included.")
@click.option("--exhaustive-level", default=0.7, type=click.FloatRange(0.0, 0.99), help="Input sparsity of the comparison.")
@click.option("--tune/--no-tune", default=True,
              help="Where the build made several candidate kernels a level (snn-codegen build --candidates), measure "
                   "them all and keep the fastest; --no-tune keeps the cost model's picks.")
@click.option("--graph/--no-graph", "graph", default=True,
              help="Then try the dense candidates of every conv shape that several layers share in the network's "
                   "CUDA graph, and keep one where the whole network replays faster (about a minute per batch "
                   "for ResNet-152).")
@_run_errors
def calibrate_cmd(spec, cache_dir, gpu, images_dir, weights, seed, reps, warmup, cpu_dry_run, batch, levels, remeasure,
                  tuning_path, out, exhaustive, exhaustive_layers, exhaustive_configs, exhaustive_level, tune, graph):
    """Time cuDNN and the sparse kernel of every conv layer, batch bucket and level on the GPU, and
    write the measurements to the tuning file (tuning.json in the bundle, or --tuning). The runtime
    derives from it, at load, each layer's threshold (lowest level from which sparse wins) and, where
    a level has candidate kernels, the fastest one. The bundle itself is never modified. Resumable:
    the tuning file is written after every shape."""
    from snn.runtime import calibrate
    from snn.runtime.measure.common import parse_batches, parse_levels
    res = calibrate.calibrate(spec, cache_dir, gpu, parse_batches(batch) if batch else None,
                              parse_levels(levels) if levels else None, images_dir, weights, seed,
                              reps or 30, 5 if warmup is None else warmup, remeasure,
                              bar=_bar("calibrate"), cpu_dry_run=cpu_dry_run, log=click.echo,
                              exhaustive={"layers": exhaustive_layers, "configs": exhaustive_configs,
                                          "level": exhaustive_level} if exhaustive else None, tune=tune,
                              tuning_path=tuning_path, graph=graph)
    for line in calibrate.format_rows(res):
        click.echo(line)
    click.echo(f"wrote {res['tuning']} (the bundle {Path(res['manifest']).parent} is unchanged)")
    if out:
        _finish(res, out, f"calibrate_{res['network']}")


@run_main.group("bench")
def bench_group():
    """Measure the sparse path against cuDNN (docs/bench.md): JSON, PNG plots, summary.md."""


@bench_group.command("layers")
@_bench_options
@click.option("--batch", "batch", default="1,8,32", metavar="B[,B...]", help="Batch sizes (each must be built).")
@click.option("--levels", default="0.5,0.7,0.9", help="Input sparsity levels (comma list or start:stop:step).")
@click.option("--out", default="results", type=click.Path(file_okay=False, path_type=str),
              help="Folder for layers_<network>.json, plots and summary.md.")
@click.option("--max-shapes", default=None, type=click.IntRange(min=1),
              help="At most this many distinct shapes: all with kernels larger than 1x1, then evenly spaced others.")
@click.option("--layer", "layers", multiple=True, metavar="NAME", help="Only the shapes of these conv layers.")
@click.option("--nchw/--no-nchw", default=True, help="Also time cuDNN on NCHW and keep the faster format.")
@_run_errors
def bench_layers_cmd(spec, cache_dir, gpu, images_dir, weights, seed, reps, warmup, cpu_dry_run, batch, levels,
                     out, max_shapes, layers, nchw):
    """Per distinct conv shape: speedup of the sparse path over cuDNN FP32 and TF32 across levels and
    batch sizes, on real activations thresholded to each level (paper Figs. 10-11)."""
    from snn.runtime.measure.common import parse_batches, parse_levels
    from snn.runtime.measure.layer import bench_layers
    doc = bench_layers(spec, cache_dir, gpu, parse_batches(batch), parse_levels(levels),
                       images_dir, weights, seed, reps or 30, 5 if warmup is None else warmup, nchw,
                       max_shapes, tuple(layers), bar=_bar("bench layers"), cpu_dry_run=cpu_dry_run,
                       log=click.echo, checkpoint=_checkpoint(out, "layers", spec))
    _finish(doc, out, f"layers_{doc['network']}")


@bench_group.command("e2e")
@_bench_options
@click.option("--batch", "batch", default="1,8,32", metavar="B[,B...]", help="Batch sizes (each must be built).")
@click.option("--sparsity-profile", "profiles", multiple=True, metavar="PROFILE",
              help="Set each conv's input sparsity on the images before timing snn: a number (0.7), one per stage "
                   "(0.5,0.6,0.7,0.8), `trained` (the shipped trained-like profile of this network), a shipped "
                   "profile's name or a profile file (docs/bench.md). Repeat to time snn on several; the baselines "
                   "run once, on the first.")
@click.option("--precisions", default="fp32,tf32,fp16,bf16", show_default=True,
              help="Precisions of the dense baselines.")
@click.option("--baselines", "kinds", default="eager,graph,compile", show_default=True,
              help="How the dense baselines run: eager, graph (CUDA-graph replay), compile (torch.compile, "
                   "inductor with freezing, mode=reduce-overhead).")
@click.option("--out", default="results", type=click.Path(file_okay=False, path_type=str),
              help="Folder for e2e_<network>.json, plots and summary.md.")
@click.option("--graph/--no-graph", "graphs", default=True,
              help="Time snn as one CUDA graph with device-side dispatch (default); --no-graph: eager, host dispatch.")
@click.option("--energy/--no-energy", default=True, help="Energy per image from NVML's energy counter.")
@click.option("--snn-precisions", default="bf16,fp16", show_default=True,
              help="snn's 16-bit runs also timed (every conv on cuDNN's tensor cores, epilogues fused), against the "
                   "baselines of the same precision; '' for none.")
@_run_errors
def bench_e2e_cmd(spec, cache_dir, gpu, images_dir, weights, seed, reps, warmup, cpu_dry_run, batch, profiles,
                  precisions, kinds, out, graphs, energy, snn_precisions):
    """Whole-network time (and energy) of snn against the dense baselines a PyTorch user would run: the model
    eager, CUDA-graph replayed and torch.compile'd, in FP32 (TF32 off), TF32, FP16 and BF16, in one run on the
    same images; speedups against the strongest FP32 baseline and the strongest overall."""
    from snn.runtime.measure.baselines import KINDS, PRECISIONS, parse_choice
    from snn.runtime.measure.common import parse_batches
    from snn.runtime.measure.e2e import bench_e2e
    from snn.runtime.errors import RunError
    from snn.runtime.measure.profiles import resolve_profile
    net = load_spec(spec)
    profs = [resolve_profile(p, net) for p in profiles]
    if len({p.name for p in profs}) < len(profs):
        raise RunError(f"--sparsity-profile: the same profile given twice ({', '.join(p.name for p in profs)})")
    doc = bench_e2e(spec, cache_dir, gpu, parse_batches(batch), images_dir, weights, seed, profs,
                    parse_choice(precisions, PRECISIONS, "--precisions"), parse_choice(kinds, KINDS, "--baselines"),
                    reps or 20, 3 if warmup is None else warmup, graphs, energy,
                    cpu_dry_run=cpu_dry_run, log=click.echo, checkpoint=_checkpoint(out, "e2e", spec),
                    snn_precisions=parse_choice(snn_precisions, ("bf16", "fp16"), "--snn-precisions")
                    if snn_precisions else ())
    _finish(doc, out, f"e2e_{doc['network']}")
    from snn.runtime.measure.timing import exit_skipping_teardown
    exit_skipping_teardown()


@bench_group.command("report")
@click.argument("folder", type=click.Path(file_okay=False, exists=True, path_type=str))
@_run_errors
def bench_report_cmd(folder):
    """Redraw the plots and summary.md of FOLDER from its JSON results (e.g. after a GPU run without matplotlib)."""
    from snn.runtime.measure.report import report
    md, pngs, note = report(folder)
    click.echo(f"wrote {md}" + "".join(f"\nwrote {p}" for p in pngs))
    if note:
        click.echo(f"note: {note}", err=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(codegen_main())
