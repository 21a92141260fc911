"""The bundle's max-pool kernel (codegen/templates/maxpool.cu.j2): rendering per precision, and the builds that
carry it in the manifest ("maxpool") where the network pools; its arithmetic is checked against torch on the GPU
(tests/gpu/test_maxpool_gpu.py)."""
import json

import pytest

from snn.codegen import bundle
from snn.codegen.build import build, build_spec
from snn.codegen.cache import CubinCache
from snn.codegen.emit import (MAXPOOL_EPILOGUE, MAXPOOL_THREADS, MAXPOOL_VECTOR, avgpool_function, maxpool_function,
                              render_maxpool)
from snn.codegen.spec import load_spec
from snn.runtime import manifest

from buildfakes import GPU, fake_stages
from test_precision import needs_nvcc
from test_runtime_cpu import H100_CC

POOLED = """\
name: pooled
input: {name: image, shape: [8, 16, 16]}
nodes:
  - {name: a, op: conv, input: image, in_channels: 8, out_channels: 32, kernel: 3, padding: 1}
  - {name: ra, op: relu, input: a}
  - {name: mp, op: maxpool, input: ra, kernel: 3, stride: 2, padding: 1}
  - {name: b, op: conv, input: mp, in_channels: 32, out_channels: 32, kernel: 3, padding: 1}
"""


def test_render_per_precision():
    fn, src = render_maxpool()
    assert fn == maxpool_function() == "snn_maxpool" and "float4" in src and "#include" not in src
    assert f"__launch_bounds__({MAXPOOL_THREADS}, 3)\nsnn_maxpool(" in src and "griddepcontrol.wait" in src
    assert MAXPOOL_EPILOGUE["fp32"] and "int relu, unsigned long long* __restrict__ zeros)" in src   # its producer's
    # a 3x3 window's nine loads are all issued before its first max; other windows take the loop
    three = src.index("if (KH == 3 && KW == 3) {")
    assert three < src.index("u[k] = *reinterpret_cast<const VT*>") < src.index("if (in[k]) {") < src.index("} else {", three)
    assert avgpool_function() == "snn_avgpool" and "\nsnn_avgpool(" in src and "scale[c]" in src   # the average pool
    for p in ("bf16", "fp16"):
        fn, src = render_maxpool(p)
        assert not MAXPOOL_EPILOGUE[p] and "shift" not in src and f"__launch_bounds__({MAXPOOL_THREADS})\n" in src
        assert avgpool_function(p) is None and "avgpool" not in src
        assert fn == f"snn_maxpool_{p}" and "__hmax2_nan" in src and "uint4" in src and MAXPOOL_VECTOR[p] == 8
        assert ("cuda_bf16.h" if p == "bf16" else "cuda_fp16.h") in src
    with pytest.raises(ValueError, match="precision must be one of"):
        render_maxpool("fp8")


@needs_nvcc
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_pooling_network_carries_the_kernel_in_its_bundle(tmp_path, monkeypatch, precision):
    monkeypatch.setenv("SNN_CACHE_DIR", str(tmp_path / "cubins"))
    spec = tmp_path / "pooled.yaml"
    spec.write_text(POOLED)
    net = load_spec(spec)
    if precision == "fp32":   # the fake planner's sparse kernels, the real max-pool kernel
        stages = fake_stages()
        stages.render_maxpool = render_maxpool
        r = build(net, GPU(), [1], [0.5], out=tmp_path / "gen", stages=stages, cache=CubinCache(tmp_path / "cubins"),
                  spec_text=POOLED)
    else:
        r = build_spec(str(spec), "h100", [1], out=tmp_path / "gen", precision=precision)
    m = json.loads(r.manifest_path.read_text())
    pool = m["maxpool"]
    fn = maxpool_function(precision)
    assert pool["cubin"] == f"cubins/{fn}.cubin" and pool["function"] == fn and pool["pdl"]
    assert pool["block"] == [MAXPOOL_THREADS] and pool["vector"] == MAXPOOL_VECTOR[precision]
    assert pool["epilogue"] == MAXPOOL_EPILOGUE[precision]
    assert pool.get("avg_function") == avgpool_function(precision)   # FP32's average pool, in the same cubin
    assert pool["registers"] > 0 and pool["stack"] == 0 and not bundle.verify(r.manifest_path.parent, m)
    cache = manifest.load(r.manifest_path, net, str(spec), 1, H100_CC, tuning_path=False)
    assert cache.maxpool["cubin"] == str(r.manifest_path.parent / f"cubins/{fn}.cubin")
    # a damaged entry is refused with the rebuild command, as any other field
    m["maxpool"] = {"cubin": pool["cubin"], "function": fn}
    r.manifest_path.write_text(json.dumps(m))
    with pytest.raises(manifest.CacheError, match="field 'maxpool' is not an entry with cubin, function, block and vector"):
        manifest.load(r.manifest_path, net, str(spec), 1, H100_CC, tuning_path=False)


@needs_nvcc
@pytest.mark.parametrize("pool", ["op: relu, input: ra", "op: avgpool, input: ra, kernel: 2"])
def test_the_entry_is_there_where_the_network_pools(tmp_path, pool):
    """No pool: no entry and no source; an average pool alone: the entry, its average pool named."""
    net = load_spec_text(tmp_path, POOLED.replace("op: maxpool, input: ra, kernel: 3, stride: 2, padding: 1", pool))
    stages = fake_stages()
    stages.render_maxpool = render_maxpool
    r = build(net, GPU(), [1], [0.5], out=tmp_path / "gen", stages=stages, cache=CubinCache(tmp_path / "cubins"))
    if "avgpool" in pool:
        assert r.manifest["maxpool"]["avg_function"] == "snn_avgpool"
    else:
        assert "maxpool" not in r.manifest and not (r.manifest_path.parent / "src" / "snn_maxpool.cu").exists()


def load_spec_text(tmp_path, text):
    p = tmp_path / "net.yaml"
    p.write_text(text)
    return load_spec(p)
