"""Which index backend a store uses (`COGRAG_INDEX`, SPEC I).

* `sqlite` (default): everything in `<store>/cograg.db`.
* `milvus:PATH.db`: search on Milvus Lite in that file (relative paths are inside the store).
* `milvus:http://host:19530` (or https): search on a Milvus server.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from cograg.errors import ConfigError
from cograg.index.indexing import ChunkIndexer
from cograg.index.sqlite_schema import DB_NAME
from cograg.index.sqlite_store import SQLiteStore

INDEX_FORMS = "sqlite | milvus:PATH.db | milvus:http://HOST:PORT"
# the SQLite databases in a store's folder: the documents' and the memory's (cograg.memory.sqlite_store)
STORE_DATABASES = (DB_NAME, "memory.db")


def milvus_uri(spec: str, store_dir: Path) -> str | None:
    """The Milvus URI named by an index spec, None for `sqlite`; a malformed spec is a ConfigError."""
    spec = spec.strip()
    if spec == "sqlite":
        return None
    kind, sep, target = spec.partition(":")
    if kind != "milvus" or not sep or not target.strip():
        raise ConfigError(f"unknown index {spec!r}: use {INDEX_FORMS}")
    target = target.strip()
    if target.startswith(("http://", "https://", "tcp://")):
        return _server_uri(target)
    if not target.endswith(".db"):
        raise ConfigError(f"a Milvus Lite index is a file ending in .db, got {target!r} (use {INDEX_FORMS})")
    path = Path(target).expanduser()
    if path.is_absolute():
        return str(path)
    store = Path(store_dir).expanduser()
    inside = (store / path).resolve()
    if not inside.is_relative_to(store.resolve()):  # "../x.db" is no path inside the store
        raise ConfigError(f"a relative Milvus Lite path stays inside the store, got {target!r}: "
                          "give an absolute path for a file elsewhere")
    if inside.parent == store.resolve() and inside.name in STORE_DATABASES:
        # Milvus Lite would take over the store's own database (sessions could never open again)
        raise ConfigError(f"{inside.name} is the store's own database: name the Milvus Lite file otherwise")
    return str(store / path)


def _server_uri(target: str) -> str:
    """`target` if it names a Milvus server (a host, and a port that is a number); else a ConfigError
    (for "http://" the client said it could not reach localhost:19530)."""
    parts = urlsplit(target)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise ConfigError(f"the Milvus server URI {target!r} has no valid port (use {INDEX_FORMS})") from None
    if not parts.hostname:
        raise ConfigError(f"the Milvus server URI {target!r} names no host (use {INDEX_FORMS})")
    return target


def open_store_with_index(directory: Path, index: str = "sqlite", *, create: bool = True,
                          indexer: ChunkIndexer | None = None) -> SQLiteStore:
    """The store at `directory` with its chunk search on the backend `index` names."""
    uri = milvus_uri(index, directory)
    if uri is None:
        return SQLiteStore(directory, create=create, indexer=indexer)
    from cograg.index.milvus_store import MilvusStore

    return MilvusStore(directory, uri=uri, create=create, indexer=indexer)
