"""`POST /api/self-corrective-rag`: seed 003's request and response, over the engine's R2 mode.

The request's knobs map onto the turn: `topK` → documents retrieved and graded per attempt,
`similarityThreshold` → the vector-cosine floor of every search, `maxRewriteAttempts` and
`gradePassThreshold` → the loop's budget. The turn still goes through the orchestrator, so a
failing loop falls back (R2 → R1 → clarify) instead of erroring; `workflow.mode` says which mode
answered.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from cograg.api.access import stamp_trace
from cograg.api.auth import caller_of
from cograg.api.schemas import SelfCorrectiveRequest, SelfCorrectiveResponse
from cograg.api.state import api_state
from cograg.api.views import self_corrective
from cograg.orchestrator.orchestrator import TurnOptions

router = APIRouter(tags=["answers"])


@router.post("/api/self-corrective-rag", response_model=SelfCorrectiveResponse,
             summary="Self-corrective RAG (seed 003): retrieve → grade → rewrite → generate")
def self_corrective_rag(body: SelfCorrectiveRequest, request: Request) -> SelfCorrectiveResponse:
    state = api_state(request)
    with state.admission.turn(), state.engines.engine() as engine:
        base = TurnOptions.from_settings(engine.settings)
        options = base.model_copy(update={
            "force_mode": "R2_MULTI_RETRIEVE",
            "answer": base.answer.model_copy(update={"retrieve_hits": body.topK}),
            "budget": base.budget.model_copy(update={
                "grade_top_k": body.topK, "max_rewrite_attempts": body.maxRewriteAttempts,
                "grade_pass_threshold": body.gradePassThreshold})})
        search_options: dict[str, Any] = {}
        if body.similarityThreshold is not None:
            search_options["min_vector_cosine"] = body.similarityThreshold
        caller = caller_of(request)
        resp = engine.ask(body.query, principal=caller.principal, options=options, search_options=search_options)
        stamp_trace(engine, resp.trace_id, caller)
        trace = engine.store.get_trace(resp.trace_id) or {}
        state.metrics.observe_answer(resp, trace)

        def chunk_lookup(chunk_id: str) -> tuple[Any, Any]:
            chunk = engine.store.get_chunk(chunk_id)
            return chunk, (engine.store.get_document(chunk.doc_id) if chunk is not None else None)

        return self_corrective(body.query, resp, trace, chunk_lookup, visible=state.engines.snippets_visible())


__all__ = ["router"]
