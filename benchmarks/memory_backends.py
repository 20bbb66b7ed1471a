"""Memory turn latency, SQLite vs Redis (issue #16): the store's part of one turn — `load` of the
session, then `commit_turn` with one new fact and a summary update — in a session already holding
10, 100 and 1,000 facts. No model and no HTTP: only the MemoryStore. Redis is a fresh loopback
`redis-server` started here (persistence off), SQLite a WAL file in a temporary directory.

    .venv/bin/python benchmarks/memory_backends.py [--turns 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _p in (str(REPO), str(REPO / "src")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from cograg.memory.backends import open_memory_store  # noqa: E402
from cograg.memory.models import Fact, TurnRecord, fact_id_for  # noqa: E402
from tests.redis_support import redis_server, redis_server_binary  # noqa: E402


def _fact(session: str, i: int) -> Fact:
    statement = f"Project number {i} started in {1700 + i % 300}."
    return Fact(fact_id=fact_id_for(session, statement, "d1", f"c{i}"), session_id=session, statement=statement,
                source_doc_id="d1", source_chunk_id=f"c{i}", source_hash="h1", quote=statement, confidence=0.9)


def _turn(session: str, i: int) -> TurnRecord:
    return TurnRecord(turn_id=f"t-{session}-{i}", session_id=session, question=f"question {i}",
                      answer=f"answer {i}", summary_short=f"question {i} — answer {i}", tokens=8)


def measure(store: Any, facts: int, turns: int) -> dict[str, float]:
    session = f"s{facts}"
    store.create_session(session)
    for start in range(0, facts, 100):  # the session's history, 100 facts a turn
        store.commit_turn(_turn(session, -start - 1), [_fact(session, i) for i in range(start, min(facts, start + 100))],
                          max_facts=facts + turns + 1)
    took = []
    for k in range(turns):
        t0 = time.perf_counter()
        store.load(session, max_facts=facts + turns + 1)
        store.commit_turn(_turn(session, k), [_fact(session, facts + k)],
                          summary_update=lambda s, k=k: s.model_copy(update={"main_topics": [f"topic {k}"]}),
                          max_facts=facts + turns + 1)
        took.append((time.perf_counter() - t0) * 1000)
    took.sort()
    return {"p50_ms": round(statistics.median(took), 2), "p95_ms": round(took[int(0.95 * (len(took) - 1))], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=200)
    args = ap.parse_args()
    binary = redis_server_binary()
    if binary is None:
        print("redis-server is not installed (scripts/install_redis.sh)", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"turns": args.turns, "results": {}}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cograg-mem-")))
        backends = {"sqlite": "sqlite", "redis": stack.enter_context(redis_server(binary))}
        stores = {name: open_memory_store(backend, tmp) for name, backend in backends.items()}
        for n in (10, 100, 1000):  # the backends in turn at each size, so a busy machine weighs on both alike
            for name, store in stores.items():
                report["results"].setdefault(name, {})[str(n)] = measure(store, n, args.turns)
        for store in stores.values():
            store.close()
    out = REPO / "benchmarks" / "results" / "memory-backends.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
