"""The embedded store: one SQLite database in WAL mode (SPEC I).

Every write for one document — its row, its chunks, tags and ACL — happens in one transaction,
so a crash (even `kill -9`) leaves either the old version or the new one, never a mix.

Beside it: `sqlite_schema` (connection, migrations, analyser check), `sqlite_rows` (documents and
chunks to and from rows) and `sqlite_search` (the ACL filter and FTS5 keyword search in SQL).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import numpy as np

from cograg.documents import Chunk, Document
from cograg.errors import StoreError
from cograg.index import sqlite_schema, sqlite_search
from cograg.index.analyzer import query_terms
from cograg.index.bm25_memory import MemoryBM25, shared_index, store_key
from cograg.index.indexing import ChunkIndexer, EmbeddingCacheFiller, index_text
from cograg.index.sqlite_rows import (
    SQLiteDocumentWriter, chunk_from_row, document_from_row, documents_by_id, insert_document_row, write_tags_acl,
)
from cograg.index.sqlite_schema import (
    DB_NAME, MIGRATIONS, SCHEMA_VERSION, check_analyzer, connect, immediate_transaction, migrate,
)
from cograg.index.sqlite_search import fts5_search
from cograg.index.term_stats import TermStats
from cograg.index.vectors import VectorIndex
from cograg.text import shown_ref

# how long `close` waits for a background BM25 build of the store (one read of every chunk: well
# under this on the stores measured; past it the thread is left to fail on its own)
CLOSE_WAITS_FOR_BUILD_S = 60.0
# a document or trace id is far shorter: a longer ref is compared whole, never as a LIKE prefix
MAX_ID_PREFIX = 128


def _like_literal(text: str) -> str:
    """`text` for a LIKE pattern with ESCAPE '\\': its own backslashes, % and _ match only themselves."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class SQLiteStore:
    """Documents and chunks in `<store>/cograg.db`."""

    def __init__(self, directory: Path, *, create: bool = True,
                 indexer: ChunkIndexer | None = None) -> None:
        self.directory = Path(directory).expanduser()
        self.indexer = indexer or ChunkIndexer()
        self.vector_index = VectorIndex()
        self.term_stats = TermStats()
        # Query terms found in more than this share of all chunks are dropped from keyword queries
        # (the rarest term is always kept): they barely move BM25 but make FTS5 score most rows.
        self.common_term_share: float | None = None
        # BM25 from an in-memory impact matrix (same scores, several times faster at 100k chunks) or
        # from FTS5 in SQL. FTS5 stays as the fallback: it needs no memory beyond SQLite's cache and
        # nothing to rebuild after a write, where the matrix must be rebuilt for every new store
        # generation (seconds at 100k chunks). "auto" answers from FTS5 while the matrix of the
        # current generation is built in the background, so neither a one-shot command nor the
        # first search after a write waits for it; "memory" builds it on the spot; "fts5" never
        # builds it — for stores too large to hold in memory (settings: retrieval.bm25_engine).
        self.bm25_engine: str = "auto"
        self._bm25_index: MemoryBM25 | None = None
        db = self.directory / DB_NAME
        if not db.exists() and not create:
            raise StoreError(f"no store at {self.directory} (run `cograg ingest` first)")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.conn = connect(db)
            migrate(self.conn)
            check_analyzer(self.conn)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open store {db}: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"cannot create store directory {self.directory}: {exc.strerror}") from exc

    # ------------------------------------------------------------------ schema
    def schema_version(self) -> int:
        return sqlite_schema.schema_version(self.conn)

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate_transaction(self.conn)

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str) -> str | None:
        return sqlite_schema.get_meta(self.conn, key)

    def set_meta(self, key: str, value: str) -> None:
        sqlite_schema.set_meta(self.conn, key, value)

    def store_id(self) -> str:
        """This store's stable identity (`store_id` in meta, made on first use): what scopes its
        Milvus collection and its Redis memory keys when several stores share one server."""
        store_id = self.get_meta("store_id")
        if store_id is None:
            with self.transaction():
                store_id = self.get_meta("store_id") or uuid.uuid4().hex
                self.set_meta("store_id", store_id)
        return store_id

    # ------------------------------------------------------------------ documents
    def get_document(self, doc_id: str) -> Document | None:
        row = self.conn.execute("SELECT * FROM documents WHERE doc_id=?", (doc_id,)).fetchone()
        return None if row is None else document_from_row(self.conn, row)

    def get_document_by_path(self, source_path: str) -> Document | None:
        row = self.conn.execute("SELECT * FROM documents WHERE source_path=?", (source_path,)).fetchone()
        return None if row is None else document_from_row(self.conn, row)

    def find_documents(self, ref: str) -> list[Document]:
        """Documents matching a doc id, a doc id prefix (4+ characters), or a source path."""
        if not ref:
            return []
        prefix = _like_literal(ref) + "%" if 4 <= len(ref) <= MAX_ID_PREFIX else ""
        rows = self.conn.execute(
            "SELECT * FROM documents WHERE doc_id=? OR source_path=? OR doc_id LIKE ? ESCAPE '\\' "
            "ORDER BY source_path", (ref, ref, prefix)).fetchall()
        exact = [r for r in rows if r["doc_id"] == ref or r["source_path"] == ref]
        return [document_from_row(self.conn, r) for r in (exact or rows)]

    def find_documents_named(self, name: str) -> list[Document]:
        """Documents whose file name (the last part of the source path) is `name`."""
        if not name or "/" in name or "\\" in name or len(name.encode("utf-8", "replace")) > 255:
            return []  # no file name is longer (and SQLite refuses a LIKE pattern past 50,000 bytes)
        pattern = "%/" + _like_literal(name)
        rows = self.conn.execute("SELECT * FROM documents WHERE source_path LIKE ? ESCAPE '\\' "
                                 "ORDER BY source_path", (pattern,)).fetchall()
        # LIKE folds ASCII case; a file name is compared as written
        return [document_from_row(self.conn, r) for r in rows if r["source_path"].endswith("/" + name)]

    def list_documents(self, *, under: str | None = None) -> list[Document]:
        if under is None:
            rows = self.conn.execute("SELECT * FROM documents ORDER BY source_path").fetchall()
        else:
            prefix = under.rstrip("/") + "/"
            rows = self.conn.execute(
                "SELECT * FROM documents WHERE source_path=? OR substr(source_path, 1, ?)=? "
                "ORDER BY source_path", (under, len(prefix), prefix)).fetchall()
        return [document_from_row(self.conn, r) for r in rows]

    def iter_chunks(self, doc_id: str) -> Iterator[Chunk]:
        for row in self.conn.execute("SELECT * FROM chunks WHERE doc_id=? ORDER BY seq", (doc_id,)):
            yield chunk_from_row(row)

    def get_chunk(self, chunk_id: str) -> Chunk | None:
        row = self.conn.execute("SELECT * FROM chunks WHERE chunk_id=?", (chunk_id,)).fetchone()
        return None if row is None else chunk_from_row(row)

    @contextmanager
    def write_document(self, doc: Document) -> Iterator[SQLiteDocumentWriter]:
        """Replace (or add) `doc` and its chunks atomically. The chunk count is checked and
        recorded at commit, so a stored document always has exactly its chunks."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM documents WHERE doc_id=? OR source_path=?",
                         (doc.doc_id, doc.source_path))
            insert_document_row(conn, doc)
            writer = SQLiteDocumentWriter(conn, doc.doc_id, self.indexer, doc.title)
            yield writer
            conn.execute("UPDATE documents SET chunk_count=? WHERE doc_id=?", (writer.count, doc.doc_id))
            self._bump_generation(conn)
            doc.chunk_count = writer.count

    def embedding_filler(self, batch_size: int = 32,
                         on_batch: Callable[[int], None] | None = None) -> EmbeddingCacheFiller:
        """Fills the embedding cache ahead of document writes (see EmbeddingCacheFiller)."""
        return EmbeddingCacheFiller(self.indexer, self.conn, self.transaction, batch_size, on_batch)

    def update_document_metadata(self, doc: Document) -> None:
        """Tags, ACL, root and timestamps changed but the content did not: no re-chunking."""
        with self.transaction() as conn:
            conn.execute("UPDATE documents SET root=?, updated_at=?, ingested_at=?, title=?, metadata=?"
                         " WHERE doc_id=?", (doc.root, doc.updated_at, doc.ingested_at, doc.title,
                                             json.dumps(doc.metadata, ensure_ascii=False), doc.doc_id))
            write_tags_acl(conn, doc)
            self._bump_generation(conn)

    def delete_document(self, doc_id: str) -> bool:
        with self.transaction() as conn:
            cur = conn.execute("DELETE FROM documents WHERE doc_id=?", (doc_id,))
            self._bump_generation(conn)
        return cur.rowcount > 0

    # ------------------------------------------------------------------ index generation
    @staticmethod
    def _bump_generation(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO meta(key, value) VALUES('generation', '1') ON CONFLICT(key) "
                     "DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)")

    def generation(self) -> str:
        """Changes whenever any process commits a document write; caches key on it."""
        return self.get_meta("generation") or "0"

    # ------------------------------------------------------------------ search
    def allowed_doc_ids(self, groups: list[str]) -> set[str] | None:
        """Documents a principal with `groups` may read; None: no document has an ACL (no filter)."""
        return sqlite_search.allowed_doc_ids(self.conn, groups)

    def keyword_search(self, query: str, k: int, groups: list[str] | None = None,
                       doc_ids: list[str] | None = None) -> list[tuple[int, float]]:
        """BM25 over the analysed terms: (chunk rowid, score) best first; higher is better.
        With `groups`, the ACL restriction is part of the same SQL query; so is the scope
        `doc_ids` (only chunks of those documents)."""
        terms = query_terms(query)
        if self.common_term_share is not None and len(terms) > 1:
            generation = self.generation()
            stats = self.bm25_index if self._bm25_in_memory(generation) else self.term_stats
            terms = stats.drop_common(self.conn, generation, terms, self.common_term_share)
        return self.keyword_search_terms(terms, k, groups, doc_ids)

    def doc_ids_of(self, rowids: list[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for i in range(0, len(rowids), 500):
            part = rowids[i:i + 500]
            out.update((int(r[0]), str(r[1])) for r in self.conn.execute(
                f"SELECT id, doc_id FROM chunks WHERE id IN ({','.join('?' * len(part))})", part))
        return out

    def _bm25_in_memory(self, generation: str) -> bool:
        """Whether a keyword search of `generation` runs on the in-memory matrix (see `bm25_engine`)."""
        if self.bm25_engine == "memory":
            return True
        if self.bm25_engine != "auto":
            return False
        if self.bm25_index.ready(generation):
            return True
        self.bm25_index.build_in_background(self.directory / DB_NAME, generation)
        return False

    @property
    def bm25_index(self) -> MemoryBM25:
        """The in-memory BM25 index of this database, shared with other stores open on it."""
        if self._bm25_index is None:
            self._bm25_index = shared_index(store_key(self.conn, self.directory / DB_NAME))
        return self._bm25_index

    @bm25_index.setter
    def bm25_index(self, index: MemoryBM25) -> None:
        self._bm25_index = index

    def keyword_search_terms(self, terms: list[str], k: int, groups: list[str] | None = None,
                             doc_ids: list[str] | None = None) -> list[tuple[int, float]]:
        """BM25 for terms that are already analysed (any of them may match)."""
        generation = self.generation()
        if self._bm25_in_memory(generation):
            return self.bm25_index.search(self.conn, generation, terms, k, groups, doc_ids)
        return fts5_search(self.conn, terms, k, groups, doc_ids)

    def vector_search(self, query_vec: np.ndarray, k: int, groups: list[str] | None = None,
                      doc_ids: list[str] | None = None) -> list[tuple[int, float]]:
        allowed = self.allowed_doc_ids(groups) if groups is not None else None
        if doc_ids is not None:
            allowed = set(doc_ids) if allowed is None else allowed & set(doc_ids)
        return self.vector_index.search(self.conn, self.generation(), query_vec, k, allowed)

    def has_vectors(self) -> bool:
        return self.conn.execute("SELECT 1 FROM chunk_vectors LIMIT 1").fetchone() is not None

    def chunks_by_rowid(self, rowids: list[int]) -> dict[int, tuple[Chunk, Document]]:
        """Chunks with their documents, for turning index hits into results."""
        if not rowids:
            return {}
        rows: list[sqlite3.Row] = []
        for i in range(0, len(rowids), 500):
            part = rowids[i:i + 500]
            rows += self.conn.execute(f"SELECT * FROM chunks WHERE id IN ({','.join('?' * len(part))})", part)
        docs = documents_by_id(self.conn, list({r["doc_id"] for r in rows}))
        return {int(r["id"]): (chunk_from_row(r), docs[r["doc_id"]]) for r in rows}

    def chunks_missing_vectors(self, limit: int = 100_000) -> list[tuple[int, Chunk, str]]:
        rows = self.conn.execute(
            "SELECT c.*, d.title AS doc_title FROM chunks c JOIN documents d ON d.doc_id = c.doc_id "
            "WHERE c.id NOT IN (SELECT chunk_rowid FROM chunk_vectors) ORDER BY c.id LIMIT ?", (limit,))
        out = []
        for row in rows:
            data = dict(row)
            title = data.pop("doc_title")
            out.append((int(data["id"]), chunk_from_row(data), title))
        return out

    def backfill_vectors(self, batch: int = 256) -> int:
        """Embed chunks stored without vectors (e.g. ingested before an embedder was configured)."""
        if self.indexer.embedder is None:
            return 0
        done = 0
        while todo := self.chunks_missing_vectors(batch):
            with self.transaction() as conn:
                vecs = self.indexer.embed_cached(conn, [index_text(c, t) for _, c, t in todo])
                self.indexer.check_store(conn)
                self.indexer._record_model(conn)
                conn.executemany("INSERT OR REPLACE INTO chunk_vectors(chunk_rowid, vec) VALUES(?, ?)",
                                 [(rid, v.tobytes()) for (rid, _, _), v in zip(todo, vecs)])
                self._bump_generation(conn)
            done += len(todo)
        return done

    # ------------------------------------------------------------------ traces
    def save_trace(self, trace_id: str, kind: str, question: str, data: dict) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO traces(trace_id, kind, question, data) VALUES(?,?,?,?)",
                         (trace_id, kind, question, json.dumps(data, ensure_ascii=False, default=str)))

    def delete_traces(self, trace_ids: list[str]) -> int:
        """Delete these traces (by whole id); how many were there."""
        with self.transaction() as conn:
            return sum(conn.execute("DELETE FROM traces WHERE trace_id=?", (t,)).rowcount for t in trace_ids)

    def get_trace(self, trace_id: str, *, exact: bool = False) -> dict | None:
        """The trace with id `trace_id`, or the only one whose id starts with it (4+ characters; a
        StoreError when several do).
        `exact`: the id only (the HTTP API, where an id is all that keeps one caller's trace from
        another: "tr_0" … "tr_f" would find one in 16 tries)."""
        prefix = _like_literal(trace_id) + "%" if 4 <= len(trace_id) <= MAX_ID_PREFIX and not exact else ""
        ids = [r[0] for r in self.conn.execute("SELECT trace_id FROM traces WHERE trace_id=? OR trace_id LIKE ? "
                                                "ESCAPE '\\'", (trace_id, prefix))]
        # LIKE folds ASCII case; an id prefix is compared as written
        ids = [i for i in ids if i == trace_id] or [i for i in ids if i.startswith(trace_id)]
        if len(ids) > 1:
            raise StoreError(f"{shown_ref(trace_id)} matches {len(ids)} traces; give more of the id")
        if not ids:
            return None
        r = self.conn.execute("SELECT trace_id, created_at, kind, question, data FROM traces WHERE trace_id=?",
                              (ids[0],)).fetchone()
        return {"trace_id": r[0], "created_at": r[1], "kind": r[2], "question": r[3], **json.loads(r[4])}

    def list_traces(self, limit: int = 20) -> list[dict]:
        return [{"trace_id": r[0], "created_at": r[1], "kind": r[2], "question": r[3]} for r in self.conn.execute(
            "SELECT trace_id, created_at, kind, question FROM traces ORDER BY created_at DESC LIMIT ?", (limit,))]

    # ------------------------------------------------------------------ roots & stats
    def add_root(self, root: str, *, tags: list[str] | None = None, acl: list[str] | None = None) -> None:
        """Record an ingested folder; tags/ACL given here become its defaults for later re-syncs."""
        with self.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO roots(path) VALUES(?)", (root,))
            if tags is not None:
                conn.execute("UPDATE roots SET tags=? WHERE path=?", (json.dumps(sorted(set(tags))), root))
            if acl is not None:
                conn.execute("UPDATE roots SET acl=? WHERE path=?", (json.dumps(sorted(set(acl))), root))

    def root_defaults(self, root: str) -> tuple[list[str], list[str]] | None:
        row = self.conn.execute("SELECT tags, acl FROM roots WHERE path=?", (root,)).fetchone()
        return None if row is None else (json.loads(row[0]), json.loads(row[1]))

    def remove_root(self, root: str) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM roots WHERE path=?", (root,))

    def roots(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT path FROM roots ORDER BY path")]

    def count_chunks(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def count_documents(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM documents").fetchone()[0])

    def check_consistency(self) -> list[str]:
        """Problems that must never exist: documents whose recorded chunk count differs from the
        chunks actually stored, and chunks without a document."""
        problems = [
            f"document {r[0]} records {r[1]} chunks but has {r[2]}"
            for r in self.conn.execute(
                "SELECT d.doc_id, d.chunk_count, count(c.id) FROM documents d "
                "LEFT JOIN chunks c ON c.doc_id = d.doc_id GROUP BY d.doc_id "
                "HAVING d.chunk_count != count(c.id)")
        ]
        orphans = self.conn.execute(
            "SELECT count(*) FROM chunks WHERE doc_id NOT IN (SELECT doc_id FROM documents)").fetchone()[0]
        if orphans:
            problems.append(f"{orphans} chunks without a document")
        return problems

    def close(self) -> None:
        # a background BM25 build reads this database through a connection of its own: a closed
        # store leaves no thread holding (or opening) files in its folder, which may be removed next
        if self._bm25_index is not None:
            self._bm25_index.wait_for_build(CLOSE_WAITS_FOR_BUILD_S)
        self.conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(directory: Path | str, *, create: bool = True,
               indexer: ChunkIndexer | None = None) -> SQLiteStore:
    return SQLiteStore(Path(directory), create=create, indexer=indexer)


__all__ = ["DB_NAME", "MIGRATIONS", "SCHEMA_VERSION", "SQLiteStore", "immediate_transaction", "open_store"]
