"""R0 for real (SPEC D1, E2): answer from the session's verified facts, with no retrieval.

The recalled facts are shown to the model as `[cite: fact, ID]` entries next to their source
chunks; a fact citation resolves to its source chunk and is verified against it like any
citation. When the facts do not establish the answer the mode fails and the turn falls back to a
search (R1), so R0 never answers what the ledger does not cover."""

from __future__ import annotations

from typing import Any

from cograg.answer.answerer import Answerer, AnswerResponse
from cograg.orchestrator.turn import ModeFailed, Turn, guard
from cograg.retrieval.models import SearchHit, SearchResult
from cograg.trace import Trace


def fact_hits(session: Any) -> list[SearchHit]:
    """The recalled facts' source chunks, one hit per chunk, each annotated with its facts."""
    hits: dict[str, SearchHit] = {}
    for _, hit in session.fact_hits():
        if hit.chunk_id in hits:
            merged = sorted(set(hits[hit.chunk_id].annotations) | set(hit.annotations))
            hits[hit.chunk_id] = hits[hit.chunk_id].model_copy(update={"annotations": merged})
        else:
            hits[hit.chunk_id] = hit
    return list(hits.values())


def answer_from_facts(turn: Turn, answerer: Answerer, session: Any) -> AnswerResponse:
    pairs = session.fact_hits()
    hits = fact_hits(session)
    if not hits:
        raise ModeFailed("R0: no recalled fact has its source passage any more")
    facts = [{"id": f"cite: fact, {f.fact_id}", "statement": f.statement} for f, _ in pairs]
    turn.event("EVIDENCE_SELECTED", source="fact_ledger", facts=[f.fact_id for f, _ in pairs], hits=len(hits))
    sub = Trace(question=turn.question)
    result = SearchResult(query=turn.question, mode="hybrid", hits=hits)
    # the facts were verified when established; their sources are re-verified here, no evidence floor
    resp = guard(lambda: answerer.answer(turn.question, trace=sub, result=result, facts=facts, has_context=True,
                                         evidence_gate=False), "R0")
    trace = turn.trace
    trace.model_calls += sub.model_calls
    trace.verdicts += sub.verdicts
    trace.drafts += sub.drafts
    trace.retrieved += sub.retrieved
    trace.context_blocks += sub.context_blocks
    trace.injection_flags += sub.injection_flags
    if resp.fallback or not resp.citations:
        raise ModeFailed(f"R0: the recalled facts did not establish an answer ({'; '.join(resp.notes)[:200]})")
    turn.event("DRAFT_READY", method="facts", citations=len(resp.citations))
    turn.event("VERIFIED", supported=sum(c.kept for c in resp.claims), total=len(resp.claims), method="facts")
    resp.route = "FAST_PATH"
    resp.notes.append("answered from the session's verified facts (no retrieval)")
    return resp


def prepend_fact_hits(search: Any, session: Any) -> Any:
    """`search` whose results start with the recalled facts' source chunks: established facts
    outrank new documents (E2) and keep their place in the context budget."""
    hits = fact_hits(session)
    if not hits:
        return search

    def searched(query: str) -> SearchResult:
        result = search(query)
        seen = {h.chunk_id for h in hits}
        return result.model_copy(update={"hits": hits + [h for h in result.hits if h.chunk_id not in seen]})
    return searched


__all__ = ["answer_from_facts", "fact_hits", "prepend_fact_hits"]
