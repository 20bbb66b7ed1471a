"""Index maintenance inside the document transaction (SPEC A5, A6): BM25 terms and vectors are
written with the chunk rows, so the keyword index, the vectors and the chunk table never disagree.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import numpy as np

from cograg.documents import Chunk
from cograg.errors import StoreError
from cograg.index.analyzer import fts_document


class PassageEmbedder(Protocol):
    """The part of `cograg.models.embedder.Embedder` the index needs."""

    name: str
    dim: int

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...


MAX_CONTEXT_PART = 200  # characters of the title, and of each heading, prefixed to a chunk
MAX_CONTEXT = 400  # characters of the whole prefix


def index_text(chunk: Chunk, title: str) -> str:
    """What is indexed for a chunk: its title and heading path give context the text may lack.

    The prefix is repeated in every chunk of a document, so it is bounded: a one-megabyte heading
    would otherwise be indexed (and embedded) once per chunk, making time and store size quadratic.
    Titles and headings of ordinary length are prefixed whole, as before.
    """
    context = [title] if title else []
    context += [h for h in chunk.heading_path if h and h != title]
    head = _clip(" › ".join(_clip(part, MAX_CONTEXT_PART) for part in context), MAX_CONTEXT)
    if head and not chunk.text.startswith(head):
        return f"{head}\n{chunk.text}"
    return chunk.text


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class ChunkIndexer:
    """Writes FTS rows always and vectors when an embedder is configured."""

    def __init__(self, embedder: PassageEmbedder | None = None) -> None:
        self.embedder = embedder

    def check_store(self, conn: sqlite3.Connection) -> None:
        """Refuse to mix vectors of two models in one store (SPEC A5)."""
        if self.embedder is None:
            return
        row = conn.execute("SELECT value FROM meta WHERE key='embedder'").fetchone()
        if row is None:
            return
        dim = conn.execute("SELECT value FROM meta WHERE key='embedding_dim'").fetchone()
        if row[0] != self.embedder.name or (dim and int(dim[0]) != self.embedder.dim):
            raise StoreError(
                f"this store was built with embedder {row[0]!r} (dimension {dim[0] if dim else '?'}); "
                f"the configured embedder is {self.embedder.name!r} (dimension {self.embedder.dim}). "
                "Use the same embedder (--embedder / COGRAG_EMBEDDER) or a new store.")

    def _record_model(self, conn: sqlite3.Connection) -> None:
        assert self.embedder is not None
        conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('embedder', ?)", (self.embedder.name,))
        conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('embedding_dim', ?)",
                      (str(self.embedder.dim),))

    def index(self, conn: sqlite3.Connection, rows: Sequence[tuple[int, Chunk]], title: str) -> None:
        if not rows:
            return
        texts = [index_text(c, title) for _, c in rows]
        conn.executemany("INSERT INTO chunks_fts(rowid, terms) VALUES(?, ?)",
                         [(rid, fts_document(t)) for (rid, _), t in zip(rows, texts)])
        if self.embedder is not None:
            self.check_store(conn)
            self._record_model(conn)
            vecs = self.embed_cached(conn, texts)
            conn.executemany("INSERT OR REPLACE INTO chunk_vectors(chunk_rowid, vec) VALUES(?, ?)",
                             [(rid, v.tobytes()) for (rid, _), v in zip(rows, vecs)])

    def embed_cached(self, conn: sqlite3.Connection, texts: list[str]) -> np.ndarray:
        """Embeddings for `texts`, computing only those not in the cache (content-hash keyed)."""
        assert self.embedder is not None
        model = self.embedder.name
        hashes = [text_hash(t) for t in texts]
        found: dict[str, bytes] = {}
        uniq = list(dict.fromkeys(hashes))
        for i in range(0, len(uniq), 500):
            part = uniq[i:i + 500]
            q = f"SELECT text_hash, vec FROM embedding_cache WHERE model=? AND text_hash IN ({','.join('?' * len(part))})"
            found.update({h: v for h, v in conn.execute(q, [model, *part])})
        missing = [i for i, h in enumerate(hashes) if h not in found]
        if missing:
            todo: dict[str, str] = {}
            for i in missing:
                todo.setdefault(hashes[i], texts[i])
            vecs = np.asarray(self.embedder.embed_passages(list(todo.values())), dtype=np.float32)
            if vecs.ndim != 2 or vecs.shape[1] != self.embedder.dim:
                raise StoreError(f"embedder returned shape {vecs.shape}, expected (n, {self.embedder.dim})")
            new = {h: v.tobytes() for h, v in zip(todo, vecs)}
            conn.executemany("INSERT OR REPLACE INTO embedding_cache(model, text_hash, vec) VALUES(?,?,?)",
                             [(model, h, b) for h, b in new.items()])
            found.update(new)
        return np.stack([np.frombuffer(found[h], dtype=np.float32) for h in hashes])


class EmbeddingCacheFiller:
    """Embeds texts ahead of the document writes, in batches of `batch_size` across documents,
    each batch committed to the embedding cache in its own short transaction.

    A document's own transaction then only reads cached vectors, so small documents no longer
    reach the embedder one at a time, and the embedding work of a large document is kept even
    if the process dies before that document is written (the next run re-embeds nothing).
    `on_batch(n)` is called after each committed batch with the number of texts embedded.
    """

    def __init__(self, indexer: ChunkIndexer, conn: sqlite3.Connection,
                 transaction: Callable[[], AbstractContextManager[sqlite3.Connection]],
                 batch_size: int = 32, on_batch: Callable[[int], None] | None = None) -> None:
        self.indexer = indexer
        self.conn = conn
        self.transaction = transaction
        self.batch_size = batch_size
        self.on_batch = on_batch
        self._queue: dict[str, str] = {}  # text hash -> text, waiting to be embedded
        self.embedded = 0

    @property
    def active(self) -> bool:
        return self.indexer.embedder is not None

    @property
    def queued(self) -> int:
        return len(self._queue)

    def add(self, texts: Sequence[str]) -> None:
        """Queue the texts that are neither cached nor queued; embed every full batch."""
        if not self.active or not texts:
            return
        assert self.indexer.embedder is not None
        new = {h: t for h, t in zip(map(text_hash, texts), texts) if h not in self._queue}
        hashes = list(new)
        for i in range(0, len(hashes), 500):
            part = hashes[i:i + 500]
            q = ("SELECT text_hash FROM embedding_cache WHERE model=? AND text_hash IN "
                 f"({','.join('?' * len(part))})")
            for (h,) in self.conn.execute(q, [self.indexer.embedder.name, *part]):
                new.pop(h, None)
        self._queue.update(new)
        while len(self._queue) >= self.batch_size:
            self._embed(self.batch_size)

    def flush(self) -> None:
        """Embed everything still queued."""
        while self._queue:
            self._embed(self.batch_size)

    def _embed(self, n: int) -> None:
        embedder = self.indexer.embedder
        assert embedder is not None
        batch = dict(list(self._queue.items())[:n])
        self.indexer.check_store(self.conn)  # refuse a mismatched store before doing the work
        vecs = np.asarray(embedder.embed_passages(list(batch.values())), dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape != (len(batch), embedder.dim):
            raise StoreError(f"embedder returned shape {vecs.shape}, expected ({len(batch)}, {embedder.dim})")
        with self.transaction() as conn:
            conn.executemany("INSERT OR REPLACE INTO embedding_cache(model, text_hash, vec) VALUES(?,?,?)",
                             [(embedder.name, h, v.tobytes()) for h, v in zip(batch, vecs)])
        for h in batch:
            del self._queue[h]
        self.embedded += len(batch)
        if self.on_batch:
            self.on_batch(len(batch))
