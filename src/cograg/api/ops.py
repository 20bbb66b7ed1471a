"""Operations: `/healthz` (the store opens and answers a query, the server's files load) and
`/metrics` (Prometheus text)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from cograg import __version__
from cograg.api.errors import error_of, error_response
from cograg.api.state import api_state
from cograg.errors import CogragError

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness, store and configuration check", response_model=dict[str, Any],
            responses={503: {"description": "the store cannot be opened or a server file is broken"}})
def healthz(request: Request) -> dict[str, Any] | JSONResponse:
    """Ok only when an answer could be given: the corpus policy is read on first use, so a broken
    corpus_policy.yaml would otherwise show only as a 500 on every answer while this said ok."""
    engines = api_state(request).engines
    try:
        with engines.engine() as engine:
            documents = engine.store.count_documents()
        engines.policy()
    except CogragError as exc:  # a broken server file is `server_config`, as the answer endpoints say it
        status, code = error_of(exc)
        return error_response(503, str(exc), code if status == 500 else "unavailable")
    return {"status": "ok", "version": __version__, "documents": documents}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(request: Request) -> Response:
    return api_state(request).metrics.render()


__all__ = ["router"]
