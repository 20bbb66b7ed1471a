"""What a caller may see: documents by their ACL, traces and sessions by their owner.

A document without an ACL is public; one with an ACL is readable by a principal whose groups (or
`user:NAME`, `tenant:NAME`) it names (SPEC B3). A trace made through the API records its caller
(`caller` in the trace) and is shown only to that caller, and only while every document it names
is still readable by them; a trace made elsewhere (the CLI) has no caller and is shown to anyone
who may read all its documents. A session belongs to the key that created it (anonymous sessions
to anonymous callers); one made from the CLI or Python has no owner and is served to no caller.
Whatever a caller may not see answers 404, as if it did not exist.
"""

from __future__ import annotations

from typing import Any

from cograg.api.auth import Caller
from cograg.api.errors import NotFound
from cograg.documents import Document
from cograg.engine import Engine
from cograg.memory.store import SessionNotFound
from cograg.text import shown_ref

CALLER_KEY = "caller"  # where a trace records who asked
_TRACE_ROW_KEYS = ("trace_id", "created_at", "kind", "question")


def allowed_doc_ids(engine: Engine, caller: Caller) -> set[str] | None:
    """The documents `caller` may read; None when no document has an ACL (all are public)."""
    return engine.store.allowed_doc_ids(caller.principal.acl_keys())


def may_read(engine: Engine, caller: Caller, doc: Document | None) -> bool:
    if doc is None:
        return False
    allowed = allowed_doc_ids(engine, caller)
    return allowed is None or doc.doc_id in allowed


def doc_ids_in(value: Any) -> set[str]:
    """Every `doc_id` value anywhere in a trace."""
    found: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "doc_id" and isinstance(v, str):
                found.add(v)
            else:
                found |= doc_ids_in(v)
    elif isinstance(value, list):
        for v in value:
            found |= doc_ids_in(v)
    return found


def stamp_trace(engine: Engine, trace_id: str, caller: Caller) -> None:
    """Record the caller in a trace the API just made."""
    trace = engine.store.get_trace(trace_id)
    if trace is None:
        return
    data = {k: v for k, v in trace.items() if k not in _TRACE_ROW_KEYS}
    data[CALLER_KEY] = {"user": caller.owner, "anonymous": caller.anonymous}
    engine.store.save_trace(trace["trace_id"], trace["kind"], trace["question"], data)


def visible_trace(engine: Engine, trace: dict[str, Any] | None, caller: Caller, ref: str) -> dict[str, Any]:
    """`trace` if `caller` may see it, else NotFound."""
    if trace is None:
        raise NotFound(f"no trace {shown_ref(ref)}")
    recorded = trace.get(CALLER_KEY)
    if isinstance(recorded, dict) and (recorded.get("user") != caller.owner
                                        or bool(recorded.get("anonymous")) != caller.anonymous):
        raise NotFound(f"no trace {shown_ref(ref)}")
    allowed = allowed_doc_ids(engine, caller)
    if allowed is not None and not doc_ids_in(trace) <= allowed:
        raise NotFound(f"no trace {shown_ref(ref)}")
    return trace


def owns_session(session: Any, caller: Caller) -> bool:
    return session.user == caller.owner


def check_session(memory: Any, session_id: str, caller: Caller) -> None:
    """NotFound unless the session is absent (asking creates it) or belongs to `caller`."""
    try:
        found = memory.stored_session(session_id)
    except SessionNotFound:
        return
    if not owns_session(found, caller):
        raise NotFound(f"no session {session_id!r}")


__all__ = ["CALLER_KEY", "allowed_doc_ids", "check_session", "doc_ids_in", "may_read", "owns_session",
           "stamp_trace", "visible_trace"]
