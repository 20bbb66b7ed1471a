"""Per-key rate limits shared by every worker of a deployment (issue 15): the counters live in the
store's SQLite file, or in Redis when memory lives there, so N workers never admit a key more than
its limit within a window. The bounded request queue (429 when full) stays per process and is
tested in test_api.py."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")
pytest.importorskip("limits", reason="rate limits need the server extra: pip install -e '.[server]'")

from fastapi.testclient import TestClient  # noqa: E402

from cograg.api import create_app, ratelimit  # noqa: E402
from cograg.api.auth import ApiKey, Gatekeeper, RateLimited  # noqa: E402
from cograg.api.ratelimit import REDIS_KEY_PREFIX, RateStoreUnavailable, SQLiteRateStorage  # noqa: E402
from cograg.config import Settings  # noqa: E402
from cograg.index.sqlite_store import DB_NAME, SCHEMA_VERSION, SQLiteStore  # noqa: E402
from cograg.models.judge import LexicalJudge  # noqa: E402
from cograg.testing import ScriptedLLM  # noqa: E402
from tests.fakes import HashingEmbedder  # noqa: E402
from tests.process_support import free_port  # noqa: E402
from tests.test_api_keys import CAROL_KEY, keyed_app  # noqa: E402
from tests.test_control_flow import Brain  # noqa: E402
from tests.test_memory_store import redis_url  # noqa: E402,F401  (the real redis-server fixture)

LIMIT = 5


def gatekeeper(settings: Settings, limit: int = LIMIT) -> Gatekeeper:
    """The deployment's gatekeeper (shared counters) with one key, `dana`, allowed `limit` a minute."""
    settings = settings.model_copy(update={"serve": settings.serve.model_copy(update={"rate_per_minute": limit})})
    gate = Gatekeeper.from_settings(settings)
    gate._by_digest = {k.digest(): k for k in [ApiKey(name="dana", key="dk-1")]}
    return gate


class FakeRequest:
    """What `Gatekeeper.identify` reads from a request."""

    def __init__(self, key: str) -> None:
        self.headers = {"x-api-key": key}
        self.client = None


def admitted(gate: Gatekeeper, tries: int, start: Any = None) -> int:
    if start is not None:
        start.wait(60)
    ok = 0
    for _ in range(tries):
        try:
            gate.admit(gate.identify(FakeRequest("dk-1")))  # type: ignore[arg-type]
            ok += 1
        except RateLimited:
            pass
    return ok


def concurrently(gates: list[Gatekeeper], tries: int) -> int:
    """Every gate admitting from two threads at once; the total admitted."""
    start = threading.Barrier(2 * len(gates))
    with ThreadPoolExecutor(2 * len(gates)) as pool:
        futures = [pool.submit(admitted, g, tries, start) for g in gates for _ in range(2)]
        return sum(f.result() for f in futures)


def test_two_apps_over_one_store_never_admit_a_key_more_than_its_limit(tmp_path: Path):
    first = keyed_app(tmp_path)  # carol may make 2 requests a minute
    second = create_app(first.state.cograg.engines.settings, llm=ScriptedLLM([Brain()] * 100),
                        embedder=HashingEmbedder(), judge=LexicalJudge())
    carol = {"X-API-Key": CAROL_KEY}
    with TestClient(first, raise_server_exceptions=False) as a, TestClient(second, raise_server_exceptions=False) as b:
        with ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(lambda c: c.get("/api/documents", headers=carol).status_code, [a, b] * 6))
        assert sorted(codes) == [200, 200] + [429] * 10
        r = b.get("/api/documents", headers=carol)
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
        assert a.get("/api/documents").status_code == 200  # anonymous callers have their own counter


def _process_admitted(store: str, tries: int, start: Any, out: Any) -> None:
    out.put(admitted(gatekeeper(Settings(store=Path(store))), tries, start))


def test_worker_processes_share_the_counter_in_the_store_file(tmp_path: Path):
    SQLiteStore(tmp_path / "store").close()  # workers serve an existing store
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_process_admitted, args=(str(tmp_path / "store"), 8, start, out)) for _ in range(3)]
    for p in procs:
        p.start()
    start.set()
    totals = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert sum(totals) == LIMIT
    # the counter is a row of the store's own file; the store's schema version is untouched
    with sqlite3.connect(tmp_path / "store" / DB_NAME) as conn:
        assert conn.execute("SELECT hits FROM rate_limits").fetchall() == [(24,)]
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_sqlite_window_restarts_when_it_runs_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    clock = [1_000.0]
    monkeypatch.setattr(ratelimit, "time", SimpleNamespace(time=lambda: clock[0], sleep=time.sleep))
    storage = SQLiteRateStorage(tmp_path / "store")
    assert [storage.incr("k", 60) for _ in range(3)] == [1, 2, 3]
    assert storage.get("k") == 3 and storage.get_expiry("k") == 1_060.0
    clock[0] = 1_059.9
    assert storage.incr("k", 60) == 4
    clock[0] = 1_060.0  # the window ran out: counting starts again, with a new expiry
    assert storage.get("k") == 0
    assert storage.incr("k", 60) == 1 and storage.get_expiry("k") == 1_120.0
    storage.clear("k")
    assert storage.get("k") == 0
    storage.close()


def test_threads_of_two_gatekeepers_on_one_store_admit_exactly_the_limit(tmp_path: Path):
    settings = Settings(store=tmp_path / "store")
    assert concurrently([gatekeeper(settings), gatekeeper(settings)], 10) == LIMIT


def test_redis_memory_puts_the_counters_in_redis(redis_url: str, tmp_path: Path):  # noqa: F811
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    settings = Settings(store=tmp_path / "store", memory={"backend": redis_url})
    assert concurrently([gatekeeper(settings), gatekeeper(settings)], 10) == LIMIT
    keys = [k.decode() for k in client.keys("*")]
    assert len(keys) == 1 and keys[0].startswith(REDIS_KEY_PREFIX) and "dana" in keys[0]
    assert int(client.get(keys[0])) == 40 and 0 < client.ttl(keys[0]) <= 60
    assert not (tmp_path / "store" / DB_NAME).exists()  # nothing counted in SQLite


def test_unreachable_counters_refuse_requests_with_503(tmp_path: Path):
    settings = Settings(store=tmp_path / "store", memory={"backend": f"redis://127.0.0.1:{free_port()}/0"})
    pytest.importorskip("redis", reason="the scale extra is not installed: pip install -e '.[scale]'")
    gate = gatekeeper(settings)
    with pytest.raises(RateStoreUnavailable, match="rate-limit counters are unavailable"):
        gate.admit(gate.identify(FakeRequest("dk-1")))  # type: ignore[arg-type]
    from cograg.api.errors import status_of

    assert status_of(RateStoreUnavailable("x")) == 503
