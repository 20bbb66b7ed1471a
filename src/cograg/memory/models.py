"""The records of conversation memory (SPEC E1): a session, its profile and rolling summary, the
verified fact ledger, and its turns with their summaries and tags."""

from __future__ import annotations

import hashlib
import re
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

FactKind = Literal["document", "user_correction"]


def now() -> float:
    return round(time.time(), 3)


def normalise_statement(text: str) -> str:
    """A statement as compared for deduplication: markers, case, spacing and end punctuation ignored."""
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\s+", " ", text).strip().lower()
    return text.rstrip(" .。!！?？;；")


def fact_id_for(session_id: str, statement: str, source_doc_id: str | None, source_chunk_id: str | None) -> str:
    """The same statement from the same source in the same session is the same fact (E2 dedup):
    the id is derived from them, so concurrent writers of one fact insert one row."""
    key = "\x1f".join([session_id, normalise_statement(statement), source_doc_id or "", source_chunk_id or ""])
    return "F" + hashlib.blake2b(key.encode("utf-8"), digest_size=5).hexdigest()


class SystemProfile(BaseModel):
    """Who the assistant is in this session (E1): role, persona and standing rules."""

    role: str = "research assistant"
    persona: str = ""
    rules: list[str] = Field(default_factory=list)


class SessionSummary(BaseModel):
    """The session's rolling summary (E1, layer L2)."""

    main_topics: list[str] = Field(default_factory=list)
    key_conclusions: list[str] = Field(default_factory=list, description="verified statements only")
    unresolved_questions: list[str] = Field(default_factory=list)
    rolling: str = Field("", description="older turns folded by compaction (E4)")
    folded_turns: int = 0


class Session(BaseModel):
    session_id: str
    user: str | None = None
    created_at: float = Field(default_factory=now)
    updated_at: float = Field(default_factory=now)
    turn_count: int = 0
    profile: SystemProfile = Field(default_factory=SystemProfile)
    summary: SessionSummary = Field(default_factory=SessionSummary)


class Fact(BaseModel):
    """One entry of the fact ledger (E1/E2): a verified statement with its provenance. A user
    correction has no document behind it and is never shown as a document fact (E6)."""

    fact_id: str
    session_id: str
    statement: str
    source_doc_id: str | None = None
    source_chunk_id: str | None = None
    source: str = Field("", description="the source document's path")
    source_hash: str | None = Field(None, description="content hash of the source document when established")
    quote: str = ""
    confidence: float = 0.0
    created_at: float = Field(default_factory=now)
    turn_id: str | None = None
    kind: FactKind = "document"
    valid: bool = True
    invalid_reason: str | None = None
    corrects: str | None = Field(None, description="the fact a user correction replaces")


class TurnRecord(BaseModel):
    """One turn as stored (seed 004 §6.1)."""

    turn_id: str
    session_id: str
    seq: int = 0
    created_at: float = Field(default_factory=now)
    question: str
    resolved_question: str = Field("", description="the question after follow-up resolution")
    question_norm: str = ""
    answer: str = ""
    route: str = ""
    mode: str = ""
    grounded: bool = False
    confidence: float = 0.0
    tags: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list, description="named things the turn was about")
    summary_short: str = ""
    summary_medium: str = ""
    citations: list[str] = Field(default_factory=list, description="chunk ids cited")
    facts_written: list[str] = Field(default_factory=list)
    facts_used: list[str] = Field(default_factory=list)
    trace_id: str = ""
    folded: bool = Field(False, description="folded into the rolling summary by compaction")
    tokens: int = 0


class WorkingBench(BaseModel):
    """This turn's transient state (E1): what was loaded, how the question was read, which facts
    were recalled and which context blocks were built; recorded in the turn's trace (`outcome.memory`)."""

    question: str
    resolved_question: str
    rewrite: dict[str, Any] | None = None
    recalled_fact_ids: list[str] = Field(default_factory=list)
    context_block_ids: list[str] = Field(default_factory=list)
    context_tokens: int = 0
    cache_key: str | None = None
    problems: list[str] = Field(default_factory=list, description="corrupt rows skipped on load")


class SessionState(BaseModel):
    """What `MemoryStore.load` returns for a turn."""

    session: Session
    facts: list[Fact] = Field(default_factory=list)
    turns: list[TurnRecord] = Field(default_factory=list, description="unfolded turns, oldest first")
    problems: list[str] = Field(default_factory=list)


class CommitResult(BaseModel):
    turn_id: str
    seq: int
    facts_written: list[str] = Field(default_factory=list)
    facts_duplicate: list[str] = Field(default_factory=list)
    facts_dropped: list[str] = Field(default_factory=list, description="over the ledger cap")


__all__ = ["CommitResult", "Fact", "FactKind", "Session", "SessionState", "SessionSummary", "SystemProfile",
           "TurnRecord", "WorkingBench", "fact_id_for", "normalise_statement", "now"]
