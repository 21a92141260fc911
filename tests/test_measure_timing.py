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
