"""Exact dense search over the vectors stored in the SQLite file.

The matrix is loaded once per store generation (every committed document write bumps it) and
scanned with one BLAS mat-vec: exact search, ~16 ms for 100k × 384 on two cores. Access control is
a mask applied before top-k, so it filters inside the search, not after it.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass

import numpy as np


@dataclass
class _Matrix:
    generation: str
    rowids: np.ndarray  # int64, sorted
    doc_codes: np.ndarray  # int32 index into doc_ids
    doc_ids: list[str]
    vectors: np.ndarray  # float32 (n, dim)


class VectorIndex:
    def __init__(self) -> None:
        self._m: _Matrix | None = None
        self._lock = threading.Lock()

    def _load(self, conn: sqlite3.Connection, generation: str) -> _Matrix:
        rows = conn.execute(
            "SELECT v.chunk_rowid, c.doc_id, v.vec FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_rowid "
            "ORDER BY v.chunk_rowid").fetchall()
        if not rows:
            return _Matrix(generation, np.zeros(0, np.int64), np.zeros(0, np.int32), [],
                           np.zeros((0, 0), np.float32))
        doc_index: dict[str, int] = {}
        codes = np.fromiter((doc_index.setdefault(r[1], len(doc_index)) for r in rows), np.int32, len(rows))
        buf = b"".join(r[2] for r in rows)
        vectors = np.frombuffer(buf, dtype=np.float32).reshape(len(rows), -1)
        return _Matrix(generation, np.fromiter((r[0] for r in rows), np.int64, len(rows)), codes,
                       list(doc_index), vectors)

    def matrix(self, conn: sqlite3.Connection, generation: str) -> _Matrix:
        with self._lock:
            if self._m is None or self._m.generation != generation:
                self._m = self._load(conn, generation)
            return self._m

    def search(self, conn: sqlite3.Connection, generation: str, query: np.ndarray, k: int,
               allowed_docs: set[str] | None = None) -> list[tuple[int, float]]:
        """(chunk rowid, cosine similarity) of the `k` nearest chunks, best first."""
        m = self.matrix(conn, generation)
        if m.vectors.shape[0] == 0 or k <= 0:
            return []
        scores = m.vectors @ query.astype(np.float32)
        if allowed_docs is not None:
            ok_codes = np.array([i for i, d in enumerate(m.doc_ids) if d in allowed_docs], dtype=np.int32)
            scores = np.where(np.isin(m.doc_codes, ok_codes), scores, -np.inf)
        k = min(k, scores.shape[0])
        idx = np.argpartition(-scores, k - 1)[:k]
        idx = idx[np.argsort(-scores[idx], kind="stable")]
        return [(int(m.rowids[i]), float(scores[i])) for i in idx if np.isfinite(scores[i])]
