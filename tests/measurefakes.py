"""A tiny network and a fake on-disk kernel cache for the CPU dry runs of bench and calibrate
(`--cpu-dry-run`: torch emulation of the sparse steps, host timings that mean nothing)."""
import json

from click.testing import CliRunner

from snn import cli
from snn.codegen import bundle as bundle_format
from snn.codegen.spec import load_spec

TINY = """
name: tinybench
input: {name: image, shape: [3, 24, 24]}
nodes:
  - {name: conv1, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, padding: 1, param: conv1}
  - {name: bn1, op: batchnorm, input: conv1, channels: 8, param: bn1}
  - {name: relu1, op: relu, input: bn1}
  - {name: pool1, op: maxpool, input: relu1, kernel: 2, stride: 2}
  - {name: conv2, op: conv, input: pool1, in_channels: 8, out_channels: 8, kernel: 3, padding: 1, param: conv2}
  - {name: bn2, op: batchnorm, input: conv2, channels: 8, param: bn2}
  - {name: add, op: add, inputs: [bn2, pool1]}
  - {name: relu2, op: relu, input: add}
  - {name: conv3, op: conv, input: relu2, in_channels: 8, out_channels: 16, kernel: 1, bias: true, param: conv3}
  - {name: relu3, op: relu, input: conv3}
  - {name: conv4, op: conv, input: relu3, in_channels: 16, out_channels: 8, kernel: 3, padding: 1, param: conv4}
  - {name: bn4, op: batchnorm, input: conv4, channels: 8, param: bn4}
  - {name: relu4, op: relu, input: bn4}
  - {name: gap, op: global_avgpool, input: relu4}
  - {name: flat, op: flatten, input: gap}
  - {name: fc, op: linear, input: flat, in_features: 8, out_features: 5, param: fc}
"""
LEVELS = (0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def tiny_cache(tmp_path):
    """The tiny spec and a fake kernel cache for it (every conv but the stem, batch 2, each of LEVELS);
    returns (spec path, manifest path, tmp_path)."""
    spec = tmp_path / "tinybench.yaml"
    spec.write_text(TINY)
    net = load_spec(spec)
    bundle = tmp_path / "gen" / "tinybench" / "fake"
    (bundle / "cubins").mkdir(parents=True)
    (bundle / "cubins" / "k.cubin").write_bytes(b"\0")
    cubin = "cubins/k.cubin"  # relative to the bundle, as the build writes it
    kernels, layers = {}, []
    for c in net.convs[1:]:  # the stem reads the image: no kernels, as in real manifests
        entry = {"threshold": 0.5, "threshold_source": "default", "levels": {}}
        for l in LEVELS:
            name = f"sconv_{c.name}_l{int(l * 100)}"
            kernels[name] = {"cubin": str(cubin), "weight_layout": "CRSN", "workspace": {},
                             "steps": [{"op": "memset", "buffer": "output"},
                                       {"op": "launch", "function": "f", "grid": [1, 1, 1], "block": [32, 1, 1],
                                        "smem": 0, "args": ["input", "weight", "output"]}]}
            entry["levels"][f"{l:.2f}"] = {"kernel": name, "predicted_us": 1.0, "measured_us": None}
        layers.append({"index": c.index, "name": c.name, "batches": {"2": entry}})
    m = bundle / "manifest.json"
    m.write_text(json.dumps({"format": bundle_format.FORMAT, "network": "tinybench", "gpu": "fake", "compute_capability": [9, 0], "batches": [2],
                             "levels": list(LEVELS), "epilogue": {"cubin": str(cubin)}, "kernels": kernels,
                             "layers": layers}))
    return spec, m, tmp_path


def run(args):
    r = CliRunner().invoke(cli.run_main, args + ["--cpu-dry-run", "--reps", "2", "--warmup", "1"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    return r.output
