"""Progress of `cograg ingest` and every `cograg eval` command on stderr (stdout stays for results).

On a terminal: rich progress bars (files, chunks, passages embedded, queries). Elsewhere (a log
file, a pipe, CI): one plain line at most every `PLAIN_INTERVAL_S` seconds, so a long run still
shows it is moving, and a short one prints nothing.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from cograg.ingest.pipeline import ProgressEvent

PLAIN_INTERVAL_S = 10.0


class RunProgress:
    """Context manager with two callbacks: `on_ingest(ProgressEvent)` and
    `on_query(mode, done, total)`."""

    def __init__(self, console: Console, *, queries: bool = False) -> None:
        self.console = console
        self.started = time.monotonic()
        self._last_line = self.started
        self._ingest: ProgressEvent | None = None
        self._query: tuple[str, int, int] | None = None
        self._bar: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        if console.is_terminal:
            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=console, transient=True)
            self._tasks["ingest"] = self._bar.add_task("ingest", total=None, detail="files")
            if queries:
                self._tasks["queries"] = self._bar.add_task("queries", total=None, detail="")

    def __enter__(self) -> RunProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()

    def on_ingest(self, ev: ProgressEvent) -> None:
        self._ingest = ev
        detail = f"files · {ev.chunks_written} chunks"
        if ev.passages_embedded:
            detail += f" · {ev.passages_embedded} passages embedded"
        if self._bar is not None:
            self._bar.update(self._tasks["ingest"], total=ev.files_total, completed=ev.files_done, detail=detail)
        else:
            self._plain()

    def on_query(self, mode: str, done: int, total: int) -> None:
        self._query = (mode, done, total)
        if self._bar is not None:
            self._bar.update(self._tasks["queries"], description=f"queries ({mode})", total=total, completed=done)
        else:
            self._plain()

    def _plain(self) -> None:
        now = time.monotonic()
        if now - self._last_line < PLAIN_INTERVAL_S:
            return
        self._last_line = now
        parts: list[Any] = []
        if self._ingest is not None:
            ev = self._ingest
            parts.append(f"ingest {ev.files_done}/{ev.files_total} files, {ev.chunks_written} chunks"
                         + (f", {ev.passages_embedded} passages embedded" if ev.passages_embedded else ""))
        if self._query is not None:
            mode, done, total = self._query
            parts.append(f"queries ({mode}) {done}/{total}")
        self.console.print(f"progress: {'; '.join(parts)} ({now - self.started:.0f} s)", highlight=False,
                           soft_wrap=True)
