"""A store whose chunk search runs on Milvus (SPEC I): `COGRAG_INDEX=milvus:…`.

What lives where, and why:

* **SQLite (`<store>/cograg.db`) stays the system of record**: documents, their tags and ACL,
  chunk text and offsets, the embedding cache and its vectors, traces. One document is written in
  one SQLite transaction (Milvus has no multi-row transactions), a search reads full rows only for
  the few hits it returns, and the whole Milvus index can be rebuilt from SQLite at any time
  without re-embedding — which is also how an existing SQLite store moves to Milvus: open it with
  a Milvus index and the collection is filled from the stored vectors.
* **Milvus holds the search index**: per chunk the dense vector, the BM25 sparse vector (computed
  by Milvus from the indexed text), and the document's ACL groups and tags as filter fields
  (`cograg.index.milvus_index`). `keyword_search` and `vector_search` answer from Milvus with the
  same signature and result shape as `SQLiteStore`'s, so the retriever does not know which runs.

Keeping the two consistent:

* Before a document is replaced, re-tagged or deleted its chunks are removed from Milvus, so no
  search can return them under an ACL that no longer applies; after the SQLite commit (or
  rollback) the document's current chunks are pushed again from SQLite.
* Each such document is marked pending in SQLite's `meta` table before Milvus is touched and
  unmarked once Milvus has its current state. Opening the store re-syncs pending documents (a
  crash in between) and rebuilds the collection when its chunk count differs from SQLite's.
* `meta` also records the store generation Milvus last matched (per Milvus URI). A write made
  without the Milvus index (a command run without `COGRAG_INDEX`) bumps the generation but marks
  nothing pending and may keep the chunk count, e.g. an ACL change; opening the store then finds
  the generations apart and rebuilds, so no search answers under an ACL that no longer applies.
  Milvus search hits whose rowid no longer exists in SQLite are dropped when rows are read.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from cograg.documents import Document
from cograg.index.indexing import ChunkIndexer, index_text
from cograg.index.milvus_index import IndexRow, MilvusIndex
from cograg.index.sqlite_rows import SQLiteDocumentWriter, chunk_from_row
from cograg.index.sqlite_store import SQLiteStore

_PENDING = "milvus_pending:"
_SYNCED = "milvus_synced_generation:"  # + the Milvus URI: the store generation that index last matched
_BATCH = 500


class MilvusStore(SQLiteStore):
    """Documents in SQLite, chunk search (BM25, vectors, ACL/tag filters) in Milvus at `uri`
    (`http://host:19530`, or a Milvus Lite `PATH.db`)."""

    def __init__(self, directory: Path, *, uri: str, create: bool = True, indexer: ChunkIndexer | None = None,
                 timeout_s: float = 10.0, progress: Callable[[int, int], None] | None = None) -> None:
        super().__init__(directory, create=create, indexer=indexer)
        try:
            self.index = MilvusIndex(uri, self.collection_name(), timeout_s=timeout_s)
            self.rebuilt_on_open = self.reconcile(progress)
        except BaseException:
            self.conn.close()
            raise

    def collection_name(self) -> str:
        """One collection per store (several stores may share a Milvus server)."""
        store_id = self.get_meta("store_id")
        if store_id is None:
            with self.transaction():
                store_id = self.get_meta("store_id") or uuid.uuid4().hex
                self.set_meta("store_id", store_id)
        return f"cograg_{store_id[:16]}"

    # ------------------------------------------------------------------ consistency
    def _dim(self) -> int | None:
        dim = self.get_meta("embedding_dim")
        return int(dim) if dim and self.has_vectors() else None

    def pending_documents(self) -> list[str]:
        # the keys from "milvus_pending:" up to "milvus_pending;" (';' sorts right after ':')
        return [r[0][len(_PENDING):] for r in self.conn.execute(
            "SELECT key FROM meta WHERE key >= ? AND key < ?", (_PENDING, _PENDING[:-1] + ";"))]

    def _mark(self, doc_ids: Iterable[str]) -> None:
        with self.transaction() as conn:
            conn.executemany("INSERT OR IGNORE INTO meta(key, value) VALUES(?, '1')",
                             [(_PENDING + d,) for d in doc_ids])

    def _unmark(self, doc_ids: Iterable[str]) -> None:
        with self.transaction() as conn:
            conn.executemany("DELETE FROM meta WHERE key=?", [(_PENDING + d,) for d in doc_ids])

    def reconcile(self, progress: Callable[[int, int], None] | None = None) -> bool:
        """Bring Milvus to SQLite's state: rebuild when the collection is missing, has an older
        schema, the wrong vector dimension or a different chunk count; otherwise re-sync the pending
        documents. Returns whether the collection was rebuilt."""
        if not self.index.exists() or self.index.dim != self._dim() or not self.index.has_current_schema:
            self.rebuild(progress)
            return True
        pending = self.pending_documents()
        if pending:
            self._sync(pending)
        if self.index.count() != self.count_chunks() or self.get_meta(self._synced_key()) != self.generation():
            self.rebuild(progress)
            return True
        return False

    def _synced_key(self) -> str:
        return _SYNCED + self.index.uri

    def _record_synced(self, generation: str) -> None:
        with self.transaction():
            self.set_meta(self._synced_key(), generation)

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Recreate the Milvus collection from SQLite (stored vectors, no embedding). Returns the
        number of chunks indexed; `progress(chunks_done, chunks_total)` follows each batch."""
        generation = self.generation()  # read first: a write during the rebuild leaves it behind
        self.index.create(self._dim())
        doc_ids = [r[0] for r in self.conn.execute("SELECT doc_id FROM documents ORDER BY doc_id")]
        total = self.count_chunks() if progress else 0
        done = 0
        for i in range(0, len(doc_ids), _BATCH):
            rows = self._rows(doc_ids[i:i + _BATCH])
            self.index.upsert(rows)
            done += len(rows)
            if progress:
                progress(done, total)
        self.index.flush()  # a bulk load ends sealed and indexed, not in Milvus Lite's scanned memory table
        self._unmark(self.pending_documents())
        self._record_synced(generation)
        return done

    def _sync(self, doc_ids: Iterable[str]) -> None:
        """Milvus gets exactly the chunks SQLite now has for these documents."""
        ids = sorted(set(doc_ids))
        if self.index.dim != self._dim():  # the first vectors arrived (or the last left)
            self.rebuild()
            return
        self.index.delete_documents(ids)
        for i in range(0, len(ids), _BATCH):
            self.index.upsert(self._rows(ids[i:i + _BATCH]))
        self._unmark(ids)

    def _rows(self, doc_ids: list[str]) -> list[IndexRow]:
        if not doc_ids:
            return []
        marks = ",".join("?" * len(doc_ids))
        access: dict[str, tuple[list[str], list[str]]] = {d: ([], []) for d in doc_ids}
        for doc_id, grp in self.conn.execute(f"SELECT doc_id, grp FROM document_acl WHERE doc_id IN ({marks})",
                                             doc_ids):
            access[doc_id][0].append(grp)
        for doc_id, tag in self.conn.execute(f"SELECT doc_id, tag FROM document_tags WHERE doc_id IN ({marks})",
                                             doc_ids):
            access[doc_id][1].append(tag)
        rows = []
        for row in self.conn.execute(
                "SELECT c.*, d.title AS doc_title, v.vec AS vec FROM chunks c JOIN documents d ON d.doc_id = c.doc_id "
                f"LEFT JOIN chunk_vectors v ON v.chunk_rowid = c.id WHERE c.doc_id IN ({marks}) ORDER BY c.id",
                doc_ids):
            data = dict(row)
            rowid, title, vec = int(data["id"]), data.pop("doc_title"), data.pop("vec")
            chunk = chunk_from_row(data)
            acl, tags = access[chunk.doc_id]
            rows.append(IndexRow(rowid=rowid, doc_id=chunk.doc_id, text=index_text(chunk, title),
                                 vector=None if vec is None else np.frombuffer(vec, dtype=np.float32),
                                 acl=acl, tags=tags))
        return rows

    @contextmanager
    def _changing(self, doc_ids: set[str]) -> Iterator[None]:
        """Hide the documents from search while SQLite changes them, then push their new state.
        Milvus stays in step with the store's generation only if it was before and this write was
        the only one since (one commit, one step); else the next open rebuilds."""
        before = self.generation()
        in_step = self.get_meta(self._synced_key()) == before
        self._mark(doc_ids)
        self.index.delete_documents(doc_ids)
        try:
            yield
        finally:
            self._sync(doc_ids)
            after = self.generation()
            if in_step and after.isdigit() and before.isdigit() and int(after) <= int(before) + 1:
                self._record_synced(after)

    # ------------------------------------------------------------------ writes (SQLite first, then Milvus)
    @contextmanager
    def write_document(self, doc: Document) -> Iterator[SQLiteDocumentWriter]:
        old = self.get_document_by_path(doc.source_path)
        with self._changing({doc.doc_id} | ({old.doc_id} if old else set())):
            with super().write_document(doc) as writer:
                yield writer

    def update_document_metadata(self, doc: Document) -> None:
        with self._changing({doc.doc_id}):
            super().update_document_metadata(doc)

    def delete_document(self, doc_id: str) -> bool:
        with self._changing({doc_id}):
            return super().delete_document(doc_id)

    def backfill_vectors(self, batch: int = 256) -> int:
        done = super().backfill_vectors(batch)
        if done:
            self.rebuild()
        return done

    # ------------------------------------------------------------------ search (Milvus)
    def keyword_search(self, query: str, k: int, groups: list[str] | None = None,
                       doc_ids: list[str] | None = None) -> list[tuple[int, float]]:
        """BM25 in Milvus (jieba analyzer); with `groups`, the ACL is a filter inside the search,
        and so is the document scope `doc_ids`."""
        return self.index.keyword_search(query, k, groups, doc_ids=doc_ids)

    def vector_search(self, query_vec: np.ndarray, k: int, groups: list[str] | None = None,
                      doc_ids: list[str] | None = None) -> list[tuple[int, float]]:
        return self.index.vector_search(query_vec, k, groups, doc_ids=doc_ids)

    def close(self) -> None:
        try:
            self.index.close()
        finally:
            super().close()
