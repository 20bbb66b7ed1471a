"""A bounded queue for answer turns: a few run at once, a few more wait, the rest get 429.

A turn is CPU- and model-bound (one heavy model job at a time per process), so running many at
once only makes each slower; a backlog without bound would hold every client until it times out.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from cograg.errors import CogragError


class Busy(CogragError):
    """Every running and waiting slot is taken; the client should retry later (429)."""


class TurnAdmission:
    def __init__(self, max_running: int = 4, max_waiting: int = 16) -> None:
        if max_running < 1 or max_waiting < 0:
            raise ValueError("max_running must be at least 1 and max_waiting at least 0")
        self.max_running = max_running
        self.max_waiting = max_waiting
        self._slots = threading.BoundedSemaphore(max_running)
        self._lock = threading.Lock()
        self.admitted = 0  # running + waiting

    def check(self) -> None:
        """Raise `Busy` if a turn would be refused now (a stream checks before it starts)."""
        with self._lock:
            if self.admitted >= self.max_running + self.max_waiting:
                raise Busy(self._busy())

    def _busy(self) -> str:
        return f"the server is busy ({self.max_running} answers running, {self.max_waiting} waiting); retry later"

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold a running slot for the block; raises `Busy` at once when the queue is full."""
        with self._lock:
            if self.admitted >= self.max_running + self.max_waiting:
                raise Busy(self._busy())
            self.admitted += 1
        try:
            with self._slots:
                yield
        finally:
            with self._lock:
                self.admitted -= 1


__all__ = ["Busy", "TurnAdmission"]
