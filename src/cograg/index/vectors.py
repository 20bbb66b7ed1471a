"""Exact dense search over the vectors stored in the SQLite file.

The matrix is loaded once per store generation (every committed document write bumps it) and
scanned with one BLAS mat-vec. Access control is a mask applied before top-k, so it filters inside
the search, not after it.

The scan is memory-bound (100k × 384 float32 is 154 MB per query). From `coarse_from` vectors on,
a first pass scans a PCA projection of the matrix to `coarse_dims` dimensions (a third of the
bytes, still one BLAS call — float16/int8 mat-vecs have no BLAS path in numpy and are far slower on
AVX2), keeps the best `rescore` candidates and re-scores them exactly against the full vectors, so
the returned cosines are exact. docs/benchmarks.md (Retrieval latency) has the recall of this
against the exact scan.
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
    basis: np.ndarray | None = None  # float32 (dim, coarse_dims): PCA directions, for the coarse pass
    coarse: np.ndarray | None = None  # float32 (n, coarse_dims): vectors projected on `basis`


def pca_basis(vectors: np.ndarray, dims: int, sample: int = 20_000, seed: int = 0) -> np.ndarray:
    """The `dims` leading principal directions (uncentred: cosine is a plain dot product), from a
    sample of rows."""
    rng = np.random.default_rng(seed)
    rows = vectors if vectors.shape[0] <= sample else vectors[rng.choice(vectors.shape[0], sample, replace=False)]
    _, _, vt = np.linalg.svd(rows.astype(np.float64), full_matrices=False)
    return np.ascontiguousarray(vt[:dims].T, dtype=np.float32)


class VectorIndex:
    def __init__(self, *, coarse_from: int = 50_000, coarse_dims: int = 128, rescore: int = 1000) -> None:
        self._m: _Matrix | None = None
        self._lock = threading.Lock()
        self.coarse_from = coarse_from
        self.coarse_dims = coarse_dims
        self.rescore = rescore

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
        m = _Matrix(generation, np.fromiter((r[0] for r in rows), np.int64, len(rows)), codes,
                    list(doc_index), vectors)
        if len(rows) >= self.coarse_from and self.coarse_dims < vectors.shape[1]:
            m.basis = pca_basis(vectors, self.coarse_dims)
            m.coarse = np.ascontiguousarray(vectors @ m.basis)
        return m

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
        query = query.astype(np.float32)
        mask = None
        if allowed_docs is not None:
            ok_codes = np.array([i for i, d in enumerate(m.doc_ids) if d in allowed_docs], dtype=np.int32)
            mask = np.isin(m.doc_codes, ok_codes)
        if m.coarse is not None and m.basis is not None and k < self.rescore < m.vectors.shape[0]:
            # coarse pass on the projection, exact cosines for its best `rescore` rows
            approx = m.coarse @ (query @ m.basis)
            if mask is not None:
                approx = np.where(mask, approx, -np.inf)
            cand = np.argpartition(-approx, self.rescore - 1)[:self.rescore]
            cand = cand[np.isfinite(approx[cand])]
            exact = m.vectors[cand] @ query
            k = min(k, exact.shape[0])
            if k == 0:
                return []
            top = np.argpartition(-exact, k - 1)[:k]
            top = top[np.argsort(-exact[top], kind="stable")]
            return [(int(m.rowids[cand[i]]), float(exact[i])) for i in top]
        scores = m.vectors @ query
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        k = min(k, scores.shape[0])
        idx = np.argpartition(-scores, k - 1)[:k]
        idx = idx[np.argsort(-scores[idx], kind="stable")]
        return [(int(m.rowids[i]), float(scores[i])) for i in idx if np.isfinite(scores[i])]

    def exact_search(self, conn: sqlite3.Connection, generation: str, query: np.ndarray,
                     k: int) -> list[tuple[int, float]]:
        """The full scan, whatever the size (reference for the coarse pass's recall)."""
        m = self.matrix(conn, generation)
        if m.vectors.shape[0] == 0 or k <= 0:
            return []
        scores = m.vectors @ query.astype(np.float32)
        k = min(k, scores.shape[0])
        idx = np.argpartition(-scores, k - 1)[:k]
        idx = idx[np.argsort(-scores[idx], kind="stable")]
        return [(int(m.rowids[i]), float(scores[i])) for i in idx]
