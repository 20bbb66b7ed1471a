"""Opening the configured `MemoryStore` (`memory.backend`): SQLite next to the documents, or Redis
shared by every worker of a deployment (SPEC I)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cograg.memory.store import MemoryStore


def open_memory_store(backend: str, directory: Path | str, *, ttl_s: float | None = None,
                      store_id: Callable[[], str] | None = None) -> MemoryStore:
    """`sqlite` → `<directory>/memory.db`; `redis://HOST:PORT/DB` → that Redis database (sessions
    expire there after `ttl_s` idle seconds), under the key prefix of the store `store_id()` names
    (other stores may share the database), or the bare `cograg` prefix without one. An unreachable
    Redis is a one-line StoreError."""
    if backend.startswith(("redis://", "rediss://", "unix://")):
        from cograg.memory.redis_store import RedisMemoryStore, store_prefix

        if store_id is None:
            return RedisMemoryStore(backend, ttl_s=ttl_s)
        return RedisMemoryStore(backend, prefix=store_prefix(store_id()), ttl_s=ttl_s)
    from cograg.memory.sqlite_store import SQLiteMemoryStore

    return SQLiteMemoryStore(directory)


__all__ = ["open_memory_store"]
