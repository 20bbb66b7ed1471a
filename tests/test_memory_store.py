"""The session store (SPEC E1, E5, E6): one SQLite file per store directory behind the
`MemoryStore` Protocol; atomic per-turn write-back that loses no fact under concurrency (threads
and processes); corrupt rows reported and skipped; TTL, forgetting, deletion."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from cograg.memory import MemoryStore, SessionNotFound, SQLiteMemoryStore
from cograg.memory.models import Fact, TurnRecord, fact_id_for


def fact(session: str, statement: str, doc: str = "d1", chunk: str = "c1", source_hash: str = "h1") -> Fact:
    return Fact(fact_id=fact_id_for(session, statement, doc, chunk), session_id=session, statement=statement,
                source_doc_id=doc, source_chunk_id=chunk, source_hash=source_hash, quote=statement, confidence=0.9)


def turn(session: str, i: int, question: str = "q") -> TurnRecord:
    return TurnRecord(turn_id=f"t-{session}-{i}-{time.monotonic_ns()}", session_id=session, question=f"{question} {i}",
                      answer=f"answer {i}", summary_short=f"{question} {i} — answer {i}", tokens=6)


@pytest.fixture
def mem(tmp_path: Path):
    s = SQLiteMemoryStore(tmp_path)
    yield s
    s.close()


def test_sqlite_store_meets_the_protocol_and_lives_in_the_store_directory(mem: SQLiteMemoryStore, tmp_path: Path):
    assert isinstance(mem, MemoryStore)
    assert (tmp_path / "memory.db").is_file()
    assert mem.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_turn_is_written_back_with_its_facts_and_loaded_again(mem: SQLiteMemoryStore):
    mem.create_session("s1", user="ann")
    f = fact("s1", "The Linden Bridge opened in 1811.")
    res = mem.commit_turn(turn("s1", 1), [f], summary_update=lambda s: s.model_copy(update={"main_topics": ["bridge"]}))
    assert res.seq == 1 and res.facts_written == [f.fact_id]
    state = mem.load("s1")
    assert [x.statement for x in state.facts] == ["The Linden Bridge opened in 1811."]
    assert [t.seq for t in state.turns] == [1] and state.turns[0].facts_written == [f.fact_id]
    assert state.session.summary.main_topics == ["bridge"] and state.session.turn_count == 1
    assert state.session.user == "ann"


def test_the_same_statement_from_the_same_source_is_one_fact(mem: SQLiteMemoryStore):
    mem.create_session("s1")
    a = fact("s1", "The Linden Bridge opened in 1811.")
    b = fact("s1", "the linden bridge opened in 1811")  # case, end punctuation
    other_source = fact("s1", "The Linden Bridge opened in 1811.", chunk="c2")
    assert a.fact_id == b.fact_id != other_source.fact_id
    mem.commit_turn(turn("s1", 1), [a])
    res = mem.commit_turn(turn("s1", 2), [b, other_source])
    assert res.facts_duplicate == [a.fact_id] and res.facts_written == [other_source.fact_id]
    assert len(mem.facts("s1")) == 2


def test_unknown_session_is_a_clear_error_on_read(mem: SQLiteMemoryStore):
    with pytest.raises(SessionNotFound, match="no session 'nope'"):
        mem.load("nope")
    with pytest.raises(SessionNotFound):
        mem.commit_turn(turn("nope", 1), [])


def test_concurrent_turns_on_one_session_lose_no_fact_threads(mem: SQLiteMemoryStore, tmp_path: Path):
    mem.create_session("s1")
    other = SQLiteMemoryStore(tmp_path)  # a second connection, as a second engine in the process would have

    def writer(store: SQLiteMemoryStore, name: str) -> None:
        for i in range(25):
            store.commit_turn(turn("s1", i, name), [fact("s1", f"{name} fact {i}")],
                              summary_update=lambda s, n=name, i=i: s.model_copy(
                                  update={"main_topics": s.main_topics + [f"{n}{i}"]}))

    threads = [threading.Thread(target=writer, args=(s, n)) for s, n in ((mem, "a"), (other, "b"), (mem, "c"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    assert len(mem.facts("s1")) == 75
    state = mem.load("s1")
    assert sorted(t.seq for t in state.turns) == list(range(1, 76))
    assert len(state.session.summary.main_topics) == 75  # every summary update merged, none overwritten


def _process_writer(directory: str, name: str) -> None:
    store = SQLiteMemoryStore(directory)
    for i in range(20):
        store.commit_turn(turn("s1", i, name), [fact("s1", f"{name} fact {i}")])
    store.close()


def test_concurrent_turns_on_one_session_lose_no_fact_processes(mem: SQLiteMemoryStore, tmp_path: Path):
    mem.create_session("s1")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_process_writer, args=(str(tmp_path), n)) for n in ("p", "q")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(mem.facts("s1")) == 40 and len(mem.turns("s1")) == 40


def test_a_corrupt_row_is_reported_and_skipped(mem: SQLiteMemoryStore):
    mem.create_session("s1")
    mem.commit_turn(turn("s1", 1), [fact("s1", "Good fact one."), fact("s1", "Good fact two.")])
    mem.conn.execute("UPDATE facts SET data='{not json' WHERE fact_id=?", (fact("s1", "Good fact two.").fact_id,))
    mem.conn.execute("UPDATE sessions SET summary='[1, 2]'")
    state = mem.load("s1")
    assert [f.statement for f in state.facts] == ["Good fact one."]
    assert any("corrupt fact row" in p for p in state.problems) and any("summary" in p for p in state.problems)


def test_forget_a_fact_delete_and_expire_sessions(mem: SQLiteMemoryStore):
    mem.create_session("s1")
    mem.create_session("s2")
    f = fact("s1", "The Linden Bridge opened in 1811.")
    mem.commit_turn(turn("s1", 1), [f])
    mem.cache_put("k", {"answer": "x"}, session_id="s1")
    assert mem.forget_fact("s1", f.fact_id) and not mem.forget_fact("s1", f.fact_id)
    assert mem.facts("s1") == []
    assert mem.delete_session("s1") and mem.get_session("s1") is None and mem.cache_get("k") is None
    assert mem.turns("s1") == []
    mem.conn.execute("UPDATE sessions SET updated_at=0 WHERE session_id='s2'")
    assert mem.expire_sessions(time.time() - 10) == ["s2"] and mem.list_sessions() == []


def test_invalidating_a_source_keeps_facts_from_its_current_version(mem: SQLiteMemoryStore):
    mem.create_session("s1")
    old = fact("s1", "Old statement here.", source_hash="h1")
    new = fact("s1", "New statement here.", source_hash="h2")
    mem.commit_turn(turn("s1", 1), [old, new])
    assert mem.fact_sources() == {"d1": {"h1", "h2"}}
    assert mem.invalidate_sources({"d1": "source document changed"}, current_hashes={"d1": "h2"}) == [old.fact_id]
    by_id = {f.fact_id: f for f in mem.facts("s1")}
    assert not by_id[old.fact_id].valid and by_id[old.fact_id].invalid_reason == "source document changed"
    assert by_id[new.fact_id].valid
    assert [f.fact_id for f in mem.load("s1").facts] == [new.fact_id]  # a turn only sees valid facts


def test_the_ledger_cap_drops_the_oldest_facts(mem: SQLiteMemoryStore):
    mem.create_session("s1")
    for i in range(5):
        mem.commit_turn(turn("s1", i), [fact("s1", f"Fact number {i} here.")], max_facts=3)
    assert [f.statement for f in mem.facts("s1")] == [f"Fact number {i} here." for i in (2, 3, 4)]
