"""Random specs, valid and broken, through `snn-codegen inspect` and `plan` as a user runs them: no
traceback ever; every broken one is refused in one line naming the file and the node; a sample of the
valid ones builds (real nvcc) with no kernel spilling. Seeded: a failure names the spec to replay."""
import random
import shutil

import pytest
import yaml
from click.testing import CliRunner

from snn import cli

N_VALID, N_BROKEN, N_BUILT = 200, 150, 3


def make_spec(rng: random.Random, name: str) -> dict:
    c, h, w = rng.choice([1, 3, 5, 8]), rng.randint(9, 48), rng.randint(9, 48)
    return {"name": name, "input": {"name": "image", "shape": [c, h, w]}, "nodes": chain(rng, (c, h, w))}


def chain(rng: random.Random, shape) -> list[dict]:
    nodes = []

    def add(node):
        node = {"name": f"n{len(nodes)}", **node}
        nodes.append(node)
        return node["name"]

    def out_size(n, k, s, p):
        return (n + 2 * p - k) // s + 1

    cur = "image"
    for step in range(rng.randint(2, 6)):
        c, h, w = shape
        r = rng.random() if step else 1.0  # a stem conv first
        if r < 0.15 and h >= 4 and w >= 4:
            k = rng.choice([2, 3])
            p = rng.randint(0, k // 2)
            cur = add({"op": rng.choice(["maxpool", "avgpool"]), "input": cur, "kernel": k, "stride": 2, "padding": p})
            shape = (c, out_size(h, k, 2, p), out_size(w, k, 2, p))
        elif r < 0.3:  # residual block: two same-shape convs added to the input
            k = rng.choice([1, 3, 5])
            a = add({"op": "conv", "input": cur, "in_channels": c, "out_channels": c, "kernel": k, "padding": k // 2})
            a = add({"op": "relu", "input": a})
            b = add({"op": "conv", "input": a, "in_channels": c, "out_channels": c, "kernel": k, "padding": k // 2})
            cur = add({"op": "relu", "input": add({"op": "add", "inputs": [b, cur]})})
        elif r < 0.4:  # concat of the input with a 1x1 branch
            n = rng.choice([5, 16, 17])
            b = add({"op": "relu", "input": add({"op": "conv", "input": cur, "in_channels": c, "out_channels": n,
                                                 "kernel": 1})})
            cur = add({"op": "concat", "inputs": [cur, b]})
            shape = (c + n, h, w)
        else:
            k = rng.choice([1, 1, 3, 3, 3, 5, 7, 9, 11])
            s, p = rng.choice([1, 1, 1, 2, 3]), rng.randint(0, k // 2)
            if out_size(h, k, s, p) < 1 or out_size(w, k, s, p) < 1:
                s, p = 1, k // 2
            n = rng.choice([1, 3, 7, 13, 16, 24, 31, 33, 48, 64, 67])
            g = rng.choice([d for d in (1, 1, 1, 2, 3, 4) if c % d == 0 and n % d == 0])
            cur = add({"op": "conv", "input": cur, "in_channels": c, "out_channels": n, "kernel": k, "stride": s,
                       "padding": p, "groups": g, "bias": rng.random() < 0.3})
            if rng.random() < 0.5:
                cur = add({"op": "batchnorm", "input": cur, "channels": n})
            cur = add({"op": "relu", "input": cur})
            shape = (n, out_size(h, k, s, p), out_size(w, k, s, p))
    cur = add({"op": "flatten", "input": add({"op": "global_avgpool", "input": cur})})
    add({"op": "linear", "input": cur, "in_features": shape[0], "out_features": rng.randint(2, 20)})
    return nodes


# a mistake in one node: (what is changed, what the one-line error must say)
def break_spec(rng: random.Random, spec: dict) -> str:
    convs = [n for n in spec["nodes"] if n["op"] == "conv"]
    node = rng.choice(convs)
    kind = rng.choice(["channels", "kernel", "op", "input", "cycle", "groups", "stride", "type", "field", "dup"])
    if kind == "channels":
        node["in_channels"] += rng.choice([1, 2, 5])
    elif kind == "kernel":  # larger than the padded input: no output pixel
        node["kernel"], node["padding"], node["stride"] = 99, 0, 1
    elif kind == "op":
        node["op"] = "conv3d"
    elif kind == "input":
        node["input"] = "no_such_node"
    elif kind == "cycle":
        node["input"] = spec["nodes"][-1]["name"]
    elif kind == "groups":
        node["groups"] = node["in_channels"] + 1
    elif kind == "stride":
        node["stride"] = rng.choice([0, -1])
    elif kind == "type":
        node["kernel"] = "three"
    elif kind == "field":
        node["dilation"] = 2
    elif kind == "dup":
        node["name"] = spec["nodes"][0]["name"] if spec["nodes"][0] is not node else spec["nodes"][1]["name"]
    return f"{kind} in {node['name']}"


def run(tmp_path, spec: dict, *args):
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path, CliRunner().invoke(cli.codegen_main, [args[0], str(path), *args[1:]])


def test_random_specs_never_crash_and_broken_ones_fail_in_one_line(tmp_path, capsys):
    rng = random.Random(20261124)
    counts = {"valid": 0, "broken": 0, "dense-only convs": 0}
    for k in range(N_VALID):
        spec = make_spec(rng, f"fuzz{k}")
        for cmd in (["inspect", "--json"], ["plan", "--gpu", "h100", "--levels", "0.5,0.8", "--batch",
                                            str(rng.choice([1, 3, 8]))]):
            path, r = run(tmp_path, spec, *cmd)
            assert r.exit_code == 0 and r.exception is None, f"{path}: {cmd}: {r.output}{r.exception!r}"
        counts["valid"] += 1
        info = CliRunner().invoke(cli.codegen_main, ["inspect", str(path), "--json"]).output
        counts["dense-only convs"] += info.count('"sparse": false')
    for k in range(N_BROKEN):
        spec = make_spec(rng, f"broken{k}")
        what = break_spec(rng, spec)
        for cmd in (["inspect"], ["plan", "--gpu", "h100", "--levels", "0.5"]):
            path, r = run(tmp_path, spec, *cmd)
            out = r.output.strip()
            assert r.exit_code == 1 and isinstance(r.exception, SystemExit), f"{path} ({what}): {out}{r.exception!r}"
            assert len(out.splitlines()) == 1 and out.startswith(f"Error: {path}"), f"{what}: {out}"
            assert "node '" in out, f"{what}: the node is not named: {out}"
        counts["broken"] += 1
    with capsys.disabled():
        print(f"\nfuzzed specs: {counts['valid']} valid through inspect and plan, {counts['broken']} broken refused "
              f"in one line naming file and node; {counts['dense-only convs']} dense-only convs among the valid")


@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("make") is None, reason="needs nvcc and make")
def test_a_sample_of_random_specs_builds_without_spills(tmp_path, monkeypatch, capsys):
    """The richest of 60 random specs (most distinct sparse conv shapes: odd channel counts, kernels up to
    11x11, strides 2-3), built at batch 1 and 3: any kernel with a stack frame or spills fails the build."""
    from snn.codegen.spec import parse_spec
    monkeypatch.setenv("SNN_CACHE_DIR", str(tmp_path / "cache"))
    rng = random.Random(7)
    pool = [make_spec(rng, f"fuzzbuild{k}") for k in range(60)]

    def shapes(spec):
        return {c.shape for c in parse_spec(yaml.safe_dump(spec)).sparse_convs}
    sample = sorted(pool, key=lambda sp: -len(shapes(sp)))[:N_BUILT]
    kernels = 0
    for spec in sample:
        path, r = run(tmp_path, spec, "build", "--gpu", "h100", "--levels", "0.5,0.8", "--batch", "1,3",
                      "--out", str(tmp_path / "gen"), "-j", "2")
        assert r.exit_code == 0, f"{path}: {r.output}"  # a kernel with a stack frame or spills fails the build
        kernels += int(r.output.split(" kernels + epilogue")[0].rsplit(" ", 1)[1])
    kinds = sorted({(s.R, s.S) for sp in sample for s in shapes(sp)})
    with capsys.disabled():
        print(f"\nfuzzed builds: {N_BUILT} specs, {kernels} sparse kernels, kernel sizes {kinds}: 0 spills")
    assert kernels >= 10
