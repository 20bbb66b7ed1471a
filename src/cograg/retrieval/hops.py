"""A second retrieval hop seeded by the first hop's best passage, for multi-hop (bridge) questions.

A bridge question ("Who performed in both Welcome to the Show and the band f(x)?") names one
paragraph and needs another that only the first one names: a search of the question alone finds the
first and often misses the second. Searching again with the question plus the text of the first
search's top passage (the query expansion of multi-hop dense retrieval) reaches the second, without a
model call. The merged list keeps the first search's best hits in front and fills the rest with the
second search's new hits, so a question that needs one paragraph loses nothing but the tail.
Not half: keeping three of six put more bridge paragraphs into the 600-token context on HotpotQA
(calibration 0.917 → 0.972) but packed out chunks that two end-to-end answers on the example
corpus's multi-chunk documents needed (both refused), and changed no answer of the evaluation
split's answer eval (docs/benchmarks.md, "Follow-up hop in R1").

On hotpotqa_train100 (docs/benchmarks.md, "Multi-hop support recall"), with 6 hits kept: both gold
paragraphs for 0.949 of the 78 bridge questions against 0.731 for the question's own top 6 (0.795
for its top 10); the 22 comparison questions stay at 1.000.
"""

from __future__ import annotations

from collections.abc import Callable

from cograg.retrieval.models import SearchResult


def follow_up_search(search: Callable[[str], SearchResult], query: str, *, keep: int | None = None) -> SearchResult:
    """`search(query)`, then `search(query + its top visible passage)`; the first result's hits with its
    `keep` best (default two thirds of them) in front and the second search's new hits after them,
    as many as the first returned. Score, evidence and fusion are the first search's: the question's
    own evidence still decides whether to answer."""
    return with_follow_up(search, query, search(query), keep=keep)


def with_follow_up(search: Callable[[str], SearchResult], query: str, first: SearchResult, *,
                   keep: int | None = None) -> SearchResult:
    """The second half of `follow_up_search`, for a caller that already holds `first`, the result of
    `search(query)` (and may decide from it that no second search is worth making)."""
    # the seed is the best passage the user may see: a search's query lands in traces, and a source
    # whose text the policy hides (`snippet_visible: false`) must not appear there
    seed = next((h for h in first.hits if h.snippet_visible), None)
    if seed is None:
        return first
    second = search(f"{query}\n{seed.text}")
    size = len(first.hits)
    kept = first.hits[:keep if keep is not None else max(1, size * 2 // 3)]
    seen = {h.chunk_id for h in kept}
    added = [h for h in second.hits if h.chunk_id not in seen]
    seen.update(h.chunk_id for h in added)
    rest = [h for h in first.hits[len(kept):] if h.chunk_id not in seen]
    return first.model_copy(update={"hits": (kept + added + rest)[:size]})


__all__ = ["follow_up_search", "with_follow_up"]
