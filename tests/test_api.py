"""The Python API's offline half and its user errors, without a GPU: snn.build writes a bundle that
the CLI's build would write; snn.load names what is wrong with a folder before touching the GPU."""
import shutil

import pytest

import snn
from snn.codegen import bundle
from snn.runtime.errors import RunError

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("make") is None,
                                reason="needs nvcc and make")

SPEC = """\
name: apinet
input: {name: image, shape: [3, 12, 12]}
nodes:
  - {name: stem, op: conv, input: image, in_channels: 3, out_channels: 8, kernel: 3, padding: 1}
  - {name: r0, op: relu, input: stem}
  - {name: c1, op: conv, input: r0, in_channels: 8, out_channels: 8, kernel: 3, padding: 1}
  - {name: r1, op: relu, input: c1}
  - {name: pool, op: adaptive_avgpool, input: r1, output_size: 1}
  - {name: flat, op: flatten, input: pool}
  - {name: fc, op: linear, input: flat, in_features: 8, out_features: 4}
"""


def test_build_writes_a_relocatable_bundle(tmp_path, monkeypatch):
    monkeypatch.setenv("SNN_CACHE_DIR", str(tmp_path / "cache"))
    spec = tmp_path / "apinet.yaml"
    spec.write_text(SPEC)
    r = snn.build(str(spec), gpu="h100", batch=[1, 2], levels=[0.5, 0.8], out=tmp_path / "gen", jobs=2)
    folder = tmp_path / "gen" / "apinet" / "h100"
    assert r.manifest_path == folder / "manifest.json"
    assert r.manifest["batches"] == [1, 2] and r.manifest["levels"] == [0.5, 0.8]
    assert bundle.verify(folder) == [] and (folder / "spec.yaml").read_text() == SPEC
    assert "bundle: " in r.summary()
    assert [lay["name"] for lay in r.manifest["layers"]] == ["c1"]  # the stem reads the image: no kernels
    from snn.runtime.engine import default_batch
    assert default_batch(folder) == 2  # snn.load / snn-run infer without a batch: the largest built


def test_load_names_a_folder_that_is_no_bundle(tmp_path):
    with pytest.raises(RunError, match=r"not a bundle \(no manifest.json\); `snn-codegen build SPEC --out DIR`"):
        snn.load(tmp_path)
