"""measure.timing without a GPU: the CUDA-event timing loop against a fake torch.cuda."""
import pytest

from snn.runtime.measure import timing


class _FakeEvent:
    clock = [0.0]

    def __init__(self, enable_timing=True):
        self.t = None

    def record(self):
        self.t = _FakeEvent.clock[0]

    def elapsed_time(self, other):
        return other.t - self.t


class _FakeTorch:
    """Enough of torch.cuda for event_times_us: each run advances a fake clock by its own duration (ms)."""

    def __init__(self):
        self.sleeps = []
        outer = self

        class cuda:
            Event = _FakeEvent

            @staticmethod
            def _sleep(cycles):
                outer.sleeps.append(cycles)

            @staticmethod
            def synchronize():
                pass
        self.cuda = cuda


def test_event_times_us_sleeps_ahead_of_the_host_and_flushes_every_run():
    torch, calls = _FakeTorch(), []
    durations = iter([0.01 * (i + 1) for i in range(200)])

    def run():  # the timed work: advances the device clock
        calls.append("run")
        _FakeEvent.clock[0] += next(durations)

    times, info = timing.event_times_us(torch, [run], lambda: calls.append("flush"), reps=70, sync=lambda: None)
    assert len(times) == 70
    # 3 untimed runs measure the host's enqueue cost, then every timed run follows its own flush
    assert calls[:6] == ["flush", "run"] * 3 and calls[6:] == ["flush", "run"] * 70
    assert times == pytest.approx([10.0 * (i + 4) for i in range(70)])  # µs, the runs after the three untimed
    # two chunks (64 + 6 runs), each behind a sleep covering 100 µs + 1.5 x its runs' host cost
    assert len(torch.sleeps) == 2 and torch.sleeps[0] > torch.sleeps[1] >= 100 * timing._CYCLES_PER_US
    assert info["host_enqueue_us"] >= 0 and info["sleep_us"] >= 100.0


def test_kernel_sum_adds_each_activity_per_call_by_kind(monkeypatch):
    """CUPTI's activities of `iters` calls (torch.profiler, faked): per call, their total, count and kinds; CPU-side
    events are not counted."""
    torch = pytest.importorskip("torch")
    profiler = pytest.importorskip("torch.profiler")

    class Ev:
        def __init__(self, name, us, device="DeviceType.CUDA"):
            self.name, self.device_type = name, device
            self.time_range = type("R", (), {"elapsed_us": lambda s: us})()

    class Prof:
        def __init__(self, activities):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def events(self):
            return [Ev("sconv_a", 10.0), Ev("sconv_a", 12.0), Ev("snn_epilogue", 4.0), Ev("Memset (Device)", 2.0),
                    Ev("aten::conv2d", 99.0, "DeviceType.CPU")]

    monkeypatch.setattr(profiler, "profile", Prof)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(timing, "_profiled", False)   # restored after: a later in-process bench must not exit pytest
    calls = []
    got = timing.kernel_sum(torch, lambda: calls.append(1), iters=2)
    assert len(calls) == 3   # one warm-up call, then the two profiled
    assert got["kernel_sum_ms"] == 0.014 and got["activities_per_call"] == 2.0
    assert got["by_kind"] == {"sparse conv": {"per_call": 1.0, "ms": 0.011}, "epilogue": {"per_call": 0.5, "ms": 0.002},
                              "memset": {"per_call": 0.5, "ms": 0.001}}
    assert list(got["by_kind"]) == ["sparse conv", "epilogue", "memset"]   # largest first
    assert timing._profiled   # what exit_skipping_teardown goes by


def test_activity_kinds_name_snns_own_convs_apart_from_cudnn():
    from snn.runtime.measure.timing import activity_kind
    assert activity_kind("sconv_r1s1_str1_pad0_c64n64_h56w56_th1tw8tc16_t32n2_b1") == "sparse conv"
    assert activity_kind("dconv_r3s3_str1_pad1_c256n256_h14w14_m32n64k4t128_b1") == "dense conv (snn)"
    assert activity_kind("dirconv_r7s7_str2_pad3_c3n64_h224w224_t4x8n128nchw_b1") == "dense conv (snn)"   # not cuDNN's
    assert activity_kind("dpair_r1s1_str1_pad0_c256n1024_h14w14_n256_m32n64t128s1p2_b1") == "conv pair (snn)"
    assert activity_kind("tconv_r3s3_str1_pad1_c256n256_h14w14_m64n64k8s3c64_b1_bf16") == "tensor-core conv (snn)"
    assert activity_kind("void convolve_common_engine_float_NHWC<float>") == "cuDNN conv / gemm"
    assert activity_kind("snn_epilogue") == "epilogue" and activity_kind("snn_maxpool") == "other"


@pytest.mark.parametrize("profiled", [True, False])
def test_a_process_that_profiled_exits_without_teardown_its_output_flushed(tmp_path, profiled):
    """After CUPTI ran, exit_skipping_teardown ends the process at once with the code given, buffered output still
    written and no atexit handler run (the teardown that aborted); without a profile it returns and Python exits
    as usual."""
    import subprocess
    import sys
    script = tmp_path / "p.py"
    script.write_text(
        "import atexit, sys\n"
        "from snn.runtime.measure import timing\n"
        f"timing._profiled = {profiled}\n"
        "atexit.register(lambda: print('teardown ran'))\n"
        "print('results written', end='')\n"
        "sys.stderr.write('note')\n"
        "timing.exit_skipping_teardown(3)\n"
        "print(' and returned')\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    if profiled:
        assert (p.returncode, p.stdout, p.stderr) == (3, "results written", "note")
    else:
        assert p.returncode == 0 and p.stdout == "results written and returned\nteardown ran\n"


def test_bench_kernel_sums_fill_each_snn_record_after_the_times(monkeypatch):
    """bench e2e's CUPTI sums run last (e2e._kernel_sums: CUPTI stays attached and slows later launches): each
    record gets its graph's kernel sum, the replay time taken before it, their ratio and activities per conv."""
    from snn.runtime.measure import e2e

    class Runner:
        def __init__(self):
            self.replayed = []

        def replayer(self, x):
            return lambda: self.replayed.append(x)

    sums = []

    def fake_sum(torch, fn):
        fn()
        sums.append(fn)
        return {"kernel_sum_ms": 2.0, "activities_per_call": 120.0}

    monkeypatch.setattr(e2e, "kernel_sum", fake_sum)
    runs = [({"replay_ms": 2.5, "convs": 155, "median_ms": 2.6}, Runner(), "x1"),
            ({"replay_ms": 1.0, "convs": 40, "median_ms": 1.1}, Runner(), "x2")]
    e2e._kernel_sums(None, runs)
    assert len(sums) == 2 and [r.replayed for _, r, _ in runs] == [["x1"], ["x2"]]
    first, second = runs[0][0], runs[1][0]
    assert "replay_ms" not in first and first["median_ms"] == 2.6
    assert first["kernel_sum"] == {"kernel_sum_ms": 2.0, "activities_per_call": 120.0, "replay_ms": 2.5,
                                   "replay_over_kernel_sum": 1.25, "activities_per_conv": 0.774}
    assert second["kernel_sum"]["replay_over_kernel_sum"] == 0.5 and second["kernel_sum"]["activities_per_conv"] == 3.0
