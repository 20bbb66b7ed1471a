"""What every router reads from its app: the engine factory, the metrics, the upload limits,
the queues of answers and of uploads, and the gatekeeper (API keys and rate limits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from starlette.requests import Request

from cograg.api.admission import TurnAdmission
from cograg.api.auth import Gatekeeper
from cograg.api.engines import EngineFactory
from cograg.api.metrics import Metrics

UPLOADS_RUNNING = 1  # the store takes one ingest at a time anyway
UPLOADS_WAITING = 8


@dataclass
class ApiState:
    engines: EngineFactory
    metrics: Metrics
    upload_dir: Path
    max_upload_bytes: int
    admission: TurnAdmission
    gate: Gatekeeper
    # uploads queue apart from answers: one ingests at a time per process, a few wait, the rest
    # get 429 (each waiting upload holds a worker thread; see admission.py)
    upload_admission: TurnAdmission = field(
        default_factory=lambda: TurnAdmission(UPLOADS_RUNNING, UPLOADS_WAITING, what="uploads"))


def api_state(request: Request) -> ApiState:
    return request.app.state.cograg  # type: ignore[no-any-return]


__all__ = ["UPLOADS_RUNNING", "UPLOADS_WAITING", "ApiState", "api_state"]
