"""Operations: `/healthz` (the store opens and answers a query) and `/metrics` (Prometheus text)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from cograg import __version__
from cograg.api.state import api_state

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness and store check")
def healthz(request: Request) -> dict[str, Any]:
    with api_state(request).engines.engine() as engine:
        documents = engine.store.count_documents()
    return {"status": "ok", "version": __version__, "documents": documents}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(request: Request) -> Response:
    return api_state(request).metrics.render()


__all__ = ["router"]
