"""Stateless workers (issue #16, SPEC I): two uvicorn worker processes of `cograg serve`'s app
with conversation memory on Redis, concurrent clients of two tenants on shared sessions; no fact
or turn is lost and no session sees another's facts. A small run of benchmarks/serve_load.py."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, skip_or_fail
from tests.redis_support import redis_server, redis_server_binary

pytest.importorskip("httpx", reason="the test extra is not installed")
pytest.importorskip("uvicorn", reason="the server extra is not installed: pip install -e '.[server]'")
pytest.importorskip("redis", reason="the scale extra is not installed: pip install -e '.[scale]'")


def _serve_load() -> Any:
    spec = importlib.util.spec_from_file_location("serve_load", REPO / "benchmarks" / "serve_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    binary = redis_server_binary()
    if binary is None:
        skip_or_fail("redis-server is not installed (make test installs it as root: scripts/install_redis.sh)")
    with redis_server(binary) as url:
        yield url


def test_two_workers_on_redis_memory_lose_no_fact_and_leak_nothing(tmp_path: Path, redis_url: str) -> None:
    report = _serve_load().run_load(tmp_path, redis_url, clients=8, turns=2, workers=2, sessions_per_tenant=2,
                                    deadline_s=120.0)
    assert report["errors"] == [] and report["answered"] == report["requests"] == 16
    assert report["grounded"] == 16 and report["facts_in_ledgers"] == 16  # one verified fact per answer
    assert report["sessions"] == 4  # two clients per session, each on whichever worker takes the request
    assert (report["lost_facts"], report["lost_turns"]) == (0, 0), report["problems"]
    assert (report["cross_tenant_leaks"], report["cross_session_leaks"], report["foreign_facts_used"]) == (0, 0, 0), \
        report["problems"]


def test_the_plan_shares_sessions_within_a_tenant_only() -> None:
    plan = _serve_load().plan(clients=8, turns=2, sessions_per_tenant=2)
    by_session: dict[str, set[str]] = {}
    for cp in plan:
        by_session.setdefault(cp["session"], set()).add(cp["tenant"])
    assert len(by_session) == 4 and all(len(t) == 1 for t in by_session.values())
    assert sum(1 for cp in plan if cp["session"] == "acme-0") == 2
    projects = [p for cp in plan for p in cp["projects"]]
    assert len(projects) == len(set(projects)) == 16
