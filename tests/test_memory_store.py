"""The session store (SPEC E1, E5, E6) behind the `MemoryStore` Protocol, run against both
implementations: SQLite (one file per store directory) and Redis (a real `redis-server` on
loopback, see tests/redis_support.py). Atomic per-turn write-back that loses no fact under
concurrency (threads and processes); corrupt rows reported and skipped; TTL, forgetting, deletion."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cograg.errors import StoreError
from cograg.memory import MemoryStore, SessionNotFound, SQLiteMemoryStore
from cograg.memory.backends import open_memory_store
from cograg.memory.models import Fact, TurnRecord, fact_id_for
from tests.conftest import skip_or_fail
from tests.process_support import free_port
from tests.redis_support import redis_server, redis_server_binary

def fact(session: str, statement: str, doc: str = "d1", chunk: str = "c1", source_hash: str = "h1") -> Fact:
    return Fact(fact_id=fact_id_for(session, statement, doc, chunk), session_id=session, statement=statement,
                source_doc_id=doc, source_chunk_id=chunk, source_hash=source_hash, quote=statement, confidence=0.9)


def turn(session: str, i: int, question: str = "q") -> TurnRecord:
    return TurnRecord(turn_id=f"t-{session}-{i}-{time.monotonic_ns()}", session_id=session, question=f"{question} {i}",
                      answer=f"answer {i}", summary_short=f"{question} {i} — answer {i}", tokens=6)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    pytest.importorskip("redis", reason="the scale extra is not installed: pip install -e '.[scale]'")
    binary = redis_server_binary()
    if binary is None:
        skip_or_fail("redis-server is not installed (make test installs it as root: scripts/install_redis.sh)")
    with redis_server(binary) as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """What `open_memory_store` opens: `sqlite` (in tmp_path) or the test server's URL, emptied."""
    if request.param == "sqlite":
        return "sqlite"
    url = request.getfixturevalue("redis_url")
    import redis

    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture
def mem(backend: str, tmp_path: Path) -> Iterator[Any]:
    s = open_memory_store(backend, tmp_path)
    yield s
    s.close()


def corrupt(mem: Any, session: str, fact_id: str) -> None:
    """Break one fact row and the session's summary behind the store's back."""
    if isinstance(mem, SQLiteMemoryStore):
        mem.conn.execute("UPDATE facts SET data='{not json' WHERE fact_id=?", (fact_id,))
        mem.conn.execute("UPDATE sessions SET summary='[1, 2]'")
    else:
        mem.client.hset(mem._key(session, ":facts"), fact_id, "{not json")
        mem.client.hset(mem._key(session), "summary", "[1, 2]")


def make_idle(mem: Any, session: str) -> None:
    if isinstance(mem, SQLiteMemoryStore):
        mem.conn.execute("UPDATE sessions SET updated_at=0 WHERE session_id=?", (session,))
    else:
        mem.client.hset(mem._key(session), "updated_at", 0)
        mem.client.zadd(mem._index, {session: 0})


def test_sqlite_store_lives_in_the_store_directory(tmp_path: Path):
    mem = SQLiteMemoryStore(tmp_path)
    assert (tmp_path / "memory.db").is_file()
    assert mem.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    mem.close()


def test_the_store_meets_the_protocol(mem: Any):
    assert isinstance(mem, MemoryStore)


def test_a_turn_is_written_back_with_its_facts_and_loaded_again(mem: Any):
    mem.create_session("s1", user="ann")
    f = fact("s1", "The Linden Bridge opened in 1811.")
    res = mem.commit_turn(turn("s1", 1), [f], summary_update=lambda s: s.model_copy(update={"main_topics": ["bridge"]}))
    assert res.seq == 1 and res.facts_written == [f.fact_id]
    state = mem.load("s1")
    assert [x.statement for x in state.facts] == ["The Linden Bridge opened in 1811."]
    assert [t.seq for t in state.turns] == [1] and state.turns[0].facts_written == [f.fact_id]
    assert state.session.summary.main_topics == ["bridge"] and state.session.turn_count == 1
    assert state.session.user == "ann"


def test_the_same_statement_from_the_same_source_is_one_fact(mem: Any):
    mem.create_session("s1")
    a = fact("s1", "The Linden Bridge opened in 1811.")
    b = fact("s1", "the linden bridge opened in 1811")  # case, end punctuation
    other_source = fact("s1", "The Linden Bridge opened in 1811.", chunk="c2")
    assert a.fact_id == b.fact_id != other_source.fact_id
    mem.commit_turn(turn("s1", 1), [a])
    res = mem.commit_turn(turn("s1", 2), [b, other_source])
    assert res.facts_duplicate == [a.fact_id] and res.facts_written == [other_source.fact_id]
    assert len(mem.facts("s1")) == 2


def test_unknown_session_is_a_clear_error_on_read(mem: Any):
    with pytest.raises(SessionNotFound, match="no session 'nope'"):
        mem.load("nope")
    with pytest.raises(SessionNotFound):
        mem.commit_turn(turn("nope", 1), [])


def test_concurrent_turns_on_one_session_lose_no_fact_threads(mem: Any, backend: str, tmp_path: Path):
    mem.create_session("s1")
    other = open_memory_store(backend, tmp_path)  # a second connection, as a second engine in the process would have

    def writer(store: Any, name: str) -> None:
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


def _process_writer(backend: str, directory: str, name: str) -> None:
    store = open_memory_store(backend, directory)
    for i in range(20):
        store.commit_turn(turn("s1", i, name), [fact("s1", f"{name} fact {i}")])
    store.close()


def test_concurrent_turns_on_one_session_lose_no_fact_processes(mem: Any, backend: str, tmp_path: Path):
    mem.create_session("s1")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_process_writer, args=(backend, str(tmp_path), n)) for n in ("p", "q")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(mem.facts("s1")) == 40 and len(mem.turns("s1")) == 40


def test_a_corrupt_row_is_reported_and_skipped(mem: Any):
    mem.create_session("s1")
    mem.commit_turn(turn("s1", 1), [fact("s1", "Good fact one."), fact("s1", "Good fact two.")])
    corrupt(mem, "s1", fact("s1", "Good fact two.").fact_id)
    state = mem.load("s1")
    assert [f.statement for f in state.facts] == ["Good fact one."]
    assert any("corrupt fact row" in p for p in state.problems) and any("summary" in p for p in state.problems)


def test_forget_a_fact_delete_and_expire_sessions(mem: Any):
    mem.create_session("s1")
    mem.create_session("s2")
    f = fact("s1", "The Linden Bridge opened in 1811.")
    mem.commit_turn(turn("s1", 1), [f])
    mem.cache_put("k", {"answer": "x"}, session_id="s1")
    assert mem.forget_fact("s1", f.fact_id) and not mem.forget_fact("s1", f.fact_id)
    assert mem.facts("s1") == []
    assert mem.delete_session("s1") and mem.get_session("s1") is None and mem.cache_get("k") is None
    assert mem.turns("s1") == []
    make_idle(mem, "s2")
    assert mem.expire_sessions(time.time() - 10) == ["s2"] and mem.list_sessions() == []


def test_invalidating_a_source_keeps_facts_from_its_current_version(mem: Any):
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


def test_the_ledger_cap_drops_the_oldest_facts(mem: Any):
    mem.create_session("s1")
    for i in range(5):
        mem.commit_turn(turn("s1", i), [fact("s1", f"Fact number {i} here.")], max_facts=3)
    assert [f.statement for f in mem.facts("s1")] == [f"Fact number {i} here." for i in (2, 3, 4)]


def test_folded_turns_leave_the_turn_but_stay_in_the_history(mem: Any):
    mem.create_session("s1")
    for i in range(1, 4):
        mem.commit_turn(turn("s1", i), [])
    assert mem.unfolded_tokens("s1") == 18
    def summary(s: Any, seqs: list[int]) -> Any:
        return s.model_copy(update={"rolling": "turns 1-2", "folded_turns": 2})
    assert mem.fold_turns("s1", 2, summary) == 2 and mem.fold_turns("s1", 2, summary) == 0
    state = mem.load("s1")
    assert [t.seq for t in state.turns] == [3] and state.session.summary.rolling == "turns 1-2"
    assert [t.seq for t in mem.turns("s1")] == [1, 2, 3] and mem.unfolded_tokens("s1") == 6


def test_meta_and_the_answer_cache(mem: Any):
    assert mem.get_meta("generation") is None
    mem.set_meta("generation", "g1")
    mem.set_meta("generation", "g2")
    assert mem.get_meta("generation") == "g2"
    mem.cache_put("k1", {"answer": "x"})
    mem.cache_put("k2", {"answer": "y"})
    assert mem.cache_get("k1") == {"answer": "x"} and mem.cache_get("nope") is None
    assert mem.cache_clear() == 2 and mem.cache_get("k2") is None


def test_redis_sessions_carry_a_ttl_and_vanish_from_listings_when_it_runs_out(redis_url: str):
    # the SQLite store expires sessions only through expire_sessions (tested above for both)
    from cograg.memory.redis_store import RedisMemoryStore

    mem = RedisMemoryStore(redis_url, prefix="ttl-test", ttl_s=1)
    mem.create_session("s1", user="ann")
    mem.commit_turn(turn("s1", 1), [fact("s1", "The Linden Bridge opened in 1811.")])
    assert 0 < mem.client.ttl(mem._key("s1", ":facts")) <= 1
    deadline = time.monotonic() + 5
    while mem.client.exists(mem._key("s1")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert mem.get_session("s1") is None and mem.list_sessions(user="ann") == [] and mem.facts("s1") == []
    mem.close()


def test_an_unreachable_redis_is_a_one_line_error(tmp_path: Path):
    pytest.importorskip("redis", reason="the scale extra is not installed: pip install -e '.[scale]'")
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    with pytest.raises(StoreError) as info:
        open_memory_store(url, tmp_path)
    assert str(info.value).startswith(f"cannot reach Redis memory at {url}: ") and "\n" not in str(info.value)


def test_the_memory_backend_is_configured_by_environment_or_settings(monkeypatch: pytest.MonkeyPatch):
    from cograg.config import Settings

    monkeypatch.delenv("COGRAG_MEMORY__BACKEND", raising=False)
    assert Settings().memory.backend == "sqlite"
    monkeypatch.setenv("COGRAG_MEMORY", "redis://127.0.0.1:6399/2")
    monkeypatch.setenv("COGRAG_MEMORY__MAX_FACTS", "50")
    s = Settings()
    assert s.memory.backend == "redis://127.0.0.1:6399/2" and s.memory.max_facts == 50
    assert Settings(memory={"backend": "sqlite"}).memory.backend == "sqlite"
    assert Settings().with_overrides(["memory.backend=sqlite"]).memory.backend == "sqlite"
    with pytest.raises(ValueError, match="unknown memory backend"):
        Settings(memory={"backend": "mysql://x"})


def test_components_open_the_configured_backend(backend: str, tmp_path: Path):
    from cograg.components import build_components
    from cograg.config import Settings

    settings = Settings(store=tmp_path / "store", embedder="none", memory={"backend": backend})
    parts = build_components(settings)
    try:
        kind = "SQLiteMemoryStore" if backend == "sqlite" else "RedisMemoryStore"
        assert type(parts.memory.get()).__name__ == kind
    finally:
        parts.close()


def test_a_redis_outage_mid_session_is_a_one_line_store_error(tmp_path: Path):
    pytest.importorskip("redis", reason="the scale extra is not installed: pip install -e '.[scale]'")
    binary = redis_server_binary()
    if binary is None:
        skip_or_fail("redis-server is not installed (make test installs it as root: scripts/install_redis.sh)")
    with redis_server(binary) as url:
        mem = open_memory_store(url, tmp_path)
        mem.create_session("s1")
    with pytest.raises(StoreError, match=r"^Redis memory at redis://127\.0\.0\.1:\d+/0 failed: ConnectionError: "):
        mem.load("s1")
    mem.close()


def test_two_stores_on_one_redis_keep_their_sessions_facts_and_cache_apart(redis_url: str, tmp_path: Path):
    # Two documents stores whose memory is the same Redis database: each store's keys live under its
    # own prefix, so B neither lists A's sessions nor serves A's cached answers, and B's document sync
    # (which knows only B's documents) must not invalidate A's facts as "source document deleted".
    import redis

    from cograg.components import build_components
    from cograg.config import Settings
    from cograg.memory.service import SessionMemory

    client = redis.Redis.from_url(redis_url)
    client.flushdb()

    def components(name: str) -> Any:
        return build_components(Settings(store=tmp_path / name, embedder="none", memory={"backend": redis_url}))

    parts = {name: components(name) for name in ("a", "b")}
    try:
        a, b = parts["a"].memory.get(), parts["b"].memory.get()
        a.create_session("s-a", user="ann")
        f = fact("s-a", "The Linden Bridge opened in 1811.", doc="doc-of-a")
        a.commit_turn(turn("s-a", 1), [f])
        a.cache_put("k", {"answer": "from a"}, session_id="s-a")

        assert b.list_sessions() == [] and b.list_sessions(user="ann") == []
        assert b.get_session("s-a") is None and b.facts("s-a") == [] and b.cache_get("k") is None
        store_b = parts["b"].store
        service_b = SessionMemory(b, doc_hash=lambda d: (doc := store_b.get_document(d)) and doc.content_hash,
                                  generation=store_b.generation)
        assert service_b.sync(force=True) == [] and b.fact_sources() == {}
        assert b.cache_clear() == 0 and b.expire_sessions(time.time() + 10) == []

        assert [(x.fact_id, x.valid) for x in a.facts("s-a")] == [(f.fact_id, True)]
        assert [s.session_id for s in a.list_sessions()] == ["s-a"] and a.cache_get("k") == {"answer": "from a"}
        assert a.get_meta("documents_generation") is None  # B's sync wrote only B's meta
        a_id = parts["a"].store.store_id()
        assert a.prefix == f"cograg:{a_id[:16]}" and b.prefix == f"cograg:{parts['b'].store.store_id()[:16]}"
        keys = {k.decode() for k in client.keys("*")}
        assert {k for k in keys if not k.startswith(a.prefix + ":")} == {b.prefix + ":meta"}  # B's sync: B's meta only
    finally:
        for p in parts.values():
            p.close()
    again = components("a")  # the prefix is stable: the store reopened finds its sessions
    try:
        assert [s.session_id for s in again.memory.get().list_sessions()] == ["s-a"]
        assert again.store.store_id() == a_id
    finally:
        again.close()


@pytest.mark.parametrize("days", ["36500.5", "1e12", "1e308"])
def test_a_session_ttl_past_a_hundred_years_is_a_settings_error(days: str, monkeypatch: pytest.MonkeyPatch):
    # 1e12 days made every Redis EXPIRE fail ("invalid expire time"); 1e308 overflowed int() in `session list`
    from cograg.config import Settings

    with pytest.raises(ValueError, match="less than or equal to 36500"):
        Settings(memory={"session_ttl_days": float(days)})
    with pytest.raises(ValueError, match="less than or equal to 36500"):
        Settings().with_overrides([f"memory.session_ttl_days={days}"])
    monkeypatch.setenv("COGRAG_MEMORY__SESSION_TTL_DAYS", days)
    with pytest.raises(ValueError, match="less than or equal to 36500"):
        Settings()
    assert Settings(memory={"session_ttl_days": 36500}).memory.session_ttl_days == 36500


def test_redis_accepts_the_longest_session_ttl_and_refuses_a_larger_one(redis_url: str):
    from cograg.memory.redis_store import MAX_TTL_S, RedisMemoryStore

    assert MAX_TTL_S == 36500 * 86400
    mem = RedisMemoryStore(redis_url, prefix="ttl-max", ttl_s=MAX_TTL_S)
    mem.create_session("s1")
    mem.commit_turn(turn("s1", 1), [fact("s1", "The Linden Bridge opened in 1811.")])
    assert MAX_TTL_S - 60 < mem.client.ttl(mem._key("s1", ":facts")) <= MAX_TTL_S
    mem.delete_session("s1")
    mem.close()
    for bad in (MAX_TTL_S + 1, 1e12 * 86400, float("inf"), float("nan"), -1):
        with pytest.raises(StoreError, match="session TTL"):
            RedisMemoryStore(redis_url, ttl_s=bad)


def break_rows(mem: Any, session: str, fact_id: str, seq: int) -> None:
    """Break one fact row and one turn row behind the store's back (not JSON any more)."""
    if isinstance(mem, SQLiteMemoryStore):
        mem.conn.execute("UPDATE facts SET data='{broken' WHERE fact_id=?", (fact_id,))
        mem.conn.execute("UPDATE turns SET data='{broken' WHERE session_id=? AND seq=?", (session, seq))
    else:
        mem.client.hset(mem._key(session, ":facts"), fact_id, "{broken")
        mem.client.hset(mem._key(session, ":turns"), str(seq), "{broken")


def test_a_corrupt_fact_or_turn_row_is_skipped_by_sources_tokens_and_folding(mem: Any):
    # SQLite once read these rows with json_extract: "malformed JSON" failed every document sync
    # (so every session turn and listing) and every later turn's compaction check
    mem.create_session("s1")
    good, bad = fact("s1", "Good fact one."), fact("s1", "Bad fact two.", doc="d2")
    for i in (1, 2, 3):
        mem.commit_turn(turn("s1", i), [good, bad] if i == 1 else [])
    break_rows(mem, "s1", bad.fact_id, seq=2)
    assert mem.fact_sources() == {"d1": {"h1"}}
    assert mem.invalidate_sources({"d1": "source document changed"}) == [good.fact_id]
    assert mem.unfolded_tokens("s1") == 12
    assert mem.fold_turns("s1", 2, lambda s, seqs: s.model_copy(update={"rolling": "x", "folded_turns": 2})) == 2
    assert mem.unfolded_tokens("s1") == 6 and [t.seq for t in mem.load("s1").turns] == [3]


def test_folded_turns_are_marked_folded_in_the_history(mem: Any):
    # SQLite set only its `folded` column: show, --json, export and the HTTP API said folded: false
    mem.create_session("s1")
    for i in range(1, 4):
        mem.commit_turn(turn("s1", i), [])
    mem.fold_turns("s1", 2, lambda s, seqs: s.model_copy(update={"rolling": "turns 1-2", "folded_turns": 2}))
    assert [(t.seq, t.folded) for t in mem.turns("s1")] == [(1, True), (2, True), (3, False)]
    assert [t.folded for t in mem.turns("s1", include_folded=False)] == [False]
    if isinstance(mem, SQLiteMemoryStore):  # the stored JSON says so too, for anything reading it raw
        assert [r[0] for r in mem.conn.execute("SELECT json_extract(data, '$.folded') FROM turns ORDER BY seq")] \
            == [1, 1, 0]


def test_a_compaction_keeps_the_summary_update_of_a_turn_committed_meanwhile(mem: Any):
    # compact read the summary, a turn then committed its summary update, and the fold wrote the
    # stale summary back over it (race.py: 7-10 of 15 conclusions kept); a second compaction that
    # folded the same turns first must not have them counted or summarised twice
    from cograg.config import MemoryConfig
    from cograg.memory.memorizer import summary_updater
    from cograg.memory.service import SessionMemory

    service = SessionMemory(mem, MemoryConfig(keep_raw_turns=1), doc_hash=lambda _: "h1", generation=lambda: "g")
    mem.create_session("s1")
    for i in (1, 2, 3):
        mem.commit_turn(turn("s1", i), [])
    real_fold = mem.fold_turns
    late = fact("s1", "A turn committed during the compaction.")
    late_turn = turn("s1", 4)
    calls: list[int] = []

    def fold_after_others(session_id: str, upto_seq: int, update: Any) -> int:
        calls.append(upto_seq)
        if len(calls) == 1:  # between compact's reads and its write: a turn, then a whole other compaction
            mem.commit_turn(late_turn, [late], summary_update=summary_updater(late_turn, [late]))
            assert service.compact("s1").folded == 3
        return real_fold(session_id, upto_seq, update)

    mem.fold_turns = fold_after_others
    try:
        first = service.compact("s1")
    finally:
        del mem.fold_turns
    assert first.folded == 0
    summary = service.session("s1").summary
    assert summary.key_conclusions == ["A turn committed during the compaction."]
    assert summary.folded_turns == 3 and summary.rolling.split("\n") == [f"q {i} — answer {i}" for i in (1, 2, 3)]
    assert [t.seq for t in mem.turns("s1", include_folded=False)] == [4]


def test_concurrent_compactions_and_turns_keep_every_summary_update(mem: Any, backend: str, tmp_path: Path):
    from cograg.config import MemoryConfig
    from cograg.memory.memorizer import summary_updater
    from cograg.memory.service import SessionMemory

    other = open_memory_store(backend, tmp_path)
    services = [SessionMemory(s, MemoryConfig(keep_raw_turns=1), doc_hash=lambda _: "h1", generation=lambda: "g")
                for s in (mem, other)]
    mem.create_session("s1")
    n, done = 12, threading.Event()
    start = threading.Barrier(3)

    def committer() -> None:
        start.wait()
        for i in range(n):
            f, t = fact("s1", f"Statement number {i} is true."), turn("s1", i)
            mem.commit_turn(t, [f], summary_update=summary_updater(t, [f]))
        done.set()

    def compactor(service: SessionMemory) -> None:
        start.wait()
        while not done.is_set():
            service.compact("s1")

    threads = [threading.Thread(target=committer)] + [threading.Thread(target=compactor, args=(s,)) for s in services]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    services[0].compact("s1")
    other.close()
    summary = services[0].session("s1").summary
    assert sorted(summary.key_conclusions) == sorted(f"Statement number {i} is true." for i in range(n))
    assert summary.folded_turns == n - 1 == sum(t.folded for t in mem.turns("s1"))
    assert summary.rolling.split("\n") == [f"q {i} — answer {i}" for i in range(n - 1)]


def test_a_read_only_memory_file_is_a_one_line_store_error(tmp_path: Path):
    mem = SQLiteMemoryStore(tmp_path)
    mem.create_session("s1")
    mem.conn.execute("PRAGMA query_only=1")  # what a read-only file answers, also for root
    with pytest.raises(StoreError) as info:
        mem.commit_turn(turn("s1", 1), [fact("s1", "The Linden Bridge opened in 1811.")])
    assert str(info.value).startswith(f"memory store {tmp_path / 'memory.db'}: read-only (")
    assert "\n" not in str(info.value)
    assert [t.seq for t in mem.load("s1").turns] == [] and mem.get_session("s1") is not None  # reads still work
    mem.close()


def test_a_damaged_memory_file_is_a_one_line_store_error(tmp_path: Path):
    import re

    mem = SQLiteMemoryStore(tmp_path)
    for i in range(3):
        mem.create_session(f"s{i}")
        mem.commit_turn(turn(f"s{i}", 1), [fact(f"s{i}", f"Fact {i} {'x' * 500}.")])
    page = int(mem.conn.execute("PRAGMA page_size").fetchone()[0])
    roots = {r[0]: int(r[1]) for r in mem.conn.execute("SELECT name, rootpage FROM sqlite_master")}
    mem.close()
    db = tmp_path / "memory.db"
    with db.open("r+b") as fh:  # garbage over the root pages of the facts and sessions tables
        for table in ("facts", "sessions"):
            fh.seek((roots[table] - 1) * page)
            fh.write(b"\xa5" * page)
    mem = SQLiteMemoryStore(tmp_path)
    damaged = rf"^memory store {re.escape(str(db))}: damaged \([^\n]*\)$"
    for read in (lambda: mem.facts("s1"), lambda: mem.list_sessions(), lambda: mem.load("s1"),
                 lambda: mem.fact_sources(), lambda: mem.commit_turn(turn("s1", 2), [])):
        with pytest.raises(StoreError, match=damaged):
            read()
    mem.close()


def test_a_turn_folded_by_an_earlier_sqlite_store_is_shown_folded(tmp_path: Path):
    # such a store set only the `folded` column and left `"folded": false` in the turn's JSON
    mem = SQLiteMemoryStore(tmp_path)
    mem.create_session("s1")
    for i in (1, 2):
        mem.commit_turn(turn("s1", i), [])
    mem.conn.execute("UPDATE turns SET folded=1 WHERE seq=1")
    assert [(t.seq, t.folded) for t in mem.turns("s1")] == [(1, True), (2, False)]
    mem.close()
