"""Per-key request counters that every worker process of one deployment shares (issue 15).

`cograg serve --workers N` runs N processes; a counter in each process's memory would let a key
make N times its limit. The counters live where the workers already meet:

* in the store's SQLite file (`<store>/cograg.db`, table `rate_limits`), one row per key and
  window, updated in one short `BEGIN IMMEDIATE` transaction, which serialises the workers;
* in Redis when memory is configured on Redis (`COGRAG_MEMORY=redis://…`): `limits`' Redis storage,
  whose increment is one Lua script (INCRBY, and EXPIRE on a new key), atomic on the server.

Both are fixed windows (`limits.FixedWindowRateLimiter`): within one window a key is admitted at
most its limit, however many processes count. The table is service state, not document schema:
it is created if missing and does not change the store's schema version.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from limits.storage import MemoryStorage, RedisStorage, Storage

from cograg.config import Settings
from cograg.errors import CogragError, StoreError
from cograg.index.sqlite_store import SQLiteStore

REDIS_KEY_PREFIX = "cograg:rate"
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_PRUNE_EVERY = 256  # increments between sweeps of expired rows
_OPEN_ATTEMPTS = 3

RATE_TABLE = """
CREATE TABLE IF NOT EXISTS rate_limits (
    key TEXT PRIMARY KEY,
    hits INTEGER NOT NULL,
    expires_at REAL NOT NULL
)"""

# a window that ran out starts again at `amount`; within it, the hits add up
_INCR = """
INSERT INTO rate_limits(key, hits, expires_at) VALUES(?1, ?2, ?3)
ON CONFLICT(key) DO UPDATE SET
    hits = CASE WHEN rate_limits.expires_at <= ?4 THEN excluded.hits ELSE rate_limits.hits + excluded.hits END,
    expires_at = CASE WHEN rate_limits.expires_at <= ?4 THEN excluded.expires_at ELSE rate_limits.expires_at END
RETURNING hits"""


class RateStoreUnavailable(CogragError):
    """The shared rate counters cannot be read or written (503): requests are refused, not let through."""


class SQLiteRateStorage(Storage):
    """A `limits` storage (fixed windows) in the `rate_limits` table of `<store>/cograg.db`.

    The store is opened on first use (so a server may start before anything is ingested) with one
    connection per process, shared by its threads under a lock."""

    STORAGE_SCHEME = None  # built by `rate_storage`, never from a URI

    def __init__(self, store_dir: Path | str, *, wrap_exceptions: bool = True) -> None:
        super().__init__(None, wrap_exceptions=wrap_exceptions)
        self.store_dir = Path(store_dir).expanduser()
        self._lock = threading.Lock()
        self._store: SQLiteStore | None = None
        self._increments = 0

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return (sqlite3.Error, CogragError)

    def _open(self) -> SQLiteStore:
        if self._store is None:
            for attempt in range(_OPEN_ATTEMPTS):
                try:  # creates or migrates the store like any engine would
                    store = SQLiteStore(self.store_dir)
                    break
                except StoreError:
                    # two processes creating one new store race on its first migration; the
                    # loser finds it migrated on the next try
                    if attempt == _OPEN_ATTEMPTS - 1:
                        raise
                    time.sleep(0.05 * (attempt + 1))
            store.conn.execute(RATE_TABLE)
            self._store = store
        return self._store

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        now = time.time()
        with self._lock:
            store = self._open()
            with store.transaction() as conn:
                hits = int(conn.execute(_INCR, (key, amount, now + expiry, now)).fetchone()[0])
                self._increments += 1
                if self._increments % _PRUNE_EVERY == 0:
                    conn.execute("DELETE FROM rate_limits WHERE expires_at <= ?", (now,))
        return hits

    def _row(self, key: str) -> tuple[int, float] | None:
        with self._lock:
            row = self._open().conn.execute("SELECT hits, expires_at FROM rate_limits WHERE key=?", (key,)).fetchone()
        if row is None or float(row[1]) <= time.time():
            return None
        return int(row[0]), float(row[1])

    def get(self, key: str) -> int:
        row = self._row(key)
        return row[0] if row else 0

    def get_expiry(self, key: str) -> float:
        row = self._row(key)
        return row[1] if row else time.time()

    def check(self) -> bool:
        try:
            with self._lock:
                self._open().conn.execute("SELECT 1").fetchone()
            return True
        except (sqlite3.Error, CogragError):
            return False

    def reset(self) -> int | None:
        with self._lock:
            store = self._open()
            with store.transaction() as conn:
                return conn.execute("DELETE FROM rate_limits").rowcount

    def clear(self, key: str) -> None:
        with self._lock:
            store = self._open()
            with store.transaction() as conn:
                conn.execute("DELETE FROM rate_limits WHERE key=?", (key,))

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


def redis_rate_storage(url: str) -> RedisStorage:
    """`limits`' Redis storage on the memory's Redis; errors surface as `limits.errors.StorageError`."""
    if url.startswith("unix://"):
        url = "redis+unix://" + url.removeprefix("unix://")
    return RedisStorage(url, key_prefix=REDIS_KEY_PREFIX, wrap_exceptions=True, socket_connect_timeout=3.0,
                        socket_timeout=10.0)


def rate_storage(settings: Settings) -> Storage:
    """Where this deployment's workers count requests: the memory's Redis, else the store's SQLite file."""
    backend = settings.memory.backend
    if backend.startswith(_REDIS_SCHEMES):
        return redis_rate_storage(backend)
    return SQLiteRateStorage(settings.store)


def process_storage() -> Storage:
    """Counters in this process only: for a gatekeeper built without settings (one process)."""
    return MemoryStorage()


__all__ = ["RATE_TABLE", "REDIS_KEY_PREFIX", "RateStoreUnavailable", "SQLiteRateStorage", "process_storage",
           "rate_storage", "redis_rate_storage"]
