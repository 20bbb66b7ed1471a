"""Reading the Redis memory store's records back (`redis_store.py` writes them): a session's hash,
and its facts and turns in order. Corrupt parts are skipped as in SQLite (`stored_rows.py`)."""

from __future__ import annotations

from typing import Any

from cograg.memory.models import Fact, Session, SessionSummary, SystemProfile, TurnRecord
from cograg.memory.stored_rows import parse_rows, part_or_empty


def text(value: Any) -> str | None:
    """A Redis reply as text (the client returns bytes)."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def session_from_hash(session_id: str, raw: dict[Any, Any], problems: list[str] | None = None) -> Session:
    """The Session in a session's `P:s:{S}` hash; a corrupt profile or summary reads as empty."""
    data = {text(k): text(v) for k, v in raw.items()}
    where = f"session {session_id}: corrupt"
    return Session(session_id=session_id, user=data.get("user") or None,
                   created_at=float(data.get("created_at") or 0), updated_at=float(data.get("updated_at") or 0),
                   turn_count=int(data.get("turn_count") or 0),
                   profile=part_or_empty(data.get("profile"), SystemProfile, problems, f"{where} profile"),
                   summary=part_or_empty(data.get("summary"), SessionSummary, problems, f"{where} summary"))


def ordered_facts(raw: dict[Any, Any], ranks: dict[str, float], problems: list[str]) -> list[Fact]:
    """The facts in the order they were established: created_at, then insertion order."""
    facts = parse_rows(raw.values(), Fact, problems, "fact")
    facts.sort(key=lambda f: (f.created_at, ranks.get(f.fact_id, 0.0)))
    return facts


def ordered_turns(raw: dict[Any, Any], folded: set[Any], *, include_folded: bool,
                  problems: list[str]) -> list[TurnRecord]:
    """The turns by sequence number, the folded ones left out unless `include_folded`."""
    folded_seqs = {int(s) for s in folded}
    by_seq = {int(k): v for k, v in raw.items()}
    chosen = [s for s in sorted(by_seq) if include_folded or s not in folded_seqs]
    return parse_rows((by_seq[s] for s in chosen), TurnRecord, problems, "turn")
