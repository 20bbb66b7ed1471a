"""The HTTP service (SPEC F3) and the web page it serves (F4): `create_app(settings)`.

Every router is listed in `ROUTERS`; a new group of endpoints (sessions, facts) is one module
with an `APIRouter` and one entry there. Requests are handled statelessly over the store: each
opens its own engine (see `engines.py`), so any number of worker processes can serve one store.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from cograg import __version__
from cograg.api import corrective, documents, ops, qa, sessions, traces
from cograg.api.admission import TurnAdmission
from cograg.api.auth import Gatekeeper, authenticate
from cograg.api.body_limit import BodyLimit
from cograg.api.engines import EngineFactory
from cograg.api.errors import install_error_handlers
from cograg.api.metrics import Metrics
from cograg.api.schemas import advertise_question_limit
from cograg.api.state import UPLOADS_RUNNING, UPLOADS_WAITING, ApiState
from cograg.config import Settings
from cograg.messages import MESSAGES

ROUTERS: tuple[APIRouter, ...] = (qa.router, corrective.router, documents.router, sessions.router, traces.router,
                                  ops.router)
# routers open to every client: health checks and metrics scrapes carry no key and show no document
OPEN_ROUTERS: tuple[APIRouter, ...] = (ops.router,)
DEFAULT_MAX_UPLOAD_MB = 50.0
# how `cograg serve --workers N` hands its settings and upload limit to each worker process
SETTINGS_ENV = "COGRAG_SERVE_SETTINGS"
MAX_UPLOAD_ENV = "COGRAG_SERVE_MAX_UPLOAD_MB"
WEB_DIR = Path(str(resources.files("cograg") / "web"))


class TrailingSlashOff:
    """Serves "/api/x/" as "/api/x". Starlette's own answer is a 307 to "/api/x" even for a method
    that path does not take, so `DELETE /api/documents/` was sent on to a GET-only URL."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] in ("http", "websocket") and path.startswith("/api/") and len(path) > 5 \
                and path.endswith("/"):
            scope = dict(scope, path=path.rstrip("/") or "/")
        await self.app(scope, receive, send)


def create_app(settings: Settings | None = None, *, engines: EngineFactory | None = None,
               max_upload_mb: float | None = None, max_running: int = 4, max_waiting: int = 16,
               max_running_uploads: int = UPLOADS_RUNNING, max_waiting_uploads: int = UPLOADS_WAITING,
               **parts: Any) -> FastAPI:
    """The app over `settings.store`. `parts` replaces models built from the settings (a scripted
    LLM in tests); `engines` replaces the whole engine factory. At most `max_running` answers run
    at once per process and `max_waiting` more wait; beyond that a question gets 429. Uploads
    queue apart, `max_running_uploads` and `max_waiting_uploads` of them, the same way."""
    settings = settings or Settings()
    engines = engines or EngineFactory(settings, **parts)
    limit_mb = max_upload_mb if max_upload_mb is not None else min(DEFAULT_MAX_UPLOAD_MB, settings.max_file_mb)
    app = FastAPI(title="cograg", version=__version__, redirect_slashes=False,
                  description="Verified, cited answers over your documents (Chinese and English).")
    metrics = Metrics()
    app.state.cograg = ApiState(engines=engines, metrics=metrics,
                                upload_dir=(engines.settings.store / "uploads").expanduser().resolve(),
                                max_upload_bytes=int(limit_mb * (1 << 20)),
                                admission=TurnAdmission(max_running, max_waiting),
                                gate=Gatekeeper.from_settings(engines.settings),
                                upload_admission=TurnAdmission(max_running_uploads, max_waiting_uploads,
                                                               what="uploads"))
    install_error_handlers(app)
    advertise_question_limit(app, engines.settings.answer.max_question_chars)
    # inside the metrics, so that a refused body is counted; outside FastAPI, which reads a whole
    # body before the key check runs (an upload's caller is checked here, before its body)
    app.add_middleware(BodyLimit, upload_files=documents.MAX_FILES_PER_UPLOAD)
    app.middleware("http")(metrics.middleware)
    app.add_middleware(TrailingSlashOff)
    for router in ROUTERS:  # every other endpoint knows its caller (API key → principal) and rate-limits it
        app.include_router(router, dependencies=[] if router in OPEN_ROUTERS else [Depends(authenticate)])

    @app.get("/api/messages", tags=["web"], summary="The user-facing texts in Chinese and English")
    def messages() -> dict[str, dict[str, str]]:
        return {key: dict(texts) for key, texts in MESSAGES.items()}

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    return app


def app_from_env() -> FastAPI:
    """The app for a uvicorn worker process: settings from `COGRAG_SERVE_SETTINGS` (JSON), else
    from the environment (`COGRAG_STORE`, …); the upload limit from `COGRAG_SERVE_MAX_UPLOAD_MB`."""
    raw = os.environ.get(SETTINGS_ENV)
    settings = Settings.model_validate(json.loads(raw)) if raw else Settings()
    limit = os.environ.get(MAX_UPLOAD_ENV)
    return create_app(settings, max_upload_mb=float(limit) if limit else None)


__all__ = ["MAX_UPLOAD_ENV", "OPEN_ROUTERS", "ROUTERS", "SETTINGS_ENV", "WEB_DIR", "app_from_env", "create_app"]
