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

from cograg.memory.models import Fact, SessionState
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


ChunkReadable = Callable[[str], bool]


def cited_readable(source_hit: SourceHit, *, chunk_exists: Callable[[str], bool],
                   docs_with_prefix: Callable[[str], list[tuple[str, bool]]],
                   allowed: Callable[[], set[str] | None]) -> ChunkReadable:
    """chunk id -> whether the caller may read, now, the document an earlier turn cited.

    An earlier turn's answer holds its sources' words (the names a follow-up's pronoun resolves
    to), so it informs this turn only while the caller could still read every source it cited.
    Unlike a fact, an earlier turn is not held to this turn's scope, and a chunk that is gone
    (its document re-ingested with new text, or deleted) is judged by its document: a chunk id
    starts with its document id's first 8 characters (`ingest.document_chunks.chunk_id_for`).
    `source_hit` is the scope-free hit lookup; `docs_with_prefix(prefix)` gives (doc id, admitted by
    the corpus policy) of the stored documents; `allowed()` the caller's readable document ids, None
    when no ACL applies (then a deleted document's turn stays, as the session view shows it)."""
    seen: dict[str, bool] = {}

    def readable(chunk_id: str) -> bool:
        if chunk_id not in seen:
            if source_hit(chunk_id) is not None:
                seen[chunk_id] = True
            elif chunk_exists(chunk_id):  # it is there, but not for this caller
                seen[chunk_id] = False
            else:
                ids = allowed()
                docs = docs_with_prefix(chunk_id.split("-", 1)[0])
                seen[chunk_id] = (any(admitted and (ids is None or doc_id in ids) for doc_id, admitted in docs)
                                  if docs else ids is None)
        return seen[chunk_id]
    return readable


def withhold_unreadable_turns(state: SessionState, readable: ChunkReadable) -> SessionState:
    """`state` with each earlier turn that cited a source the caller may not read now reduced to
    what the user wrote: the original question and the names in it. Its answer, summaries, the
    names taken from the answer, the question as a pronoun was resolved (from an answer) and its
    citations are withheld, so neither a follow-up's pronoun nor a context block carries them."""
    from cograg.memory.memorizer import entities_in

    turns, withheld = [], 0
    for t in state.turns:
        if all(readable(c) for c in t.citations):
            turns.append(t)
            continue
        withheld += 1
        turns.append(t.model_copy(update={
            "answer": "", "resolved_question": t.question, "entities": entities_in(t.question)[:8],
            "summary_short": t.question, "summary_medium": t.question, "citations": [], "facts_written": []}))
    if not withheld:
        return state
    note = f"{withheld} earlier turn(s) withheld: they cite a source the caller may not read now"
    return state.model_copy(update={"turns": turns, "problems": [*state.problems, note]})


__all__ = ["ChunkReadable", "FactSources", "SourceHit", "cited_readable", "fact_sources", "withhold_unreadable_turns"]
