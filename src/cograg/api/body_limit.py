"""Caps on request bodies, applied before FastAPI reads a byte of them.

FastAPI reads and parses a body (a JSON document into memory, a multipart upload spooled to disk)
before any dependency runs, so neither the key check, the rate limit nor the upload's own size
check (documents.py) could stop a client from sending gigabytes. `BodyLimit` sits in front:

* a declared `Content-Length` over the route's cap is refused with 413 before the app runs;
* the bytes that do arrive (a chunked body declares no length) are counted as the app reads them,
  and reading stops with 413 at the cap;
* an upload's parts (its files) are counted one by one as they stream in, by the multipart
  boundary alone, so a file over the per-file limit is refused then, not once the whole request
  is on disk.

The caller of any request that may carry a body to an /api/ endpoint is identified and admitted
under its rate limit before any of the body is read (the router's `authenticate` then takes that
caller), so an unknown key or a refused anonymous caller cannot make the server store up to a
gigabyte of files, or read and parse a megabyte of JSON, on its way to a 401 or 429. (Every /api/
endpoint checks its caller; the open ones, /healthz and /metrics, take no body.)

An upload (`POST /api/documents`) may carry `MAX_FILES_PER_UPLOAD` files of the upload limit each,
as documents.py counts it; every other body is a small JSON document (a question is at most a few
thousand characters) and gets `DEFAULT_BODY_LIMIT`.
"""

from __future__ import annotations

from typing import Any

import anyio
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from python_multipart.multipart import parse_options_header
from starlette.requests import Request

from cograg.api.auth import ADMITTED_CALLER, Gatekeeper
from cograg.api.errors import error_response, response_for
from cograg.api.state import ApiState
from cograg.errors import CogragError

DEFAULT_BODY_LIMIT = 1 << 20
# a part's own headers (Content-Disposition with the file name, Content-Type) come on top of its
# data; generous, so that a file at the limit is never refused for its headers
PART_HEADERS_ALLOWANCE = 16 << 10
UPLOAD_PATH = "/api/documents"


class BodyTooLarge(HTTPException):
    """Raised from `receive` at the cap. An HTTPException, because FastAPI passes that on from its
    body reading (any other error there becomes a 400 "error parsing the body")."""

    def __init__(self, detail: str) -> None:
        super().__init__(status_code=413, detail=detail)


def megabytes(n: int) -> str:
    """`n` bytes in MB as a person writes them: "50 MB", "1000 MB", "0.01 MB"."""
    value = n / (1 << 20)
    return f"{value:.3g} MB" if value < 100 else f"{value:.0f} MB"


class PartSizes:
    """The size of each part of a multipart body as it streams in: the bytes between one boundary
    delimiter and the next. A delimiter is "\r\n--boundary" followed by "\r\n" (another part),
    "--" (the last) or transport padding (a space or tab), as python-multipart reads it; the same
    bytes followed by anything else are data of the part, so a file cannot split itself into small
    parts by holding them. A delimiter split over two chunks is found by keeping the last
    `len(delimiter) + 1` bytes of each chunk for the next."""

    def __init__(self, boundary: bytes) -> None:
        # the CRLF before "--boundary" is part of the delimiter: a file holding "--boundary" on a
        # line of its own cannot split itself into small parts; the body's first delimiter has
        # none, so the count starts as if one came before it
        self.delimiter = b"\r\n--" + boundary
        self.current = 0  # bytes of the part now streaming, up to the kept tail
        self.largest = 0
        self._tail = b"\r\n"

    @staticmethod
    def _ends_part(after: bytes) -> bool | None:
        """Whether the bytes after a delimiter's text make it one; None: not known yet."""
        if after[:1] in (b" ", b"\t"):
            return True
        if len(after) < 2:
            return None if after in (b"", b"\r", b"-") else False
        return after in (b"\r\n", b"--")

    def feed(self, chunk: bytes) -> int:
        """Count `chunk`; the size of the largest part seen so far."""
        data = self._tail + chunk
        size = len(self.delimiter)
        start = search = 0  # start: where the current part's uncounted bytes begin
        while (found := data.find(self.delimiter, search)) != -1:
            ends = self._ends_part(data[found + size:found + size + 2])
            if ends is None:  # at the very end: decided with the next chunk (it lies in the kept tail)
                break
            if not ends:  # the delimiter's text inside a part's data
                search = found + 1
                continue
            self.largest = max(self.largest, self.current + found - start)
            self.current = 0
            start = search = found + size
        counted_to = max(start, len(data) - (size + 1))
        self.current += counted_to - start
        self._tail = data[counted_to:]
        self.largest = max(self.largest, self.current)
        return self.largest


def multipart_boundary(headers: Headers) -> bytes | None:
    """The boundary of a multipart body, read as Starlette's form parser reads it
    (python-multipart's `parse_options_header`: quoted values, and "boundary=" inside another
    parameter's value is not the boundary)."""
    content_type, options = parse_options_header(headers.get("content-type", ""))
    if not content_type.startswith(b"multipart/"):
        return None
    return options.get(b"boundary") or None


class BodyLimit:
    """The ASGI middleware. The per-file upload limit and the gatekeeper are the app's
    (`ApiState.max_upload_bytes`, `ApiState.gate`), read per request, so that this and
    documents.py never hold two numbers; `upload_files` is the most files an upload may carry."""

    def __init__(self, app: Any, *, upload_files: int, default_limit: int = DEFAULT_BODY_LIMIT) -> None:
        self.app = app
        self.upload_files = upload_files
        self.default_limit = default_limit

    def is_upload(self, scope: dict[str, Any]) -> bool:
        return scope.get("method") == "POST" and scope.get("path", "").rstrip("/") == UPLOAD_PATH

    @staticmethod
    def caller_first(scope: dict[str, Any]) -> bool:
        """A request whose caller is checked before its body is read: one that may carry a body
        (not GET, HEAD or OPTIONS) to an /api/ endpoint."""
        return scope.get("method") not in ("GET", "HEAD", "OPTIONS") and scope.get("path", "").startswith("/api/")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = self.is_upload(scope)
        state: ApiState = scope["app"].state.cograg
        file_cap = state.max_upload_bytes
        cap = file_cap * self.upload_files if upload else self.default_limit
        what = "upload" if upload else "request body"
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:  # refused unread
            detail = f"{what} too large ({declared} bytes; the limit is {megabytes(cap)})"
            await error_response(413, detail)(scope, receive, send)
            return
        if self.caller_first(scope) and not await self.admitted(state.gate, scope, receive, send):
            return
        boundary = multipart_boundary(headers) if upload else None
        parts = PartSizes(boundary) if boundary else None
        part_cap = file_cap + PART_HEADERS_ALLOWANCE
        received = 0
        started = False

        async def counted_receive() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                body = message.get("body", b"")
                received += len(body)
                if received > cap:
                    raise BodyTooLarge(f"{what} too large (over {megabytes(cap)})")
                if parts is not None and parts.feed(body) > part_cap:
                    raise BodyTooLarge(f"a file in the upload is larger than the upload limit of "
                                       f"{megabytes(file_cap)}")
            return message

        async def watched_send(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except BodyTooLarge as exc:  # read by a part of the app that does not answer HTTP errors itself
            if started:
                raise
            await error_response(413, str(exc.detail))(scope, receive, send)

    async def admitted(self, gate: Gatekeeper, scope: dict[str, Any], receive: Any, send: Any) -> bool:
        """Identify and admit the caller before the body is read; False once refused (answered)."""
        request = Request(scope)
        try:  # the counters may be a SQLite file or Redis: not on the event loop
            caller = await anyio.to_thread.run_sync(gate.identified_and_admitted, request)
        except CogragError as exc:
            await response_for(exc)(scope, receive, send)
            return False
        setattr(request.state, ADMITTED_CALLER, caller)
        return True


__all__ = ["DEFAULT_BODY_LIMIT", "PART_HEADERS_ALLOWANCE", "BodyLimit", "BodyTooLarge", "PartSizes", "megabytes",
           "multipart_boundary"]
