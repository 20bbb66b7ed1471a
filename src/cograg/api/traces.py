"""`GET /api/traces/{id}`: the stored trace of an answer (SPEC F5), under the snippet policy, with
file names where the stored trace has the server's paths (as in citations and stream events)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from cograg.api.access import visible_trace
from cograg.api.auth import caller_of
from cograg.api.state import api_state
from cograg.api.views import file_names_only, hide_source_text

router = APIRouter(prefix="/api", tags=["traces"])


@router.get("/traces/{trace_id}", summary="The trace of one answer: route, events, model calls, verdicts")
def get_trace(trace_id: str, request: Request) -> dict[str, Any]:
    state = api_state(request)
    with state.engines.engine() as engine:  # another caller's trace is not found
        found = engine.store.get_trace(trace_id, exact=True)  # never by prefix: an id is the caller's secret
        trace = file_names_only(visible_trace(engine, found, caller_of(request), trace_id))
    return trace if state.engines.snippets_visible() else hide_source_text(trace)


__all__ = ["router"]
