"""One SQLite connection shared safely by the threads of a process.

A store's connection is used by several threads at once: the search pool runs BM25 next to the
vector search, the DAG executor runs plan tasks in parallel, the HTTP service answers requests on
worker threads. SQLite itself is built serialized here (`sqlite3.threadsafety == 3`), but CPython's
`sqlite3` module is not safe when two threads step statements of one connection at the same time:
its statement cache hands both the same prepared statement, and interleaved `step`/`reset` calls
crash the interpreter (python/cpython#146471; seen here once in a parallel R3 test, inside a search
worker). `SerializedConnection` runs each statement to completion, rows fetched, under one lock,
so no statement is ever shared mid-flight; a caller gets its rows as a list-backed result.

Transactions keep their meaning: `BEGIN IMMEDIATE … COMMIT` are statements like any other (a
write transaction spans several calls, as it did before, and other threads' statements between
them see its uncommitted rows, as they did before — the store only writes from one thread at a time).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from typing import Any


class StatementResult:
    """The rows of one finished statement, read like a cursor (iterate, fetchone, fetchall)."""

    __slots__ = ("_rows", "_next", "rowcount", "lastrowid", "description")

    def __init__(self, rows: list[Any], rowcount: int, lastrowid: int | None, description: Any) -> None:
        self._rows = rows
        self._next = 0
        self.rowcount = rowcount
        self.lastrowid = lastrowid
        self.description = description

    def fetchone(self) -> Any:
        if self._next >= len(self._rows):
            return None
        row = self._rows[self._next]
        self._next += 1
        return row

    def fetchall(self) -> list[Any]:
        rest = self._rows[self._next:]
        self._next = len(self._rows)
        return rest

    def __iter__(self) -> Iterator[Any]:
        while self._next < len(self._rows):
            yield self.fetchone()


class SerializedConnection:
    """The subset of `sqlite3.Connection` the stores use, every call under one re-entrant lock."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = threading.RLock()

    @property
    def row_factory(self) -> Any:
        return self._conn.row_factory

    @row_factory.setter
    def row_factory(self, factory: Any) -> None:
        with self._lock:
            self._conn.row_factory = factory

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def execute(self, sql: str, parameters: Any = ()) -> StatementResult:
        with self._lock:
            cursor = self._conn.execute(sql, parameters)
            try:
                rows = cursor.fetchall() if cursor.description is not None else []
                return StatementResult(rows, cursor.rowcount, cursor.lastrowid, cursor.description)
            finally:
                cursor.close()

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any]) -> StatementResult:
        with self._lock:
            cursor = self._conn.executemany(sql, seq_of_parameters)
            try:
                return StatementResult([], cursor.rowcount, cursor.lastrowid, cursor.description)
            finally:
                cursor.close()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
