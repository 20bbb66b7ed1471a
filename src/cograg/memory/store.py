"""Where sessions live (SPEC E5): the `MemoryStore` Protocol. The embedded default is SQLite
(`memory/sqlite_store.py`); a multi-process deployment can put Redis behind the same methods.

Every method is one atomic step: `commit_turn` writes a turn, its new facts and the summary
update together or not at all, and two turns committing to one session at the same time both
keep all their facts (fact ids are content-derived, the summary update runs inside the write)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from cograg.errors import CogragError
from cograg.memory.models import CommitResult, Fact, Session, SessionState, SessionSummary, SystemProfile, TurnRecord
from cograg.text import shown_ref


class SessionError(CogragError):
    """A memory operation that cannot be done as asked."""


class SessionNotFound(SessionError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {shown_ref(session_id)}")  # a pasted page is no id: one short line
        self.session_id = session_id


SummaryUpdate = Callable[[SessionSummary], SessionSummary]
# compaction's update: (the summary as stored now, the seqs this fold marks folded) → the summary;
# `fold_turns` runs it inside its write and keeps only its `rolling` and `folded_turns`, so a turn's
# summary update committed meanwhile survives and two compactions never fold one turn twice
FoldUpdate = Callable[[SessionSummary, list[int]], SessionSummary]

MAX_SESSION_ID = 200
# a session id is a URL path segment of the HTTP API (/api/sessions/{id}): no "/", no control character
_SESSION_ID_REFUSED = re.compile(r"[/\x00-\x1f\x7f]")


def check_session_id(session_id: str) -> str:
    """`session_id` if a new session may take it; SessionError naming the rule otherwise. A session
    the CLI made under an id the HTTP API cannot name could not be shown, exported or deleted there."""
    if not session_id or len(session_id) > MAX_SESSION_ID or _SESSION_ID_REFUSED.search(session_id):
        raise SessionError(f"a session id is 1 to {MAX_SESSION_ID} characters without '/' or control "
                           f"characters, not {shown_ref(session_id)}")
    return session_id


@runtime_checkable
class MemoryStore(Protocol):
    # sessions
    def create_session(self, session_id: str, *, user: str | None = None,
                       profile: SystemProfile | None = None) -> Session: ...
    def get_session(self, session_id: str) -> Session | None: ...
    def list_sessions(self, *, user: str | None = None) -> list[Session]: ...
    def delete_session(self, session_id: str) -> bool: ...
    def expire_sessions(self, idle_before: float) -> list[str]: ...

    # one turn: load, then write back atomically
    def load(self, session_id: str, *, max_facts: int = 1000) -> SessionState: ...
    def commit_turn(self, turn: TurnRecord, facts: list[Fact], *, summary_update: SummaryUpdate | None = None,
                    max_facts: int = 1000) -> CommitResult: ...

    # the ledger and the turns
    def facts(self, session_id: str, *, include_invalid: bool = True) -> list[Fact]: ...
    def turns(self, session_id: str, *, include_folded: bool = True) -> list[TurnRecord]: ...
    def forget_fact(self, session_id: str, fact_id: str) -> bool: ...
    def fact_sources(self) -> dict[str, set[str | None]]: ...
    def invalidate_sources(self, reasons: dict[str, str], *,
                           current_hashes: dict[str, str] | None = None) -> list[str]: ...
    def unfolded_tokens(self, session_id: str) -> int: ...
    def fold_turns(self, session_id: str, upto_seq: int, summary_update: FoldUpdate) -> int: ...

    # bookkeeping and the answer cache
    def get_meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def cache_get(self, key: str) -> dict[str, Any] | None: ...
    def cache_put(self, key: str, value: dict[str, Any], *, session_id: str | None = None) -> None: ...
    def cache_clear(self) -> int: ...

    def close(self) -> None: ...


__all__ = ["MAX_SESSION_ID", "FoldUpdate", "SessionError", "MemoryStore", "SessionNotFound", "SummaryUpdate",
           "check_session_id"]
