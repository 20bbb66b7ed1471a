"""Rank fusion (SPEC B1, B5): reciprocal rank fusion and weighted (convex) score fusion."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def rrf(rankings: Sequence[Sequence[K]], k: int = 60) -> list[tuple[K, float]]:
    """Reciprocal rank fusion: score(d) = Σ 1 / (k + rank(d)), ranks from 1. Ties keep first-seen order."""
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])


def _minmax(scores: Mapping[K, float]) -> dict[K, float]:
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi - lo < 1e-12:
        return {key: 1.0 for key in scores}
    return {key: (v - lo) / (hi - lo) for key, v in scores.items()}


def weighted_fusion(scored: Sequence[Mapping[K, float]], weights: Sequence[float]) -> list[tuple[K, float]]:
    """Convex combination of min-max normalised scores; a missing item scores 0 in that list."""
    if len(scored) != len(weights):
        raise ValueError("one weight per score list")
    total = sum(weights) or 1.0
    out: dict[K, float] = {}
    for scores, w in zip(scored, weights):
        for key, v in _minmax(scores).items():
            out[key] = out.get(key, 0.0) + (w / total) * v
    for scores in scored:
        for key in scores:
            out.setdefault(key, 0.0)
    return sorted(out.items(), key=lambda kv: -kv[1])
