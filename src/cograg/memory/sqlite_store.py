"""The embedded `MemoryStore` (SPEC E5): `<store>/memory.db`, SQLite in WAL mode.

A separate file next to `cograg.db`: the document store versions its schema with SQLite's
`user_version`, and so does this one; sessions never slow down or lock a document write.
Each turn is written back in one `BEGIN IMMEDIATE` transaction, which serialises writers across
threads and processes; fact rows are keyed by a content-derived id (`INSERT OR IGNORE`), so
concurrent turns on one session never lose a fact. A row that does not parse is reported in
`SessionState.problems` and skipped, never fatal (SQL reads JSON only `WHERE json_valid(data)`).
A SQLite failure after the file opened (read-only, damaged, disk full) is a one-line StoreError."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cograg.index.sqlite_conn import SerializedConnection
from cograg.index.sqlite_store import immediate_transaction
from cograg.errors import StoreError
from cograg.memory.models import (
    CommitResult, Fact, Session, SessionState, SessionSummary, SystemProfile, TurnRecord, now,
)
from cograg.memory.store import FoldUpdate, SessionNotFound, SummaryUpdate
from cograg.memory.stored_rows import part_or_empty, row_or_none

DB_NAME = "memory.db"

# Each migration moves the schema from version i to i+1; never edit a released one.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE memory_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE sessions (
        session_id TEXT PRIMARY KEY,
        user TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        turn_count INTEGER NOT NULL DEFAULT 0,
        profile TEXT NOT NULL DEFAULT '{}',
        summary TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX sessions_user ON sessions(user);
    CREATE TABLE facts (
        session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
        fact_id TEXT NOT NULL,
        created_at REAL NOT NULL,
        source_doc_id TEXT,
        valid INTEGER NOT NULL DEFAULT 1,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, fact_id)
    );
    CREATE INDEX facts_source ON facts(source_doc_id);
    CREATE TABLE turns (
        session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        turn_id TEXT NOT NULL UNIQUE,
        folded INTEGER NOT NULL DEFAULT 0,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE INDEX turns_unfolded ON turns(session_id, folded, seq);
    CREATE TABLE answer_cache (
        key TEXT PRIMARY KEY,
        session_id TEXT,
        created_at REAL NOT NULL,
        hits INTEGER NOT NULL DEFAULT 0,
        data TEXT NOT NULL
    );
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


class SQLiteMemoryStore:
    """Sessions, facts, turns and the answer cache in one SQLite file."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory).expanduser()
        self.path = self.directory / DB_NAME
        self._lock = threading.RLock()  # one connection, shared by the threads of one process
        # Two openers of a new file race to switch it to WAL and migrate it; SQLite answers the
        # loser "database is locked" at once (no busy wait for a journal-mode change): retry briefly.
        for attempt in range(6):
            try:
                self._open()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 5:
                    raise StoreError(f"cannot open memory store {self.path}: {exc}") from exc
                with contextlib.suppress(Exception):
                    self.conn.close()
                time.sleep(0.05 * (attempt + 1))
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"cannot open memory store {self.path}: {exc}") from exc

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.conn = SerializedConnection(sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                                         check_same_thread=False))
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA busy_timeout=30000")
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self._migrate()

    def _migrate(self) -> None:
        current = int(self.conn.execute("PRAGMA user_version").fetchone()[0])
        if current > SCHEMA_VERSION:
            raise StoreError(f"memory schema version {current} is newer than this cograg supports ({SCHEMA_VERSION})")
        for version in range(current, SCHEMA_VERSION):
            # not _tx: a "database is locked" here must stay an OperationalError, which __init__ retries
            with self._lock, immediate_transaction(self.conn) as conn:
                if int(conn.execute("PRAGMA user_version").fetchone()[0]) != version:
                    continue  # another process migrated meanwhile
                for stmt in MIGRATIONS[version].split(";\n"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute(f"PRAGMA user_version={version + 1}")

    def _failed(self, exc: sqlite3.Error) -> StoreError:
        """One line naming the file and what is wrong with it, for the CLI and the API to report."""
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        text = (str(exc).splitlines() or [""])[0]
        if code == 8 or "readonly" in text:  # SQLITE_READONLY
            what = "read-only"
        elif code in (11, 26) or "malformed" in text or "not a database" in text:  # SQLITE_CORRUPT, SQLITE_NOTADB
            what = "damaged"
        else:
            what = "failed"
        return StoreError(f"memory store {self.path}: {what} ({text})")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                with immediate_transaction(self.conn) as conn:
                    yield conn
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self.conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc

    # ------------------------------------------------------------------ sessions
    @staticmethod
    def _session(row: sqlite3.Row, problems: list[str] | None = None) -> Session:
        where = f"session {row['session_id']}: corrupt"
        return Session(session_id=row["session_id"], user=row["user"], created_at=row["created_at"],
                       updated_at=row["updated_at"], turn_count=row["turn_count"],
                       profile=part_or_empty(row["profile"], SystemProfile, problems, f"{where} profile"),
                       summary=part_or_empty(row["summary"], SessionSummary, problems, f"{where} summary"))

    def create_session(self, session_id: str, *, user: str | None = None,
                       profile: SystemProfile | None = None) -> Session:
        t = now()
        with self._tx() as conn:
            conn.execute("INSERT OR IGNORE INTO sessions(session_id, user, created_at, updated_at, profile, summary) "
                         "VALUES(?, ?, ?, ?, ?, ?)", (session_id, user, t, t,
                                                      (profile or SystemProfile()).model_dump_json(),
                                                      SessionSummary().model_dump_json()))
        found = self.get_session(session_id)
        assert found is not None
        return found

    def get_session(self, session_id: str) -> Session | None:
        rows = self._rows("SELECT * FROM sessions WHERE session_id=?", (session_id,))
        return self._session(rows[0], []) if rows else None

    def list_sessions(self, *, user: str | None = None) -> list[Session]:
        if user is None:
            rows = self._rows("SELECT * FROM sessions ORDER BY updated_at DESC")
        else:
            rows = self._rows("SELECT * FROM sessions WHERE user=? ORDER BY updated_at DESC", (user,))
        return [self._session(r, []) for r in rows]

    def delete_session(self, session_id: str) -> bool:
        with self._tx() as conn:
            conn.execute("DELETE FROM answer_cache WHERE session_id=?", (session_id,))
            return conn.execute("DELETE FROM sessions WHERE session_id=?", (session_id,)).rowcount > 0

    def expire_sessions(self, idle_before: float) -> list[str]:
        with self._tx() as conn:
            ids = [r[0] for r in conn.execute("SELECT session_id FROM sessions WHERE updated_at < ?", (idle_before,))]
            for sid in ids:
                conn.execute("DELETE FROM answer_cache WHERE session_id=?", (sid,))
                conn.execute("DELETE FROM sessions WHERE session_id=?", (sid,))
        return ids

    # ------------------------------------------------------------------ one turn
    def load(self, session_id: str, *, max_facts: int = 1000) -> SessionState:
        problems: list[str] = []
        with self._lock:  # one consistent read of the session
            try:
                self.conn.execute("BEGIN")
                try:
                    rows = self.conn.execute("SELECT * FROM sessions WHERE session_id=?", (session_id,)).fetchall()
                    if not rows:
                        raise SessionNotFound(session_id)
                    session = self._session(rows[0], problems)
                    fact_rows = self.conn.execute(
                        "SELECT data FROM facts WHERE session_id=? AND valid=1 "
                        "ORDER BY created_at DESC, rowid DESC LIMIT ?", (session_id, max_facts)).fetchall()
                    turn_rows = self.conn.execute("SELECT data, folded FROM turns WHERE session_id=? AND folded=0 "
                                                  "ORDER BY seq", (session_id,)).fetchall()
                finally:
                    self.conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc
        facts = self._parse(fact_rows, Fact, problems, "fact")
        facts.reverse()  # oldest first, the order they were established in
        return SessionState(session=session, facts=facts, turns=self._parse(turn_rows, TurnRecord, problems, "turn"),
                            problems=problems)

    @staticmethod
    def _parse(rows: list[sqlite3.Row], model: Any, problems: list[str], what: str) -> list[Any]:
        out = []
        for r in rows:
            item = row_or_none(r["data"], model, problems, what)
            if item is None:
                continue
            if what == "turn" and bool(r["folded"]) != item.folded:  # the column is what compaction set
                item = item.model_copy(update={"folded": bool(r["folded"])})
            out.append(item)
        return out

    def commit_turn(self, turn: TurnRecord, facts: list[Fact], *, summary_update: SummaryUpdate | None = None,
                    max_facts: int = 1000) -> CommitResult:
        result = CommitResult(turn_id=turn.turn_id, seq=0)
        with self._tx() as conn:
            rows = conn.execute("SELECT * FROM sessions WHERE session_id=?", (turn.session_id,)).fetchall()
            if not rows:
                raise SessionNotFound(turn.session_id)
            seq = int(conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM turns WHERE session_id=?",
                                   (turn.session_id,)).fetchone()[0])
            result.seq = seq
            for fact in facts:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO facts(session_id, fact_id, created_at, source_doc_id, valid, data) "
                    "VALUES(?, ?, ?, ?, ?, ?)", (fact.session_id, fact.fact_id, fact.created_at, fact.source_doc_id,
                                                 int(fact.valid), fact.model_dump_json()))
                (result.facts_written if cur.rowcount else result.facts_duplicate).append(fact.fact_id)
            over = int(conn.execute("SELECT COUNT(*) FROM facts WHERE session_id=?",
                                    (turn.session_id,)).fetchone()[0]) if result.facts_written else 0
            if over > max_facts:  # the memory cap: the oldest facts go first
                dropped = [r[0] for r in conn.execute(
                    "SELECT fact_id FROM facts WHERE session_id=? ORDER BY created_at, rowid LIMIT ?",
                    (turn.session_id, over - max_facts))]
                conn.executemany("DELETE FROM facts WHERE session_id=? AND fact_id=?",
                                 [(turn.session_id, f) for f in dropped])
                result.facts_dropped = dropped
            stored = turn.model_copy(update={"seq": seq, "facts_written": result.facts_written})
            conn.execute("INSERT INTO turns(session_id, seq, turn_id, folded, data) VALUES(?, ?, ?, 0, ?)",
                         (turn.session_id, seq, turn.turn_id, stored.model_dump_json()))
            if summary_update is None:
                conn.execute("UPDATE sessions SET updated_at=?, turn_count=turn_count + 1 WHERE session_id=?",
                             (now(), turn.session_id))
            else:  # read, merge and write inside the transaction: a concurrent turn's update is kept
                summary = summary_update(self._session(rows[0], []).summary)
                conn.execute("UPDATE sessions SET updated_at=?, turn_count=turn_count + 1, summary=? "
                             "WHERE session_id=?", (now(), summary.model_dump_json(), turn.session_id))
        return result

    # ------------------------------------------------------------------ ledger and turns
    def facts(self, session_id: str, *, include_invalid: bool = True) -> list[Fact]:
        sql = "SELECT data FROM facts WHERE session_id=?" + ("" if include_invalid else " AND valid=1")
        return self._parse(self._rows(sql + " ORDER BY created_at, rowid", (session_id,)), Fact, [], "fact")

    def turns(self, session_id: str, *, include_folded: bool = True) -> list[TurnRecord]:
        sql = "SELECT data, folded FROM turns WHERE session_id=?" + ("" if include_folded else " AND folded=0")
        return self._parse(self._rows(sql + " ORDER BY seq", (session_id,)), TurnRecord, [], "turn")

    def forget_fact(self, session_id: str, fact_id: str) -> bool:
        with self._tx() as conn:
            return conn.execute("DELETE FROM facts WHERE session_id=? AND fact_id=?",
                                (session_id, fact_id)).rowcount > 0

    def fact_sources(self) -> dict[str, set[str | None]]:
        """doc id → the content hashes its valid facts were established from."""
        out: dict[str, set[str | None]] = {}
        for r in self._rows("SELECT source_doc_id, json_extract(data, '$.source_hash') FROM facts "
                            "WHERE valid=1 AND source_doc_id IS NOT NULL AND json_valid(data)"):
            out.setdefault(r[0], set()).add(r[1])
        return out

    def invalidate_sources(self, reasons: dict[str, str], *,
                           current_hashes: dict[str, str] | None = None) -> list[str]:
        """Mark the valid facts of these documents invalid (doc id → why), except those established
        from the version named in `current_hashes`; returns the fact ids that changed."""
        current_hashes = current_hashes or {}
        changed: list[str] = []
        with self._tx() as conn:
            for doc_id, reason in reasons.items():
                for r in conn.execute("SELECT session_id, fact_id, data FROM facts WHERE source_doc_id=? AND valid=1",
                                      (doc_id,)).fetchall():
                    try:
                        data = json.loads(r["data"])
                    except ValueError:
                        data = {}
                    if doc_id in current_hashes and data.get("source_hash") == current_hashes[doc_id]:
                        continue
                    data.update({"valid": False, "invalid_reason": reason})
                    conn.execute("UPDATE facts SET valid=0, data=? WHERE session_id=? AND fact_id=?",
                                 (json.dumps(data, ensure_ascii=False), r["session_id"], r["fact_id"]))
                    changed.append(r["fact_id"])
        return changed

    def unfolded_tokens(self, session_id: str) -> int:
        rows = self._rows("SELECT COALESCE(SUM(json_extract(data, '$.tokens')), 0) FROM turns "
                          "WHERE session_id=? AND folded=0 AND json_valid(data)", (session_id,))
        return int(rows[0][0] or 0)

    def fold_turns(self, session_id: str, upto_seq: int, summary_update: FoldUpdate) -> int:
        with self._tx() as conn:
            rows = conn.execute("SELECT * FROM sessions WHERE session_id=?", (session_id,)).fetchall()
            if not rows:
                return 0
            seqs = [int(r[0]) for r in conn.execute("SELECT seq FROM turns WHERE session_id=? AND seq<=? AND folded=0 "
                                                    "ORDER BY seq", (session_id, upto_seq))]
            # a corrupt row is folded as it is (json_set would fail on it)
            conn.execute("UPDATE turns SET folded=1, data=CASE WHEN json_valid(data) "
                         "THEN json_set(data, '$.folded', json('true')) ELSE data END "
                         "WHERE session_id=? AND seq<=? AND folded=0", (session_id, upto_seq))
            # merged on the summary as it is now: a turn committed since the caller read it keeps its update
            old = self._session(rows[0], []).summary
            new = summary_update(old, seqs)
            summary = old.model_copy(update={"rolling": new.rolling, "folded_turns": new.folded_turns})
            conn.execute("UPDATE sessions SET summary=? WHERE session_id=?", (summary.model_dump_json(), session_id))
        return len(seqs)

    # ------------------------------------------------------------------ meta and the answer cache
    def get_meta(self, key: str) -> str | None:
        rows = self._rows("SELECT value FROM memory_meta WHERE key=?", (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._tx() as conn:
            conn.execute("INSERT INTO memory_meta(key, value) VALUES(?, ?) "
                         "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, value))

    def cache_get(self, key: str) -> dict[str, Any] | None:
        rows = self._rows("SELECT data FROM answer_cache WHERE key=?", (key,))
        if not rows:
            return None
        try:
            value = json.loads(rows[0][0])
        except ValueError:
            return None  # a corrupt entry is a miss
        with self._tx() as conn:
            conn.execute("UPDATE answer_cache SET hits=hits + 1 WHERE key=?", (key,))
        return value if isinstance(value, dict) else None

    def cache_put(self, key: str, value: dict[str, Any], *, session_id: str | None = None) -> None:
        with self._tx() as conn:
            conn.execute("INSERT INTO answer_cache(key, session_id, created_at, data) VALUES(?, ?, ?, ?) "
                         "ON CONFLICT(key) DO UPDATE SET data=excluded.data, created_at=excluded.created_at",
                         (key, session_id, now(), json.dumps(value, ensure_ascii=False)))

    def cache_clear(self) -> int:
        with self._tx() as conn:
            return int(conn.execute("DELETE FROM answer_cache").rowcount)

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    def __enter__(self) -> SQLiteMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["DB_NAME", "SQLiteMemoryStore"]
