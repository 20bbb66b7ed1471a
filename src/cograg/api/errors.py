"""Errors as JSON `{error, detail}` with a status code and one line of detail, never a traceback."""

from __future__ import annotations

import logging
import os
import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cograg.api.admission import Busy
from cograg.api.auth import RateLimited, Unauthorized
from cograg.api.ratelimit import RateStoreUnavailable
from cograg.errors import CogragError, ConfigError, ConfigFileError
from cograg.memory.store import SessionNotFound

log = logging.getLogger("cograg.api")

_STATUS_NAMES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
                 409: "conflict", 413: "too_large", 415: "unsupported_media_type", 422: "invalid_request",
                 429: "too_many_requests", 500: "internal", 503: "unavailable"}


# a broken file the server is configured with is the deployment's fault, not the request's; other
# ConfigErrors (an unknown model or mode in the body) stay 400
_SERVER_CONFIG = "server_config"


class NotFound(CogragError):
    """A document or trace the request names does not exist."""


class PayloadTooLarge(CogragError):
    """An upload over the size limit."""


# an absolute path of two or more parts (not inside a URL): `/srv/data/store/cograg.db`
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.~-])/(?:[^/\s'\"]+/)+([^/\s'\"]*)")


def without_server_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part: an error names the file, never the
    server's directory layout."""
    return _ABSOLUTE_PATH.sub(lambda m: m.group(1) or "…", text)


def one_line(text: str, limit: int = 300) -> str:
    return " ".join(without_server_paths(str(text)).split())[:limit]


def error_response(status: int, detail: str, error: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error or _STATUS_NAMES.get(status, "error"), "detail": one_line(detail)},
                        status_code=status, headers=headers)


def error_headers(exc: CogragError) -> dict[str, str] | None:
    """`Retry-After` on a rate limit or a full queue, `WWW-Authenticate` on a missing or unknown key."""
    if isinstance(exc, RateLimited | Busy):
        return {"Retry-After": str(exc.retry_after)}
    if isinstance(exc, Unauthorized):
        return {"WWW-Authenticate": "Bearer"}
    return None


def validation_detail(exc: RequestValidationError) -> str:
    """The first problem, as `where: what` (`body.question: Field required`)."""
    errors = exc.errors()
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {msg}{more}" if where else f"{msg}{more}"


def status_of(exc: CogragError) -> int:
    if isinstance(exc, ConfigFileError):
        return 500
    if isinstance(exc, NotFound | SessionNotFound):  # also another caller's session, named at once
        return 404
    if isinstance(exc, PayloadTooLarge):
        return 413
    if isinstance(exc, Busy | RateLimited):
        return 429
    if isinstance(exc, Unauthorized):
        return 401
    if isinstance(exc, RateStoreUnavailable):
        return 503
    return 400


def error_of(exc: CogragError) -> tuple[int, str]:
    """(HTTP status, error code) of `exc` wherever it is raised: a handler, before a stream starts,
    or inside one (its `error` event). A broken server file is the operator's to fix: logged, and
    500 server_config; a ConfigError of the request's own (an unknown model) is 400."""
    if isinstance(exc, ConfigFileError):
        log.error("server configuration error: %s", exc)
        return 500, _SERVER_CONFIG
    status = 400 if isinstance(exc, ConfigError) else status_of(exc)
    return status, _STATUS_NAMES.get(status, "error")


def response_for(exc: CogragError) -> JSONResponse:
    """The JSON error response of `exc` (`error_of`), with its Retry-After or WWW-Authenticate header."""
    status, code = error_of(exc)
    return error_response(status, str(exc), code, headers=error_headers(exc))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, validation_detail(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # its headers are part of the answer: `Allow` on a 405 names the methods the path takes
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(CogragError)
    async def _cograg(_: Request, exc: CogragError) -> JSONResponse:
        return response_for(exc)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        # the log keeps the traceback for the operator; the client gets one line
        log.exception("internal error on %s %s", request.method, request.url.path)
        detail = f"{type(exc).__name__}: {exc}" if os.environ.get("COGRAG_DEBUG") else type(exc).__name__
        return error_response(500, detail)


__all__ = ["NotFound", "PayloadTooLarge", "error_headers", "error_of", "error_response", "install_error_handlers", "one_line",
           "response_for", "status_of", "validation_detail", "without_server_paths"]
