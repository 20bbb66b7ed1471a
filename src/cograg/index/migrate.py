"""Moving a store's chunk search from SQLite to Milvus (SPEC I): `cograg index migrate --to milvus:…`.

SQLite stays the system of record (see `cograg.index.milvus_store`), so a migration copies what
Milvus needs — per chunk its indexed text, its stored dense vector, the document's ACL groups and
tags — from SQLite into a new collection. Nothing is embedded again: the vectors are the stored
ones, byte for byte. Afterwards the store is opened with `COGRAG_INDEX` set to the same target.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from cograg.errors import ConfigError, StoreError
from cograg.index.backends import INDEX_FORMS, milvus_uri
from cograg.index.sqlite_store import SQLiteStore


class MigrationReport(BaseModel):
    """What `migrate_index` did."""

    store: str
    to: str
    uri: str
    documents: int
    chunks: int
    vectors: int
    indexed: int
    rebuilt: bool
    seconds: float


def migrate_index(directory: Path, to: str, *, rebuild: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> MigrationReport:
    """Fill the Milvus index `to` (`milvus:PATH.db` or `milvus:http://…`) from the SQLite store at
    `directory` with its stored vectors. An index already in step with the store is left as it is
    unless `rebuild`. `progress(chunks_done, chunks_total)` follows each batch."""
    uri = milvus_uri(to, directory)
    if uri is None:
        raise ConfigError(f"migrate moves a store to Milvus: --to {INDEX_FORMS.split(' | ', 1)[1]}")
    directory = Path(directory).expanduser()
    with SQLiteStore(directory, create=False) as plain:  # a missing store is a StoreError, not a new one
        documents, chunks = plain.count_documents(), plain.count_chunks()
        vectors = int(plain.conn.execute("SELECT COUNT(*) FROM chunk_vectors").fetchone()[0])
    from cograg.index.milvus_store import MilvusStore  # pymilvus only when migrating

    started = time.perf_counter()
    store = MilvusStore(directory, uri=uri, create=False, progress=progress)
    try:
        rebuilt = store.rebuilt_on_open
        if rebuild and not rebuilt:
            store.rebuild(progress)
            rebuilt = True
        indexed = store.index.count()
    finally:
        store.close()
    if indexed != chunks:
        raise StoreError(f"Milvus at {uri} holds {indexed} chunks after the migration, the store {chunks}")
    return MigrationReport(store=str(directory), to=to, uri=uri, documents=documents, chunks=chunks,
                           vectors=vectors, indexed=indexed, rebuilt=rebuilt,
                           seconds=round(time.perf_counter() - started, 3))
