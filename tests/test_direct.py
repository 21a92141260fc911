"""The image's conv on the bundle's direct kernel (codegen/direct.py): which convs it takes, its rendering and
compilation, the build recording it as the manifest's "direct", the loader checking that, and a pass running it in
place of cuDNN (TorchBackend's emulation; the kernel itself is checked against float64 on the GPU,
tests/gpu/test_kernels.py)."""
import dataclasses
import json

import pytest

from snn.codegen import direct
from snn.codegen.emit import CONV_ARGS
from snn.codegen.spec import ConvShape, load_spec, parse_spec

from buildfakes import build_small_spec
from test_precision import needs_nvcc

STEM = ConvShape(3, 64, 224, 224, 7, 7, (2, 2), (3, 3))       # ResNet's and DenseNet's
VGG = ConvShape(3, 64, 224, 224, 3, 3, (1, 1), (1, 1))
ODD = ConvShape(3, 128, 13, 11, 3, 3, (2, 2), (1, 1))         # ragged tiles, two 64-channel tiles


def test_it_takes_an_images_few_channels_and_whole_64_channel_tiles():
    assert direct.eligible(STEM) and direct.eligible(VGG) and direct.eligible(ODD)
    assert not direct.eligible(ConvShape(16, 64, 56, 56, 3, 3, (1, 1), (1, 1)))    # more channels: other kernels'
    assert not direct.eligible(ConvShape(3, 96, 224, 224, 7, 7, (2, 2), (3, 3)))   # N % 64
    assert not direct.eligible(STEM, groups=3)
    assert not direct.eligible(ConvShape(4, 64, 224, 224, 11, 11, (4, 4), (2, 2)))  # its tile past 48 KB
    with pytest.raises(ValueError, match="C <= 4"):
        direct.render(ConvShape(16, 64, 56, 56, 3, 3, (1, 1), (1, 1)), 1)


def test_render():
    k = direct.emitted(STEM, 1)
    step = k.steps[0]
    assert k.name == "dirconv_r7s7_str2_pad3_c3n64_h224w224_t4x8n128_b1" and k.epilogue and k.weight_layout == "CRSN"
    assert step["args"] == CONV_ARGS and step["pdl"] and step["grid"] == [14, 28, 1] and step["block"] == [128, 1, 1]
    assert direct.emitted(ODD, 3).steps[0]["grid"] == [1, 2, 6]   # 7 x 6 output: 2 x 1 ragged tiles; batch 3 x 2 channel tiles
    assert direct.emitted(STEM, 1, direct.DirectConfig(8, 8, 64)).steps[0]["grid"] == [14, 14, 1]
    with pytest.raises(ValueError, match="pixel groups"):
        direct.render(STEM, 1, direct.DirectConfig(8, 8, 48))   # not whole warps
    assert "constexpr int C = 3, N = 64, H = 224, W = 224, P = 112, Q = 112;" in k.source
    assert direct.smem_bytes(STEM) == (147 * 64 + 3 * 13 * 21) * 4   # the weights and a 13 x 21 input tile


@needs_nvcc
def test_kernels_compile_without_spills(tmp_path):
    from snn.codegen.cache import CubinCache
    from snn.codegen.compile import Compiler, problems
    sources = dict(direct.render(shape, b) for shape in (STEM, VGG, ODD) for b in (1, 8))
    records = Compiler(CubinCache(tmp_path)).compile(sources, "sm_90").records
    for fn, rec in records.items():
        assert not problems(rec), (fn, problems(rec))
        assert rec["functions"][fn]["entry"]


NET = """\
name: imagenet_like
input: {name: image, shape: [3, 16, 16]}
nodes:
  - {name: stem, op: conv, input: image, in_channels: 3, out_channels: 64, kernel: 7, stride: 2, padding: 3, param: stem}
  - {name: stem.bn, op: batchnorm, input: stem, channels: 64, param: stem.bn}
  - {name: stem.relu, op: relu, input: stem.bn}
  - {name: pool, op: maxpool, input: stem.relu, kernel: 3, stride: 2, padding: 1}
  - {name: a, op: conv, input: pool, in_channels: 64, out_channels: 64, kernel: 3, padding: 1, param: a}
  - {name: a.relu, op: relu, input: a}
  - {name: gap, op: global_avgpool, input: a.relu}
  - {name: flat, op: flatten, input: gap}
  - {name: fc, op: linear, input: flat, in_features: 64, out_features: 5, param: fc}
"""


@needs_nvcc
def test_build_records_the_images_conv_per_batch_and_the_loader_checks_it(tmp_path, monkeypatch):
    from snn.runtime import manifest
    from test_runtime_cpu import H100_CC
    spec, r = build_small_spec(tmp_path, monkeypatch, NET, [1, 2])
    net = load_spec(spec)
    m = r.manifest
    stem = net.convs[0].shape
    image = dataclasses.replace(direct.CONFIG, nchw=True)   # it reads the image: NCHW, as the caller holds it
    assert m["direct"] == {"stem": {"1": image.name(stem, 1), "2": image.name(stem, 2)}}
    k = m["kernels"][m["direct"]["stem"]["2"]]
    assert k["config"] == {"family": "direct", "th": 4, "tw": 8, "threads": 128, "nchw": True} and k["batch"] == 2
    assert k["epilogue"] and k["input_layout"] == "NCHW"
    assert all("input_layout" not in e for n, e in m["kernels"].items() if n not in m["direct"]["stem"].values())
    assert [lay["name"] for lay in m["layers"]] == ["a"]   # the stem is no planned layer
    cache = manifest.load(r.manifest_path, net, str(spec), 2, H100_CC)
    assert cache.direct_kernel("stem", 2) == m["direct"]["stem"]["2"] and cache.direct_kernel("a", 2) is None
    # a manifest naming a kernel it lacks, or a conv the spec lacks, is refused with the rebuild command
    for bad in ({"stem": {"2": "nope"}}, {"ghost": {"2": m["direct"]["stem"]["2"]}}):
        r.manifest_path.write_text(json.dumps({**m, "direct": bad}))
        with pytest.raises(manifest.CacheError, match="direct.*rebuild with"):
            manifest.load(r.manifest_path, net, str(spec), 2, H100_CC)
    # an entry whose layout is unknown, or NCHW for a conv that does not read the image, is refused too
    name = m["direct"]["stem"]["2"]
    for layout, direct_map in (("NWHC", m["direct"]), ("NCHW", {"a": {"2": name}})):
        kernels = {**m["kernels"], name: {**m["kernels"][name], "input_layout": layout}}
        r.manifest_path.write_text(json.dumps({**m, "kernels": kernels, "direct": direct_map}))
        with pytest.raises(manifest.CacheError, match="reads its input as|another shape"):
            manifest.load(r.manifest_path, net, str(spec), 2, H100_CC)


def test_a_pass_runs_the_images_conv_on_it_and_matches_the_reference():
    """The stem on the direct kernel's steps (emulated), its epilogue as the lowering leaves it, the trace naming
    the kernel; the other convs as before."""
    torch = pytest.importorskip("torch")
    from pathlib import Path

    from snn.runtime import executor, manifest, weights
    from test_runtime_torch import rel_err
    net = parse_spec(NET, "net.yaml")
    sd = weights.random_init(net, seed=3)
    x = torch.randn(2, 3, 16, 16)
    ref = executor.reference(net, sd, x.double())
    k = direct.emitted(net.convs[0].shape, 2, dataclasses.replace(direct.CONFIG, nchw=True))
    kernels = {k.name: {"cubin": "/fake.cubin", "steps": k.steps, "workspace": {}, "weight_layout": "CRSN",
                        "epilogue": True, "input_layout": k.input_layout}}
    data = {"batches": [2], "kernels": kernels, "layers": [], "epilogue": {}, "direct": {"stem": {"2": k.name}}}
    cache = manifest.Cache(Path("fake/manifest.json"), data, "net.yaml", "fake", {})
    got = []

    class Backend(executor.TorchBackend):   # what the kernel is given: the image as the caller holds it, NCHW
        def sparse_conv(self, name, kentry, inp, *a, **kw):
            got.append(inp.is_contiguous())
            return super().sparse_conv(name, kentry, inp, *a, **kw)
    be = Backend()
    ex = executor.Executor(net, sd, be, cache, device="cpu", force="auto")
    y = ex.forward(x)
    assert be.sparse_calls == [k.name] and rel_err(y, ref) < 1e-5 and got == [True]
    ex.forward(x.contiguous(memory_format=torch.channels_last))   # a channels-last image: made NCHW for it
    assert got == [True, True]
    trace = {t.name: t for t in ex.last_trace}
    assert trace["stem"].path == "dense" and trace["stem"].kernel == k.name
    be2 = executor.TorchBackend()   # a batch it was not built for: cuDNN's (torch's) conv
    executor.Executor(net, sd, be2, cache, device="cpu", force="auto").forward(x[:1])
    assert be2.sparse_calls == []
