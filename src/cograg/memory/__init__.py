"""Conversation memory (SPEC E): sessions, the verified fact ledger, layered context, the answer
cache, compaction and governance. Sits above control and below the orchestrator."""

from cograg.memory.models import Fact, Session, SessionSummary, SystemProfile, TurnRecord, WorkingBench
from cograg.memory.service import Compaction, SessionMemory, SessionTurn
from cograg.memory.sqlite_store import SQLiteMemoryStore
from cograg.memory.store import MemoryStore, SessionError, SessionNotFound

__all__ = ["Compaction", "Fact", "MemoryStore", "SQLiteMemoryStore", "Session", "SessionError", "SessionMemory",
           "SessionNotFound", "SessionSummary", "SessionTurn", "SystemProfile", "TurnRecord", "WorkingBench"]
