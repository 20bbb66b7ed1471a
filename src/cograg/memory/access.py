"""Which remembered facts a turn may use (SPEC B2/B3 with E2): one predicate for every way a fact
reaches a prompt or a response — the router's and the planner's facts, R0's fact citations, the
fact passages put ahead of a search, the cache key's fact blocks.

A fact is a statement taken from a document chunk. Its text is the chunk's text in other words,
so it is shown only while the chunk itself could be: while a search of this turn could return it
(the caller may read the document, the corpus policy admits it, it lies in the turn's scope). The
engine's `source_hit` answers exactly that; the operator changing a document's ACL without
changing its text leaves the fact valid in the ledger but out of this caller's turns. A user's
correction is the user's own statement, with no document behind it."""

from __future__ import annotations

from collections.abc import Callable

from cograg.memory.models import Fact
from cograg.retrieval.models import SearchHit

SourceHit = Callable[[str], "SearchHit | None"]


class FactSources:
    """`source_hit` (chunk id -> the chunk as a hit this turn's caller may see, or None), asked
    once per chunk in a turn: recall, the prompts and R0 then agree on what the caller may see."""

    def __init__(self, source_hit: SourceHit) -> None:
        self._source_hit = source_hit
        self._hits: dict[str, SearchHit | None] = {}

    def __call__(self, chunk_id: str) -> SearchHit | None:
        if chunk_id not in self._hits:
            self._hits[chunk_id] = self._source_hit(chunk_id) if chunk_id else None
        return self._hits[chunk_id]

    def hit(self, fact: Fact) -> SearchHit | None:
        """The fact's source chunk as a hit, None when the caller may not see it (or it is gone)."""
        return self(fact.source_chunk_id or "")

    def admits(self, fact: Fact) -> bool:
        """Whether the fact may reach this turn's prompts and its reply."""
        return fact.kind != "document" or self.hit(fact) is not None


def fact_sources(source_hit: SourceHit | FactSources) -> FactSources:
    return source_hit if isinstance(source_hit, FactSources) else FactSources(source_hit)


__all__ = ["FactSources", "SourceHit", "fact_sources"]
