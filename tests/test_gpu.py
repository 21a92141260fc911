"""GPU descriptions: the table, --gpu auto from driver attributes, and the user-facing errors."""
import pytest

from snn.codegen.errors import UserError
from snn.codegen.gpu import GPU, gpu_from_attributes, known_gpus, load_gpu

# Datasheet FP32 peaks (TFLOPS) the table must reproduce from SMs x lanes x 2 x boost clock.
PEAK_TFLOPS = {"v100": 15.7, "rtx2080ti": 13.4, "a100": 19.5, "h100": 67.0, "h200": 67.0}


def test_table_lists_the_five():
    assert known_gpus() == ["a100", "h100", "h200", "rtx2080ti", "v100"]


@pytest.mark.parametrize("name", sorted(PEAK_TFLOPS))
def test_each_description_is_consistent(name):
    g = load_gpu(name)
    assert isinstance(g, GPU) and g.name == name
    major, minor = g.compute_capability
    assert g.arch == f"sm_{major}{minor}"
    assert g.max_warps_per_sm * g.warp_size == g.max_threads_per_sm
    assert g.regs_per_sm == 65536 and g.reg_alloc_unit == 256 and g.max_regs_per_thread == 255
    assert g.smem_per_block <= g.smem_per_block_optin <= g.smem_per_sm
    assert g.smem_reserved_per_block == (1024 if major >= 8 else 0)
    assert g.smem_alloc_unit == (128 if major >= 8 else 256)
    assert g.peak_fp32_flops / 1e12 == pytest.approx(PEAK_TFLOPS[name], rel=0.01)
    assert g.max_threads == g.sms * g.max_threads_per_sm


def test_names_are_case_insensitive_and_hashable():
    assert load_gpu("H100") == load_gpu("h100")
    assert len({load_gpu("h100"), load_gpu("h200")}) == 2  # frozen: usable as cache keys


def test_unknown_name_lists_known_ones():
    with pytest.raises(UserError) as e:
        load_gpu("p100")
    msg = str(e.value)
    assert "p100" in msg and all(n in msg for n in known_gpus()) and "\n" not in msg


def test_yaml_path_and_its_errors(tmp_path):
    text = (load_gpu.__globals__["GPU_DIR"] / "h100.yaml").read_text()
    ok = tmp_path / "mine.yaml"
    ok.write_text(text.replace("name: h100", "name: mine"))
    assert load_gpu(str(ok)).name == "mine"
    bad = tmp_path / "bad.yaml"
    bad.write_text("\n".join(l for l in text.splitlines() if not l.startswith("sms:")))
    with pytest.raises(UserError, match=r"bad.yaml: missing field\(s\) sms"):
        load_gpu(str(bad))
    bad.write_text(text.replace("sms: 132", "sms: -4"))
    with pytest.raises(UserError, match="field 'sms' must be an integer > 0"):
        load_gpu(str(bad))


def test_auto_is_a_gpu_or_one_clear_line():
    try:
        g = load_gpu("auto")
    except UserError as e:  # no GPU / driver here: one line that says what to do instead
        msg = str(e)
        assert "\n" not in msg and msg.startswith("--gpu auto:") and "--gpu NAME" in msg and "h100" in msg
    else:
        assert g.sms > 0 and g.arch.startswith("sm_") and g.peak_fp32_flops > 0


def h100_sxm_attributes(**over):
    a = dict(device_name="NVIDIA H100 80GB HBM3", cc_major=9, cc_minor=0, sms=132, warp_size=32,
             max_threads_per_block=1024, max_threads_per_sm=2048, max_blocks_per_sm=32, regs_per_sm=65536,
             regs_per_block=65536, smem_per_sm=233472, smem_per_block=49152, smem_per_block_optin=232448,
             smem_reserved_per_block=1024, clock_khz=1980000, memory_clock_khz=2619000, memory_bus_bits=5120,
             l2_bytes=52428800)
    a.update(over)
    return a


def test_auto_recognises_a_table_gpu():
    g = gpu_from_attributes(h100_sxm_attributes())
    # 2 x 2619 MHz x 5120 bits / 8 = 3352.3 GB/s: the H100 SXM's 3.35 TB/s
    assert g.name == "h100" and g.dram_bandwidth_gbs == pytest.approx(3352.3, abs=0.1)
    assert g.fp32_lanes_per_sm == 128 and g.full_name == "NVIDIA H100 80GB HBM3"


def test_auto_fills_a_new_gpu_from_its_compute_capability():
    # H100 PCIe: 114 SMs, 1755 MHz, 2.0 TB/s: not in the table under its own name
    g = gpu_from_attributes(h100_sxm_attributes(device_name="NVIDIA H100 PCIe", sms=114, clock_khz=1755000,
                                                memory_clock_khz=1593000))
    assert g.name == "nvidia-h100-pcie" and g.sms == 114 and g.boost_clock_mhz == 1755
    assert g.fp32_lanes_per_sm == 128 and g.smem_alloc_unit == 128 and g.arch == "sm_90"
    assert g.peak_fp32_flops / 1e12 == pytest.approx(51.2, rel=0.01)
    # an sm_86 card: lanes from the per-capability table, granularities from the same major (A100)
    g = gpu_from_attributes(h100_sxm_attributes(device_name="NVIDIA GeForce RTX 3090", cc_major=8, cc_minor=6,
                                                sms=82, max_threads_per_sm=1536, max_blocks_per_sm=16))
    assert g.arch == "sm_86" and g.fp32_lanes_per_sm == 128 and g.max_warps_per_sm == 48


def test_auto_unknown_capability_is_a_user_error():
    with pytest.raises(UserError, match="compute capability 6.1"):
        gpu_from_attributes(h100_sxm_attributes(cc_major=6, cc_minor=1, device_name="GTX 1080"))


def test_query_device_plumbing_with_a_fake_driver(monkeypatch):
    """query_device through cuda-python's real enum names, with the driver calls faked as an H100."""
    drv = pytest.importorskip("cuda.bindings.driver")
    from snn.codegen import gpu as gpu_mod
    want = h100_sxm_attributes()
    by_enum = {getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"): want[key]
               for key, name in gpu_mod._ATTRIBUTES.items()}
    ok = drv.CUresult.CUDA_SUCCESS
    monkeypatch.setattr(drv, "cuInit", lambda flags: (ok,))
    monkeypatch.setattr(drv, "cuDeviceGetCount", lambda: (ok, 1))
    monkeypatch.setattr(drv, "cuDeviceGet", lambda i: (ok, i))
    monkeypatch.setattr(drv, "cuDeviceGetName", lambda n, dev: (ok, b"NVIDIA H100 80GB HBM3\0\0"))
    monkeypatch.setattr(drv, "cuDeviceGetAttribute", lambda attr, dev: (ok, by_enum[attr]))
    g = load_gpu("auto")
    assert g.name == "h100" and g.sms == 132 and g.smem_per_block_optin == 232448 and g.arch == "sm_90"
    monkeypatch.setattr(drv, "cuDeviceGetCount", lambda: (ok, 0))
    with pytest.raises(UserError, match="the driver sees no GPU"):
        load_gpu("auto")
    monkeypatch.setattr(drv, "cuInit", lambda flags: (drv.CUresult.CUDA_ERROR_NO_DEVICE,))
    with pytest.raises(UserError, match="--gpu auto: no usable CUDA device"):
        load_gpu("auto")
