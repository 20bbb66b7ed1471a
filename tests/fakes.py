"""Deterministic stand-ins for models in fast unit tests (the slow tests use the real ones)."""

from __future__ import annotations

import hashlib

import numpy as np

from cograg.index.analyzer import analyze


class HashingEmbedder:
    """Bag of analysed terms hashed into `dim` buckets, L2-normalised: texts sharing words are
    close, which is all the retrieval plumbing tests need."""

    def __init__(self, dim: int = 64, name: str = "test:hashing") -> None:
        self.dim = dim
        self.name = name
        self.calls = 0
        self.texts_embedded = 0

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        for term in analyze(text):
            h = int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest(), "little")
            v[h % self.dim] += 1.0
        n = np.linalg.norm(v)
        if n == 0:
            v[0] = 1.0
            n = 1.0
        return v / n

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts_embedded += len(texts)
        return np.stack([self._vec(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed_passages(texts)
