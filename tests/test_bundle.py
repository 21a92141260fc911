"""The bundle is relocatable and immutable; tuning lives apart from it, keyed by kernel checksum.

Real nvcc, make and cache with the stand-in plan/render stages of test_build (buildfakes)."""
import json
import shutil

import pytest

from buildfakes import FakePlanner, FakeRenderer, fake_config, fake_stages
from snn.codegen import bundle
from snn.codegen.config import KernelConfig
from snn.codegen.spec import load_spec
from snn.runtime import manifest, tuning
from snn.runtime.manifest import CacheError
from test_build import LEVELS, env, run_build  # noqa: F401  (env is a fixture)

CC = (9, 0)


def measure_all(m: dict, net, sparse_us=3.0, dense_us=9.0) -> dict:
    """What calibrate would record: every level's kernel of every layer, sparse faster than cuDNN."""
    shapes = {c.name: c.shape for c in net.convs}
    out = {}
    for lay in m["layers"]:
        for b, e in lay["batches"].items():
            for lk, choice in e["levels"].items():
                key = tuning.kernel_key(m, shapes[lay["name"]].tag(), int(b), float(lk), choice["kernel"])
                out[key] = {"sparse_us": sparse_us, "dense_us": dense_us, "rel_err_vs_cudnn_fp32": 1e-7}
    return out


def test_moved_bundle_loads_without_the_cache(env, tmp_path):
    r = run_build(env)
    src = r.manifest_path.parent
    moved = tmp_path / "elsewhere" / "bundle"
    shutil.move(str(src), str(moved))
    shutil.rmtree(env.cache.root)  # the compiler cache is gone: the bundle must not need it
    assert not src.exists() and not env.cache.root.exists()

    assert bundle.verify(moved) == []
    net = load_spec(moved / "spec.yaml")  # the bundle carries its spec
    c = manifest.load(moved / "manifest.json", net, str(moved / "spec.yaml"), 1, CC)
    used = {lv["kernel"] for lay in c.layers.values() for lv in lay["batches"]["1"]["levels"].values()}
    assert used and used <= set(c.data["kernels"])
    for name in used:  # in memory: absolute paths inside the moved folder
        assert c.kernel(name)["cubin"] == str(moved / "cubins" / f"{name}.cubin")
    assert c.epilogue["cubin"] == str(moved / "cubins" / "snn_epilogue.cubin")
    assert json.loads((moved / "manifest.json").read_text())["epilogue"]["cubin"] == "cubins/snn_epilogue.cubin"

    # a damaged cubin is caught by its checksum, and a missing one by name
    victim = moved / "cubins" / f"{sorted(used)[0]}.cubin"
    victim.write_bytes(victim.read_bytes() + b"\0")
    with pytest.raises(CacheError, match=r"does not match its sha256.*rebuild with: snn-codegen build"):
        manifest.load(moved / "manifest.json", net, "spec.yaml", 1, CC)
    victim.unlink()
    assert any("is missing" in p for p in bundle.verify(moved))


def test_calibrate_writes_only_its_tuning_file(env):
    r = run_build(env)
    d = r.manifest_path.parent
    before = {p.relative_to(d): p.read_bytes() for p in d.rglob("*") if p.is_file()}
    doc = tuning.empty(r.manifest)
    doc["measurements"] = measure_all(r.manifest, env.net)
    tuning.write(d / bundle.TUNING, doc)  # what `snn-run calibrate` writes, and all it writes
    after = {p.relative_to(d): p.read_bytes() for p in d.rglob("*") if p.is_file()}
    assert after.pop(bundle.Path(bundle.TUNING)) and after == before

    c = manifest.load(r.manifest_path, env.net, str(env.spec), 1, CC)  # merged at load, in memory
    assert c.tuning_path == d / bundle.TUNING and len(c.tuning_rows) == 3
    for lay in c.layers.values():
        e = lay["batches"]["1"]
        assert (e["threshold"], e["threshold_source"]) == (0.5, "calibrated")
        assert e["levels"]["0.80"]["measured_us"] == 3.0
    plain = manifest.load(r.manifest_path, env.net, str(env.spec), 1, CC, tuning_path=False)
    assert plain.layers["a"]["batches"]["1"]["threshold_source"] == "default"
    assert (d / "manifest.json").read_bytes() == before[bundle.Path("manifest.json")]


def test_rebuild_keeps_tuning_valid_and_a_changed_kernel_invalidates_only_its_entries(env):
    r = run_build(env)
    d = r.manifest_path.parent
    doc = tuning.empty(r.manifest)
    doc["measurements"] = measure_all(r.manifest, env.net)
    tuning.write(d / bundle.TUNING, doc)
    n = len(doc["measurements"])
    assert n == 4  # a's and b's (== c's) kernel at two levels

    again = run_build(env)  # unchanged inputs: every measurement still matches
    assert tuning.validity(again.manifest, doc["measurements"]) == (n, 0)
    assert (d / bundle.TUNING).is_file()  # the build leaves the tuning file alone

    # new code for one kernel under the same name: only its measurement goes stale
    shape_b = env.net.convs[1].shape
    changed = fake_config(shape_b, 0.5).name(shape_b, 1)
    rebuilt = run_build(env, fake_stages(renderer=FakeRenderer(extra="2.0", only={changed})))
    assert rebuilt.compiled == 1
    assert tuning.validity(rebuilt.manifest, doc["measurements"]) == (n - 1, 1)
    c = manifest.load(rebuilt.manifest_path, env.net, str(env.spec), 1, CC)
    a, b = c.layers["a"]["batches"]["1"], c.layers["b"]["batches"]["1"]
    assert a["levels"]["0.50"]["measured_us"] == 3.0 and a["threshold_source"] == "calibrated"
    assert b["levels"]["0.50"]["measured_us"] is None and b["levels"]["0.80"]["measured_us"] == 3.0

    # a kernel replaced by another config: the same, by name
    def cfg(shape, level):
        return KernelConfig(1, 8, 4, 32, 1) if level > 0.65 and shape.C == 8 else fake_config(shape, level)
    r3 = run_build(env, fake_stages(planner=FakePlanner(config_fn=cfg), renderer=FakeRenderer(extra="2.0",
                                                                                           only={changed})))
    assert tuning.validity(r3.manifest, doc["measurements"]) == (n - 2, 2)


def test_measured_candidate_becomes_the_levels_kernel_at_load(env):
    alt = KernelConfig(1, 8, 4, 32, 1)
    r = run_build(env, fake_stages(planner=FakePlanner(alt_fn=lambda shape, level: [alt])))
    m = r.manifest
    shape = env.net.convs[1].shape
    pick, other = fake_config(shape, 0.8).name(shape, 1), alt.name(shape, 1)
    meas = measure_all(m, env.net, sparse_us=3.0)
    meas[tuning.kernel_key(m, shape.tag(), 1, 0.8, other)] = {"sparse_us": 2.0, "dense_us": 9.0,
                                                              "rel_err_vs_cudnn_fp32": 1e-7}
    doc = tuning.empty(m)
    doc["measurements"] = meas
    tpath = r.manifest_path.parent.parent / "my-tuning.json"  # a path the user names
    tuning.write(tpath, doc)
    c = manifest.load(r.manifest_path, env.net, str(env.spec), 1, CC, tuning_path=tpath)
    assert c.layers["b"]["batches"]["1"]["levels"]["0.80"]["kernel"] == other
    assert json.loads(r.manifest_path.read_text())["layers"][1]["batches"]["1"]["levels"]["0.80"]["kernel"] == pick
    assert manifest.load(r.manifest_path, env.net, str(env.spec), 1, CC).layers["b"]["batches"]["1"][
        "levels"]["0.80"]["kernel"] == pick  # the bundle's own (absent) tuning file: the model's pick
    with pytest.raises(CacheError, match="no such tuning file"):
        manifest.load(r.manifest_path, env.net, str(env.spec), 1, CC, tuning_path=tpath.with_name("none.json"))


def test_tuning_for_another_bundle_is_refused(env, tmp_path):
    r = run_build(env)
    doc = tuning.empty({**r.manifest, "network": "other"})
    tuning.write(tmp_path / "t.json", doc)
    with pytest.raises(tuning.TuningError, match="measured for network 'other'"):
        manifest.load(r.manifest_path, env.net, str(env.spec), 1, CC, tuning_path=tmp_path / "t.json")
