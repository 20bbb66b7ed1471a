"""The Python API (SPEC F1): `Engine.open(path)` and one method per capability.

Every CLI command is a thin layer over a method here.
"""

from __future__ import annotations

from pathlib import Path

from cograg.config import Settings
from cograg.errors import StoreError
from cograg.index.sqlite_store import SQLiteStore
from cograg.ingest.models import Chunk, Document, IngestSummary
from cograg.ingest.pipeline import ProgressCallback, ingest_paths


class Engine:
    """A document store plus the stages that work on it."""

    def __init__(self, store: SQLiteStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    @classmethod
    def open(cls, path: Path | str | None = None, *, settings: Settings | None = None,
             create: bool = True) -> Engine:
        """Open (or create) the store at `path`, defaulting to `settings.store` (`COGRAG_STORE`)."""
        settings = settings or Settings()
        if path is not None:
            settings = settings.model_copy(update={"store": Path(path)})
        return cls(SQLiteStore(settings.store, create=create), settings)

    def ingest(self, paths: list[Path | str], *, tags: list[str] | None = None,
               acl: list[str] | None = None, progress: ProgressCallback | None = None) -> IngestSummary:
        """Sync files/folders into the store (see :func:`cograg.ingest.pipeline.ingest_paths`)."""
        return ingest_paths(self.store, paths, settings=self.settings, tags=tags, acl=acl,
                            progress=progress)

    def documents(self, *, under: str | None = None) -> list[Document]:
        """All stored documents, sorted by source path."""
        return self.store.list_documents(under=under)

    def document(self, ref: str) -> Document:
        """The one document whose id, id prefix or source path is `ref`."""
        found = self.store.find_documents(ref)
        if not found and Path(ref).exists():
            found = self.store.find_documents(str(Path(ref).resolve()))
        if not found:
            raise StoreError(f"no document matches {ref!r}")
        if len(found) > 1:
            raise StoreError(f"{ref!r} matches {len(found)} documents; give more of the id")
        return found[0]

    def chunks(self, doc_id: str) -> list[Chunk]:
        return list(self.store.iter_chunks(doc_id))

    def delete_document(self, ref: str) -> Document:
        """Delete one document with all of its chunks; returns what was deleted."""
        doc = self.document(ref)
        self.store.delete_document(doc.doc_id)
        return doc

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
