"""BM25 with pseudo-relevance feedback, RM3-style (option; measured on and off in
docs/benchmarks.md).

A first BM25 pass takes its top `feedback_docs` chunks as relevant. Each of their terms gets the
relevance-model weight Σ_d P(t|d)·P(d|q) (P(d|q) ∝ the chunk's BM25 score), damped by idf so
that words every chunk has do not win; the `expansion_terms` best terms not already in the query
form a second BM25 query. The two result lists are interpolated on min-max-normalised scores,
`(1 − λ)·original + λ·expansion` — FTS5 cannot weight terms inside one query, so the RM3
interpolation happens on the scores instead.
"""

from __future__ import annotations

import math

import numpy as np
from cograg.index.analyzer import analyze
from cograg.index.sqlite_store import SQLiteStore
from cograg.index.term_stats import TermStats, chunk_terms
from cograg.retrieval.feedback_settings import FeedbackSettings

__all__ = ["FeedbackSettings", "expansion_terms", "keyword_search_with_feedback"]


def expansion_terms(query_terms: set[str], feedback: list[tuple[dict[str, int], float]],
                    df: dict[str, int], n_chunks: int, n_terms: int) -> list[tuple[str, float]]:
    """RM3 term weights over feedback chunks (term counts, BM25 score), best first, query terms excluded."""
    if not feedback:
        return []
    scores = np.array([s for _, s in feedback], dtype=np.float64)
    p_d = scores - scores.min() + 1e-6
    p_d = p_d / p_d.sum()
    weights: dict[str, float] = {}
    for (counts, _), pd in zip(feedback, p_d):
        length = sum(counts.values()) or 1
        for term, tf in counts.items():
            if term in query_terms:
                continue
            weights[term] = weights.get(term, 0.0) + (tf / length) * pd
    ranked = []
    for term, w in weights.items():
        d = df.get(term, 0)
        if d <= 1:  # a term only one chunk has cannot pull in another relevant chunk
            continue
        idf = math.log((n_chunks - d + 0.5) / (d + 0.5) + 1.0)
        ranked.append((term, w * idf))
    ranked.sort(key=lambda kv: -kv[1])
    return ranked[:n_terms]


def _minmax(hits: list[tuple[int, float]]) -> dict[int, float]:
    if not hits:
        return {}
    vals = np.array([s for _, s in hits])
    lo, hi = float(vals.min()), float(vals.max())
    span = hi - lo if hi - lo > 1e-12 else 1.0
    return {r: (s - lo) / span if hi - lo > 1e-12 else 1.0 for r, s in hits}


def keyword_search_with_feedback(store: SQLiteStore, stats: TermStats, query: str, k: int,
                                 groups: list[str] | None = None,
                                 settings: FeedbackSettings | None = None, *,
                                 doc_ids: list[str] | None = None) -> list[tuple[int, float]]:
    """BM25 hits for `query` after one round of RM3 feedback; higher is better. `doc_ids` scopes
    both rounds to those documents."""
    cfg = settings or FeedbackSettings()
    first = store.keyword_search(query, k, groups, doc_ids)
    if len(first) < 2:
        return first
    top = first[:cfg.feedback_docs]
    terms = chunk_terms(store.conn, [r for r, _ in top])
    candidates = sorted({t for c in terms.values() for t in c})
    generation = store.generation()
    df = stats.document_frequency(store.conn, generation, candidates)
    expansion = expansion_terms(set(analyze(query)), [(dict(terms.get(r, {})), s) for r, s in top], df,
                                stats.chunk_count(store.conn, generation), cfg.expansion_terms)
    if not expansion:
        return first
    second = store.keyword_search_terms([t for t, _ in expansion], k, groups, doc_ids)
    a, b = _minmax(first), _minmax(second)
    lam = cfg.expansion_weight
    fused = {r: (1 - lam) * a.get(r, 0.0) + lam * b.get(r, 0.0) for r in a.keys() | b.keys()}
    order = sorted(fused.items(), key=lambda kv: -kv[1])
    return order[:k]
