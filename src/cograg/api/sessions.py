"""Sessions and their fact ledgers over HTTP (SPEC E6, seed 004 §6): list, show, facts, forget,
export, delete. A session is created by asking in it (`session` in qa/v2) and belongs to the caller
that created it (its API key, or anonymous callers): another caller's session answers 404. Quotes
are blanked when the policy hides source text, as everywhere else, and what came from a document
the caller's ACL no longer reaches is withheld (`_Reader`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request

from cograg.api.access import allowed_doc_ids, owns_session
from cograg.api.auth import caller_of
from cograg.api.errors import NotFound
from cograg.api.state import api_state
from cograg.api.views import file_names_only
from cograg.memory.store import SessionError, SessionNotFound
from cograg.text import shown_ref

router = APIRouter(prefix="/api/sessions", tags=["sessions"])


@dataclass(frozen=True)
class _Reader:
    """What the caller may see of a session's contents: source text (the snippet policy) and the
    documents its ACL reaches now. Facts from a document it can no longer read are left out, and
    a turn that cites one keeps its question but not its answer (the trace of that turn is 404 to
    it already): an ACL changed after the turn hides what the turn took from the document."""

    visible: bool
    allowed: set[str] | None  # None: every document

    def may_read(self, doc_id: str | None) -> bool:
        return doc_id is None or self.allowed is None or doc_id in self.allowed

    def may_read_chunk(self, chunk_id: str) -> bool:
        # a chunk id starts with its document id's first 8 characters (ingest.document_chunks.chunk_id_for)
        prefix = chunk_id.split("-", 1)[0]
        return self.allowed is None or any(d.startswith(prefix) for d in self.allowed)

    def fact(self, fact: Any) -> dict[str, Any] | None:
        if not self.may_read(fact.source_doc_id):
            return None
        data = fact.model_dump(mode="json")
        if not self.visible:
            data["quote"] = ""
        return data

    def facts(self, facts: list[Any]) -> list[dict[str, Any]]:
        return [d for d in (self.fact(f) for f in facts) if d is not None]

    def readable_turn(self, turn: dict[str, Any]) -> bool:
        return all(self.may_read_chunk(c) for c in turn.get("citations", []))

    def turn(self, turn: dict[str, Any]) -> dict[str, Any]:
        if self.readable_turn(turn):
            return turn
        return {**turn, "answer": "", "resolved_question": turn.get("question", ""), "summary_short": "",
                "summary_medium": "", "entities": [e for e in turn.get("entities", []) if _asked(e, turn)],
                "withheld": True}

    def session(self, session: dict[str, Any], facts: list[Any], turns: list[dict[str, Any]]) -> dict[str, Any]:
        """The summary less what withheld sources gave it: their facts' conclusions, the topics named
        only by a withheld turn's answer, and the rolling summary once a withheld turn is folded into
        it (its lines are those turns' answers, no longer told apart)."""
        hidden = {f.statement for f in facts if not self.may_read(f.source_doc_id)}
        summary = dict(session.get("summary", {}))
        summary["key_conclusions"] = [c for c in summary.get("key_conclusions", []) if c not in hidden]
        withheld = [t for t in turns if not self.readable_turn(t)]
        answered = {e.removeprefix("the ").lower() for t in withheld for e in t.get("entities", []) if not _asked(e, t)}
        named = {e.removeprefix("the ").lower() for t in turns if t not in withheld for e in t.get("entities", [])}
        summary["main_topics"] = [x for x in summary.get("main_topics", []) if x.lower() not in answered - named]
        if any(t.get("folded") for t in withheld) and summary.get("rolling"):
            summary["rolling"], summary["rolling_withheld"] = "", True
        return {**session, "summary": summary}


def _asked(entity: str, turn: dict[str, Any]) -> bool:
    """Whether the user's own question names `entity` (not taken from the answer)."""
    return entity.removeprefix("the ").lower() in turn.get("question", "").lower()


def _call(request: Request, fn: Any, session_id: str | None = None) -> Any:
    """`fn(memory, reader)`; with `session_id`, only when that session belongs to the caller."""
    state = api_state(request)
    caller = caller_of(request)
    with state.engines.engine() as engine:
        try:
            memory = engine.memory()
            if session_id is not None and not owns_session(memory.stored_session(session_id), caller):
                raise NotFound(f"no session {shown_ref(session_id)}")
            reader = _Reader(state.engines.snippets_visible(), allowed_doc_ids(engine, caller))
            # facts and turns record their sources' paths; a client sees file names
            return file_names_only(fn(memory, reader))
        except SessionNotFound as exc:
            raise NotFound(f"no session {shown_ref(exc.session_id)}") from None
        except SessionError as exc:
            if "has no fact" in str(exc):
                raise NotFound(str(exc)[:300]) from None
            raise


@router.get("", summary="The caller's sessions (idle ones past the TTL are removed first)")
def list_sessions(request: Request) -> list[dict[str, Any]]:
    caller = caller_of(request)
    return _call(request, lambda mem, _: [s.model_dump(mode="json") for s in mem.sessions(user=caller.owner)
                                          if owns_session(s, caller)])


@router.get("/{session_id}", summary="One session: profile, rolling summary and its turns")
def show_session(session_id: str, request: Request) -> dict[str, Any]:
    def show(mem: Any, reader: _Reader) -> dict[str, Any]:
        turns = [t.model_dump(mode="json") for t in mem.turns(session_id)]
        session = reader.session(mem.session(session_id).model_dump(mode="json"), mem.facts(session_id), turns)
        session["turns"] = [reader.turn(t) for t in turns]
        return session
    return _call(request, show, session_id)


@router.get("/{session_id}/facts", summary="The session's fact ledger, each fact with its source and quote")
def session_facts(session_id: str, request: Request, include_invalid: bool = True) -> list[dict[str, Any]]:
    return _call(request, lambda mem, reader: reader.facts(mem.facts(session_id, include_invalid=include_invalid)),
                 session_id)


@router.delete("/{session_id}/facts/{fact_id}", summary="Forget one fact: it is no longer recalled")
def forget_fact(session_id: str, fact_id: str, request: Request) -> dict[str, Any]:
    _call(request, lambda mem, _: mem.forget(session_id, fact_id), session_id)
    return {"forgotten": fact_id, "session": session_id}


@router.get("/{session_id}/export", summary="Everything stored for the session, as JSON")
def export_session(session_id: str, request: Request) -> dict[str, Any]:
    def export(mem: Any, reader: _Reader) -> dict[str, Any]:
        data = mem.export(session_id=session_id)
        facts = mem.facts(session_id)
        data["sessions"] = [{**reader.session(s, facts, s["turns"]), "facts": reader.facts(facts),
                             "turns": [reader.turn(t) for t in s["turns"]]} for s in data["sessions"]]
        return data
    return _call(request, export, session_id)


@router.delete("/{session_id}", summary="Delete a session with its turns and facts")
def delete_session(session_id: str, request: Request) -> dict[str, Any]:
    _call(request, lambda mem, _: mem.delete(session_id), session_id)
    return {"deleted": session_id}


__all__ = ["router"]
