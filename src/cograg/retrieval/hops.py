"""A second retrieval hop seeded by the first hop's best passage, for multi-hop (bridge) questions.

A bridge question ("Who performed in both Welcome to the Show and the band f(x)?") names one
paragraph and needs another that only the first one names: a search of the question alone finds the
first and often misses the second. Searching again with the question plus the text of the first
search's top passage (the query expansion of multi-hop dense retrieval) reaches the second, without a
model call. The merged list keeps the first search's best hits in front and fills the rest with the
second search's new hits, so a question that needs one paragraph loses nothing but the tail.
Which of the first search's hits stay in front knows documents: keeping a plain half (three of six)
put more bridge paragraphs into the 600-token context on HotpotQA (calibration 0.917 → 0.972) but
packed out chunks that two end-to-end answers on the example corpus's multi-chunk documents needed
(both refused), so the fourth hit keeps its place when it is a chunk of a document the first three
hold, and only the second search's hits of other documents move ahead of it
(`_merged`; docs/benchmarks.md, "Follow-up hop in R1").

On hotpotqa_train100 (docs/benchmarks.md, "Multi-hop support recall"), with 6 hits kept: both gold
paragraphs for 0.949 of the 78 bridge questions against 0.731 for the question's own top 6 (0.795
for its top 10); the 22 comparison questions stay at 1.000.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from cograg.retrieval.models import SearchHit, SearchResult


HopMerge = Literal["documents", "two_thirds"]


def follow_up_search(search: Callable[[str], SearchResult], query: str, *, keep: int | None = None,
                     merge: HopMerge = "documents") -> SearchResult:
    """`search(query)`, then `search(query + its top visible passage)`; the first result's hits with its
    `keep` best in front and the second search's new hits after them (without `keep`: by documents,
    `_merged`, or with `merge="two_thirds"` its best two thirds, the rule before 2026-11-26), as many
    as the first returned. Score, evidence and fusion are the first search's: the question's own
    evidence still decides whether to answer."""
    return with_follow_up(search, query, search(query), keep=keep, merge=merge)


def with_follow_up(search: Callable[[str], SearchResult], query: str, first: SearchResult, *,
                   keep: int | None = None, merge: HopMerge = "documents") -> SearchResult:
    """The second half of `follow_up_search`, for a caller that already holds `first`, the result of
    `search(query)` (and may decide from it that no second search is worth making)."""
    # the seed is the best passage the user may see: a search's query lands in traces, and a source
    # whose text the policy hides (`snippet_visible: false`) must not appear there
    seed = next((h for h in first.hits if h.snippet_visible), None)
    if seed is None:
        return first
    second = search(hop_query(query, seed))
    size = len(first.hits)
    if keep is None and merge == "two_thirds":
        keep = max(1, size * 2 // 3)
    if keep is not None:
        kept = first.hits[:keep]
        seen = {h.chunk_id for h in kept}
        added = [h for h in second.hits if h.chunk_id not in seen]
        merged = kept + added + first.hits[len(kept):]
    else:
        merged = _merged(first.hits, second.hits)
    placed: dict[str, SearchHit] = {}
    for h in merged:  # each chunk at its first place
        placed.setdefault(h.chunk_id, h)
    return first.model_copy(update={"hits": list(placed.values())[:size]})


def hop_query(query: str, seed: SearchHit) -> str:
    """The follow-up hop's query: the question, then the text of the passage that seeds it."""
    return f"{query}\n{seed.text}"


def is_hop_query(query: str, seen: Iterable[SearchHit]) -> bool:
    """Whether `query` is a follow-up hop's, seeded by one of the passages `seen`. Its evidence score
    says how like that passage the passage's own text is, not how well the sources answer the
    question, so a refusal floor must not read it."""
    return any(query.endswith("\n" + h.text) for h in seen if h.text)


def document_unit(hit: SearchHit) -> tuple[str, object]:
    """What a reader takes for one document: a file, or one record of a JSON/CSV file (a HotpotQA
    paragraph is a record of the corpus file)."""
    return hit.doc_id, hit.metadata.get("record_id")


def _merged(first: list[SearchHit], second: list[SearchHit]) -> list[SearchHit]:
    """The first search's best half in front, and of its next sixth (the two thirds once kept in
    front) the hits of a document the half holds (in a long document, the next chunk of the same
    one, often the one the answer needs). Then the second search's hits of documents not in front
    (the paragraph only the best passage names), then the rest of that sixth, the second search's
    other new hits (more chunks of documents in front) and the first search's tail."""
    half, two_thirds = max(1, len(first) // 2), max(1, len(first) * 2 // 3)
    front = first[:half]
    front_units = {document_unit(h) for h in front}
    middle = first[half:two_thirds]
    kept = front + [h for h in middle if document_unit(h) in front_units]
    kept_ids = {h.chunk_id for h in kept}
    added = [h for h in second if h.chunk_id not in kept_ids]
    novel = [h for h in added if document_unit(h) not in front_units]
    return kept + novel + [h for h in middle if h.chunk_id not in kept_ids] + added + first[two_thirds:]


__all__ = ["HopMerge", "document_unit", "follow_up_search", "hop_query", "is_hop_query", "with_follow_up"]
