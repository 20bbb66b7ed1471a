"""Sessions and their fact ledgers over HTTP (SPEC E6, seed 004 §6): list, show, facts, forget,
export, delete. A session is created by asking in it (`session` in qa/v2) and belongs to the caller
that created it (its API key, or anonymous callers): another caller's session answers 404. Quotes
are blanked when the policy hides source text, as everywhere else."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from cograg.api.access import owns_session
from cograg.api.auth import caller_of
from cograg.api.errors import NotFound
from cograg.api.state import api_state
from cograg.api.views import file_names_only
from cograg.memory.store import SessionError, SessionNotFound

router = APIRouter(prefix="/api/sessions", tags=["sessions"])


def _fact(fact: Any, visible: bool) -> dict[str, Any]:
    data = fact.model_dump(mode="json")
    if not visible:
        data["quote"] = ""
    return data


def _call(request: Request, fn: Any, session_id: str | None = None) -> Any:
    """`fn(memory, visible)`; with `session_id`, only when that session belongs to the caller."""
    state = api_state(request)
    with state.engines.engine() as engine:
        try:
            memory = engine.memory()
            if session_id is not None and not owns_session(memory.session(session_id), caller_of(request)):
                raise NotFound(f"no session {session_id!r}")
            # facts and turns record their sources' paths; a client sees file names
            return file_names_only(fn(memory, state.engines.snippets_visible()))
        except SessionNotFound as exc:
            raise NotFound(str(exc)) from None
        except SessionError as exc:
            if "has no fact" in str(exc):
                raise NotFound(str(exc)) from None
            raise


@router.get("", summary="The caller's sessions (idle ones past the TTL are removed first)")
def list_sessions(request: Request) -> list[dict[str, Any]]:
    caller = caller_of(request)
    return _call(request, lambda mem, _: [s.model_dump(mode="json") for s in mem.sessions(user=caller.owner)
                                          if owns_session(s, caller)])


@router.get("/{session_id}", summary="One session: profile, rolling summary and its turns")
def show_session(session_id: str, request: Request) -> dict[str, Any]:
    def show(mem: Any, _: bool) -> dict[str, Any]:
        session = mem.session(session_id).model_dump(mode="json")
        session["turns"] = [t.model_dump(mode="json") for t in mem.turns(session_id)]
        return session
    return _call(request, show, session_id)


@router.get("/{session_id}/facts", summary="The session's fact ledger, each fact with its source and quote")
def session_facts(session_id: str, request: Request, include_invalid: bool = True) -> list[dict[str, Any]]:
    return _call(request, lambda mem, visible: [_fact(f, visible) for f in
                                                mem.facts(session_id, include_invalid=include_invalid)], session_id)


@router.delete("/{session_id}/facts/{fact_id}", summary="Forget one fact: it is no longer recalled")
def forget_fact(session_id: str, fact_id: str, request: Request) -> dict[str, Any]:
    _call(request, lambda mem, _: mem.forget(session_id, fact_id), session_id)
    return {"forgotten": fact_id, "session": session_id}


@router.get("/{session_id}/export", summary="Everything stored for the session, as JSON")
def export_session(session_id: str, request: Request) -> dict[str, Any]:
    def export(mem: Any, visible: bool) -> dict[str, Any]:
        data = mem.export(session_id=session_id)
        if not visible:
            for s in data["sessions"]:
                for f in s["facts"]:
                    f["quote"] = ""
        return data
    return _call(request, export, session_id)


@router.delete("/{session_id}", summary="Delete a session with its turns and facts")
def delete_session(session_id: str, request: Request) -> dict[str, Any]:
    _call(request, lambda mem, _: mem.delete(session_id), session_id)
    return {"deleted": session_id}


__all__ = ["router"]
