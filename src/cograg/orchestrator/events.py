"""In-process event bus: every event of a turn goes to its subscribers (the HTTP layer streams
them) as well as into the trace."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel, Field


class BusEvent(BaseModel):
    trace_id: str
    name: str
    at_ms: float
    state: str
    data: dict[str, Any] = Field(default_factory=dict)


Subscriber = Callable[[BusEvent], None]


class EventBus:
    """Thread-safe publish/subscribe. A failing subscriber is dropped, never breaks the turn."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()
        self.errors: list[str] = []

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Register `fn`; returns a function that unsubscribes it."""
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)
        return unsubscribe

    def publish(self, event: BusEvent) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for fn in subscribers:
            try:
                fn(event)
            except Exception as exc:  # a broken client must not break the answer
                self.errors.append(f"{getattr(fn, '__name__', 'subscriber')}: {type(exc).__name__}: {exc}"[:200])
                with self._lock:
                    if fn in self._subscribers:
                        self._subscribers.remove(fn)

    def stream(self, *, maxsize: int = 1000) -> tuple[Iterator[BusEvent], Callable[[], None]]:
        """A blocking iterator over events (for a streaming client) and its close function."""
        q: queue.Queue[BusEvent | None] = queue.Queue(maxsize=maxsize)

        def put(ev: BusEvent) -> None:
            try:
                q.put_nowait(ev)
            except queue.Full:  # a slow reader loses events rather than blocking the turn
                pass
        unsubscribe = self.subscribe(put)

        def close() -> None:
            unsubscribe()
            q.put(None)

        def it() -> Iterator[BusEvent]:
            while (ev := q.get()) is not None:
                yield ev
        return it(), close
