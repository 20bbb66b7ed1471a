"""What every router reads from its app: the engine factory, the metrics, the upload limits
and the gatekeeper (API keys and rate limits)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request

from cograg.api.admission import TurnAdmission
from cograg.api.auth import Gatekeeper
from cograg.api.engines import EngineFactory
from cograg.api.metrics import Metrics


@dataclass
class ApiState:
    engines: EngineFactory
    metrics: Metrics
    upload_dir: Path
    max_upload_bytes: int
    admission: TurnAdmission
    gate: Gatekeeper


def api_state(request: Request) -> ApiState:
    return request.app.state.cograg  # type: ignore[no-any-return]


__all__ = ["ApiState", "api_state"]
