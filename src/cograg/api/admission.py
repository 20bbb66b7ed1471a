"""A bounded queue for answer turns: a few run at once, a few more wait, the rest get 429.

A turn is CPU- and model-bound (one heavy model job at a time per process), so running many at
once only makes each slower; a backlog without bound would hold every client until it times out.
Uploads have a queue of their own (one ingests at a time per process, a few wait): each waiting
one holds a worker thread, so without a bound a burst of uploads behind one long ingest would
take every thread the server has and freeze every other endpoint.

A place in the queue is taken before a request does any work: a stream reserves its place
(`reserve`) before it answers 200, so a full queue is a 429 and never an error event inside a
stream that was already accepted.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from cograg.errors import CogragError

DEFAULT_RETRY_AFTER = 2  # seconds: a turn or an upload ahead of the client is soon done


class Busy(CogragError):
    """Every running and waiting slot is taken; the client should retry later (429, with
    `Retry-After: retry_after`)."""

    def __init__(self, message: str, retry_after: int = DEFAULT_RETRY_AFTER) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Ticket:
    """A place in the queue taken ahead of the work (`TurnAdmission.reserve`): the turn that runs
    takes it over (`TurnAdmission.turn(ticket)`); `release` gives it back if none does (the request
    failed before its turn, the client went away). Releasing twice, or after the turn took it
    over, does nothing."""

    def __init__(self, admission: TurnAdmission) -> None:
        self._admission = admission
        self._held = True  # counted in `admitted` on the ticket's account

    def _take_over(self) -> bool:
        """True if the ticket still held its place, which the caller now holds instead."""
        with self._admission._lock:
            held, self._held = self._held, False
            return held

    def release(self) -> None:
        if self._take_over():
            self._admission._leave()

    @property
    def held(self) -> bool:
        return self._held

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class TurnAdmission:
    def __init__(self, max_running: int = 4, max_waiting: int = 16, *, what: str = "answers",
                 retry_after: int = DEFAULT_RETRY_AFTER) -> None:
        if max_running < 1 or max_waiting < 0:
            raise ValueError("max_running must be at least 1 and max_waiting at least 0")
        self.max_running = max_running
        self.max_waiting = max_waiting
        self.what = what
        self.retry_after = retry_after
        self._slots = threading.BoundedSemaphore(max_running)
        self._lock = threading.Lock()
        self.admitted = 0  # running + waiting (+ reserved)

    def _busy(self) -> str:
        return (f"the server is busy ({self.max_running} {self.what} running, {self.max_waiting} waiting); "
                "retry later")

    def _enter(self) -> None:
        with self._lock:
            if self.admitted >= self.max_running + self.max_waiting:
                raise Busy(self._busy(), self.retry_after)
            self.admitted += 1

    def _leave(self) -> None:
        with self._lock:
            self.admitted -= 1

    def reserve(self) -> Ticket:
        """Take a place in the queue now (`Busy` when it is full) for a turn that starts later."""
        self._enter()
        return Ticket(self)

    @contextmanager
    def turn(self, ticket: Ticket | None = None) -> Iterator[None]:
        """Hold a running slot for the block; raises `Busy` at once when the queue is full. With
        `ticket` (from `reserve`), the place it holds is used; one already given back is as none."""
        if ticket is None or not ticket._take_over():
            self._enter()
        try:
            with self._slots:
                yield
        finally:
            self._leave()


__all__ = ["DEFAULT_RETRY_AFTER", "Busy", "Ticket", "TurnAdmission"]
