"""One heavy model job at a time per process, on the cores that are actually free.

llama.cpp's worker threads spin at barriers: with as many threads as cores, one other busy process
(a test run next door, another model job) makes generation collapse (measured on 2 shared cores:
about 1 token/s with 2 threads against 5–7 with 1 while another job ran; on idle cores 2 threads
are the faster, see docs/benchmarks.md). So:

- `COMPUTE_LOCK` serialises the heavy jobs of one process (LLM calls, embedding batches): two of
  them in parallel only fight over the same cores (the DAG executor's parallel tasks wait here);
- `threads_for_next_job()` picks the thread count for the next job from the cores other processes
  left free over the last moment, so an idle machine gets all of its cores and a busy one does not
  make llama.cpp's threads wait for each other.

`$COGRAG_LLM_THREADS` fixes the count instead.
"""

from __future__ import annotations

import os
import threading
import time

from cograg.models import ModelError

COMPUTE_LOCK = threading.RLock()
THREADS_ENV = "COGRAG_LLM_THREADS"
# the sample `threads_for_next_job` takes when the last one is older than this (seconds)
_MAX_SAMPLE_AGE_S = 2.0
_MIN_SAMPLE_S = 0.05


def usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def fixed_threads() -> int | None:
    """$COGRAG_LLM_THREADS as a positive integer, None when unset; ModelError when malformed."""
    env = os.environ.get(THREADS_ENV, "").strip()
    if not env:
        return None
    try:
        n = int(env)
    except ValueError:
        raise ModelError(f"${THREADS_ENV} must be a positive integer, got {env!r}") from None
    if n < 1:
        raise ModelError(f"${THREADS_ENV} must be a positive integer, got {env!r}")
    return n


def _system_busy_s() -> float | None:
    """Seconds of CPU time all processes have used since boot on the CPUs this process may run on
    (the `cpuN` lines of /proc/stat), None off Linux."""
    try:
        allowed = {f"cpu{i}" for i in os.sched_getaffinity(0)}
        busy = 0
        with open("/proc/stat", encoding="ascii") as fh:
            for line in fh:
                name, _, rest = line.partition(" ")
                if name not in allowed:
                    continue
                fields = [int(x) for x in rest.split()]
                busy += sum(fields[:8]) - fields[3] - (fields[4] if len(fields) > 4 else 0)  # minus idle, iowait
    except (AttributeError, OSError, ValueError):
        return None
    return busy / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class CoreGauge:
    """How many cores other processes keep busy: system CPU time minus this process's own, over
    the time since the previous reading (at least `_MIN_SAMPLE_S`, sleeping for the rest)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[float, float, float] | None = None

    def _reading(self) -> tuple[float, float, float] | None:
        busy = _system_busy_s()
        return None if busy is None else (time.monotonic(), busy, _own_cpu_s())

    def others_busy_cores(self) -> float | None:
        with self._lock:
            last = self._last
            now = self._reading()
            if now is None:
                return None
            if last is None or now[0] - last[0] > _MAX_SAMPLE_AGE_S:
                last = now
            if now[0] - last[0] < _MIN_SAMPLE_S:
                time.sleep(_MIN_SAMPLE_S - (now[0] - last[0]))
                now = self._reading() or now
            self._last = now
            wall = now[0] - last[0]
            others = (now[1] - last[1]) - (now[2] - last[2])
            return max(0.0, others / wall) if wall > 0 else 0.0


_GAUGE = CoreGauge()


def threads_for_next_job(cpus: int | None = None) -> int:
    """$COGRAG_LLM_THREADS, else the usable CPUs minus those other processes keep busy (a core
    counts as taken above 40 % use), at least 1."""
    fixed = fixed_threads()
    if fixed is not None:
        return fixed
    cpus = cpus or usable_cpus()
    others = _GAUGE.others_busy_cores()
    if others is None:
        return cpus
    return max(1, min(cpus, cpus - int(others + 0.6)))
