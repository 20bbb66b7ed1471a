"""Answer endpoints: the simple path, qa/v2 (seed 004 §9.1) and its Server-Sent Events stream.

Each request opens its own engine (`EngineFactory.engine`): its own store connection, verifier
and trace recorder. The stream runs the turn in a worker thread and relays the orchestrator's
event bus; its last event is the whole qa/v2 answer, so no citation depends on an event that a
client may have missed.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import APIRouter, Request
from sse_starlette.sse import EventSourceResponse

from cograg.api.access import allowed_doc_ids, check_session, may_read, stamp_trace
from cograg.api.admission import Ticket
from cograg.api.auth import Caller, caller_of
from cograg.api.errors import NotFound, error_of, one_line, response_for
from cograg.api.schemas import QARequest, QAResponseV2
from cograg.api.state import ApiState, api_state
from cograg.api.views import file_names_only, hide_source_text, qa_simple, qa_v2
from cograg.control.models import CancelToken, mode_name
from cograg.engine import Engine
from cograg.errors import CogragError, ConfigError, StoreError
from cograg.orchestrator.events import BusEvent, EventBus
from cograg.questions import checked_question
from cograg.text import shown_ref

router = APIRouter(prefix="/api/agent", tags=["answers"])

ANSWER_EVENT = "answer"  # the stream's last event on success: the qa/v2 body
ERROR_EVENT = "error"  # the stream's last event on failure: {error, detail}


@dataclass
class PreparedTurn:
    """A request checked before anything runs: its mode, its scope resolved to document ids."""

    body: QARequest
    mode: str | None
    doc_ids: list[str] | None
    caller: Caller


def resolve_doc_ids(engine: Engine, refs: list[str] | None, caller: Caller | None = None) -> list[str] | None:
    """Ids or id prefixes → document ids; a reference that matches nothing, or only a document
    `caller` may not read, is a 404."""
    if refs is None:
        return None
    # only what the caller may read counts: a prefix a hidden document shares neither makes it
    # ambiguous ("matches 2 documents") nor is found
    allowed = allowed_doc_ids(engine, caller) if caller is not None else None
    out: list[str] = []
    for ref in refs:
        try:
            doc = engine.document(ref, by_name=False, allowed=allowed)  # not by file name: see delete_document
        except StoreError as exc:
            raise NotFound(str(exc)) from None
        if caller is not None and not may_read(engine, caller, doc):
            raise NotFound(f"no document matches {shown_ref(ref)}")
        out.append(doc.doc_id)
    return list(dict.fromkeys(out))


def prepare(state: ApiState, body: QARequest, caller: Caller) -> PreparedTurn:
    # a question no turn takes (too long, no words) is a 400 before a stream starts, not an event in it
    checked_question(body.question, state.engines.settings.answer.max_question_chars)
    try:
        mode = mode_name(body.mode) if body.mode else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    with state.engines.engine(body.model) as engine:  # also checks the model profile
        if body.session is not None and state.engines.supports_sessions and engine.components.memory is not None:
            check_session(engine.memory(), body.session, caller)  # another caller's session is not found
        return PreparedTurn(body, mode, resolve_doc_ids(engine, body.doc_ids, caller), caller)


def run_turn(state: ApiState, turn: PreparedTurn, *, bus: EventBus | None = None,
             cancel: CancelToken | None = None, ticket: Ticket | None = None) -> Any:
    """Answer one question on a fresh engine as the turn's caller; counts it in the metrics and
    records the caller in the trace. `ticket`: the place in the queue reserved for it (a stream's)."""
    body = turn.body
    extra: dict[str, Any] = {}
    if body.session is not None and state.engines.supports_sessions:
        extra["session"] = body.session
    with state.admission.turn(ticket), state.engines.engine(body.model) as engine:
        resp = engine.ask(body.question, principal=turn.caller.principal, mode=turn.mode, doc_ids=turn.doc_ids,
                          bus=bus, cancel=cancel, owner=turn.caller.owner, **extra)
        stamp_trace(engine, resp.trace_id, turn.caller)
        state.metrics.observe_answer(resp, engine.store.get_trace(resp.trace_id))
    return resp


@router.post("/qa", summary="Answer a question (the simple path: the C1 contract object)")
def ask_simple(body: QARequest, request: Request) -> dict[str, Any]:
    state = api_state(request)
    resp = run_turn(state, prepare(state, body, caller_of(request)))
    return qa_simple(resp, visible=state.engines.snippets_visible())


@router.post("/qa/v2", response_model=QAResponseV2, summary="Answer a question (seed 004 §9.1)")
def ask_v2(body: QARequest, request: Request) -> QAResponseV2:
    state = api_state(request)
    resp = run_turn(state, prepare(state, body, caller_of(request)))
    return qa_v2(resp, visible=state.engines.snippets_visible(), session=body.session)


def _sse(event: str, data: Any) -> dict[str, str]:
    return {"event": event, "data": json.dumps(data, ensure_ascii=False, default=str)}


@router.post("/qa/v2/stream", summary="Answer a question, streaming the workflow as Server-Sent Events",
             response_description="text/event-stream: one event per orchestrator event (ROUTE_DECIDED, "
                                  "RETRIEVED, GRADED, SENTENCE_VERIFIED, …), then `answer` (the qa/v2 body) "
                                  "or `error` ({error, detail})")
async def ask_v2_stream(body: QARequest, request: Request) -> Any:
    state = api_state(request)
    try:  # a full queue is a 429 before the stream starts: its place is taken now, not once it runs
        ticket = state.admission.reserve()
    except CogragError as exc:
        return response_for(exc)
    try:  # a bad mode, model or document scope is an HTTP error before the stream starts
        turn = await anyio.to_thread.run_sync(prepare, state, body, caller_of(request))
        visible = await anyio.to_thread.run_sync(state.engines.snippets_visible)
    except CogragError as exc:
        ticket.release()
        return response_for(exc)
    except BaseException:  # anything else (the client gone while it was prepared): the place goes back
        ticket.release()
        raise

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    bus = EventBus()
    cancel = CancelToken()

    def relay(ev: BusEvent) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, ("event", ev))
    bus.subscribe(relay)

    async def work() -> None:
        try:
            resp = await anyio.to_thread.run_sync(
                lambda: run_turn(state, turn, bus=bus, cancel=cancel, ticket=ticket))
            await queue.put(("answer", resp))
        except CogragError as exc:  # a full queue, a bad request, a broken server file: as the HTTP API says them
            await queue.put(("error", {"error": error_of(exc)[1], "detail": one_line(str(exc))}))
        except Exception as exc:  # noqa: BLE001 - the stream ends with an error event, never a traceback
            await queue.put(("error", {"error": "internal", "detail": type(exc).__name__}))

    async def events() -> AsyncIterator[dict[str, str]]:
        task = asyncio.create_task(work())
        try:
            while True:
                kind, item = await queue.get()
                if kind == "event":
                    data = file_names_only(item.model_dump(mode="json"))
                    yield _sse(item.name, data if visible else hide_source_text(data))
                elif kind == "answer":
                    yield _sse(ANSWER_EVENT, qa_v2(item, visible=visible, session=body.session).model_dump(mode="json"))
                    return
                else:
                    yield _sse(ERROR_EVENT, item)
                    return
        finally:
            if not task.done():  # the client went away: stop the turn at its next check
                cancel.cancel("client disconnected")

    return TicketedStream(events(), ticket, ping=15)


class TicketedStream(EventSourceResponse):
    """The event stream of a turn whose place in the queue (`ticket`) was reserved before it: the
    place goes back when the response ends, if the turn never took it over (the stream never
    started its turn, or the client went away before it did)."""

    def __init__(self, content: Any, ticket: Ticket, **options: Any) -> None:
        super().__init__(content, **options)
        self.ticket = ticket
        weakref.finalize(self, ticket.release)  # a response never sent (dropped on the way) gives it back too

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.ticket.release()


__all__ = ["ANSWER_EVENT", "ERROR_EVENT", "TicketedStream", "prepare", "resolve_doc_ids", "router", "run_turn"]
