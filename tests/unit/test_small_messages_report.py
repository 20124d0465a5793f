"""benchmarks/small_messages.py's report: the machine's speed beside each figure's spread."""
import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, "..", "..", "benchmarks", "small_messages.py")


@pytest.fixture(scope="module")
def sm():
    spec = importlib.util.spec_from_file_location("small_messages_under_test", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_machine_speed_times_the_loop_on_every_cpu(sm, monkeypatch):
    monkeypatch.setattr(sm, "PROBE_ITERS", 20_000)
    reading = sm.machine_speed()
    assert reading is not None and 0 < reading < 5.0


def test_a_figure_that_moved_with_the_machine_is_steady_at_the_machine_speed(sm):
    key = ("minimpi-shm", 2, "latency", 8)
    ref = ("mpich", 2, "latency", 8)
    # the 4th and 5th jobs ran while the machine's loop took twice as long, and so did they
    figures = [2.0e-6, 2.1e-6, 2.0e-6, 4.0e-6, 4.2e-6]
    speeds = [4e-3, 4.2e-3, 4e-3, 8e-3, 8.4e-3]
    stats = sm.summary({key: figures, ref: [1.2e-6] * 5}, {key: speeds, ref: [4e-3] * 5})
    st = stats[key]
    assert st["median"] == pytest.approx(2.1e-6)
    assert st["p90"] / st["median"] > 1.5
    assert st["machine_spread"] == pytest.approx(st["p90"] / st["median"], rel=0.1)
    assert st["spread_at_machine_speed"] == pytest.approx(1.0, abs=0.06)
    line = next(t for t in sm.targets(stats, busy=False) if "one-way Send/Recv, p=2" in t)
    # the verdict stays the raw figure's; the machine's part is shown beside it
    assert line.startswith("- MISSED") and "not steady" in line
    assert "the figure at the machine's speed 1.0" in line


def test_without_a_reading_for_every_job_no_machine_figures(sm):
    key = ("minimpi-shm", 2, "latency", 8)
    stats = sm.summary({key: [2e-6, 2e-6]}, {key: [4e-3, None]})
    assert "machine_spread" not in stats[key]
    assert stats[key]["median"] == pytest.approx(2e-6)
