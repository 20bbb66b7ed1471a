"""Storage and indexes: documents, chunks (and later BM25 and vectors) behind one Protocol."""

from cograg.index.protocols import DocumentStore
from cograg.index.sqlite_store import SCHEMA_VERSION, SQLiteStore, open_store

__all__ = ["SCHEMA_VERSION", "DocumentStore", "SQLiteStore", "open_store"]
