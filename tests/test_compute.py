"""One heavy model job at a time, on the cores other processes leave free (cograg.models.compute)."""

from __future__ import annotations

import threading
import time

import pytest

from cograg.models import ModelError, compute


def test_fixed_thread_count_from_the_environment(monkeypatch):
    monkeypatch.setenv("COGRAG_LLM_THREADS", "3")
    assert compute.threads_for_next_job(cpus=2) == 3
    monkeypatch.setenv("COGRAG_LLM_THREADS", "zero")
    with pytest.raises(ModelError, match="positive integer"):
        compute.threads_for_next_job()
    monkeypatch.setenv("COGRAG_LLM_THREADS", "0")
    with pytest.raises(ModelError, match="positive integer"):
        compute.threads_for_next_job()


class FakeClock:
    """System and own CPU seconds that advance as the test says (the case data)."""

    def __init__(self) -> None:
        self.system = 100.0
        self.own = 10.0

    def run(self, monkeypatch, others_cores: float, own_cores: float, wall: float = 0.2) -> None:
        self.system += (others_cores + own_cores) * wall
        self.own += own_cores * wall


@pytest.mark.parametrize(("others", "own", "expected"), [
    (0.0, 0.0, 2),   # idle machine: every core
    (0.0, 1.9, 2),   # this process's own work does not count against it
    (0.3, 0.0, 2),   # background noise
    (1.0, 0.0, 1),   # one core busy elsewhere: one thread
    (2.0, 0.0, 1),   # all busy: still one
])
def test_threads_follow_the_cores_other_processes_use(monkeypatch, others, own, expected):
    monkeypatch.delenv("COGRAG_LLM_THREADS", raising=False)
    clock = FakeClock()
    monkeypatch.setattr(compute, "_system_busy_s", lambda: clock.system)
    monkeypatch.setattr(compute, "_own_cpu_s", lambda: clock.own)
    gauge = compute.CoreGauge()
    monkeypatch.setattr(compute, "_GAUGE", gauge)
    # first reading, then the interval the test describes
    real_sleep = time.sleep

    def sleep_and_run(s: float) -> None:
        clock.run(monkeypatch, others, own, wall=s)
        real_sleep(s)

    monkeypatch.setattr(compute.time, "sleep", sleep_and_run)
    assert compute.threads_for_next_job(cpus=2) == expected


def test_without_proc_stat_all_cores_are_used(monkeypatch):
    monkeypatch.delenv("COGRAG_LLM_THREADS", raising=False)
    monkeypatch.setattr(compute, "_system_busy_s", lambda: None)
    monkeypatch.setattr(compute, "_GAUGE", compute.CoreGauge())
    assert compute.threads_for_next_job(cpus=4) == 4


def test_the_real_gauge_reads_this_machine():
    others = compute.CoreGauge().others_busy_cores()
    assert others is None or 0.0 <= others <= compute.usable_cpus() + 0.5


def test_heavy_jobs_of_one_process_run_one_at_a_time():
    inside = []
    overlap = []

    def job(i: int) -> None:
        with compute.COMPUTE_LOCK:
            inside.append(i)
            if len(inside) > 1:
                overlap.append(i)
            time.sleep(0.02)
            inside.remove(i)

    threads = [threading.Thread(target=job, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap == []
