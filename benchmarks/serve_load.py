"""Stateless workers under load (issue #16, SPEC I): `cograg serve`'s app in N uvicorn worker
processes (`--workers 2`, the way `cograg serve --workers N` starts them) with conversation memory
on Redis, driven by concurrent clients on shared sessions. Loopback only; bounded (a fixed number
of turns, a deadline); it starts its own `redis-server` and stops it and the workers at the end.

Two tenants each hold their own documents (one project per question) and their own sessions;
every session is shared by several clients whose turns land on either worker at the same time.
The scripted model (tests/serve_scripted.py) answers from the retrieved passage, so each grounded
answer is one verified fact of the session that asked. Afterwards, per session:

* lost facts: an answer delivered to the session whose statement is not in its ledger;
* lost turns: the session's turn count and sequence against the requests it received;
* leaks: a ledger fact from another tenant's document (cross-tenant), or one the session never
  asked about (cross-session), or a turn that used a fact id outside its own ledger.

    .venv/bin/python benchmarks/serve_load.py [--clients 20] [--turns 3] [--workers 2] [--memory redis|sqlite]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _p in (str(REPO), str(REPO / "src")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import httpx  # noqa: E402

from cograg.api.app import SETTINGS_ENV  # noqa: E402
from cograg.memory.models import normalise_statement  # noqa: E402
from tests.process_support import free_port, stop_process, wait_until_answers  # noqa: E402
from tests.redis_support import redis_server, redis_server_binary  # noqa: E402
from tests.serve_scripted import ingest_projects, project_question, serve_settings  # noqa: E402

TENANTS = ("acme", "globex")


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    wait_until_answers(proc, lambda: httpx.get(url + "/healthz", timeout=2).raise_for_status(),
                       retry_on=(httpx.TransportError, httpx.HTTPStatusError), timeout_s=timeout_s, interval_s=0.2,
                       name="the workers", exit_detail=lambda: proc.stderr.read()[-800:])


def plan(clients: int, turns: int, sessions_per_tenant: int) -> list[dict[str, Any]]:
    """Client c: its tenant, its (shared) session and the projects it asks about."""
    out = []
    for c in range(clients):
        tenant = TENANTS[c % len(TENANTS)]
        session = f"{tenant}-{(c // len(TENANTS)) % sessions_per_tenant}"
        out.append({"client": c, "tenant": tenant, "session": session,
                    "projects": [c * turns + k for k in range(turns)]})
    return out


def run_load(workdir: Path, memory_backend: str, *, clients: int = 20, turns: int = 3, workers: int = 2,
             sessions_per_tenant: int = 5, deadline_s: float = 300.0) -> dict[str, Any]:
    """Serve, drive the clients, audit the sessions; the figures and the failures as a dict."""
    clients_plan = plan(clients, turns, sessions_per_tenant)
    owner = {p: cp["tenant"] for cp in clients_plan for p in cp["projects"]}
    settings = serve_settings(workdir / "store", memory_backend)
    ingest_projects(settings, workdir / "corpus", clients * turns)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COGRAG_")}
    env[SETTINGS_ENV] = settings.model_dump_json()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "tests.serve_scripted:app", "--factory",
                             "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
                             "--log-level", "warning"],
                            cwd=str(REPO), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    lock = threading.Lock()
    try:
        _wait_healthy(url, proc, 120.0)
        start = threading.Barrier(clients)
        stop_at = time.monotonic() + deadline_s

        def client(cp: dict[str, Any]) -> None:
            with httpx.Client(base_url=url, timeout=120.0) as http:
                start.wait()
                for p in cp["projects"]:
                    if time.monotonic() > stop_at:
                        with lock:
                            errors.append(f"client {cp['client']}: deadline passed")
                        return
                    t0 = time.perf_counter()
                    try:
                        r = http.post("/api/agent/qa/v2", json={"question": project_question(p),
                                                                "session": cp["session"]})
                    except httpx.HTTPError as exc:
                        with lock:
                            errors.append(f"client {cp['client']}: {type(exc).__name__}: {exc}")
                        continue
                    took = time.perf_counter() - t0
                    with lock:
                        if r.status_code != 200:
                            errors.append(f"client {cp['client']}: HTTP {r.status_code} {r.text[:200]}")
                            continue
                        body = r.json()
                        results.append({"session": cp["session"], "tenant": cp["tenant"], "project": p,
                                        "answer": body.get("answer", ""), "grounded": bool(body.get("grounded")),
                                        "latency_s": took, "worker": r.headers.get("x-worker-pid")})

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(cp,)) for cp in clients_plan]
        for t in threads:
            t.start()
        for t in threads:
            t.join(deadline_s + 60)
        wall = time.perf_counter() - t0
        audit = _audit(url, clients_plan, results, owner, workdir)
    finally:
        stop_process(proc, timeout_s=30, group=True)  # the uvicorn supervisor and its workers
    latencies = sorted(r["latency_s"] for r in results)
    return {"memory": "redis" if memory_backend.startswith("redis") else memory_backend, "workers": workers,
            "clients": clients, "turns_per_client": turns, "sessions": len({cp["session"] for cp in clients_plan}),
            "requests": clients * turns, "answered": len(results),
            "grounded": sum(r["grounded"] for r in results),
            "workers_seen": len({r["worker"] for r in results if r["worker"]}),
            "wall_s": round(wall, 2), "turns_per_s": round(len(results) / wall, 2) if wall else 0.0,
            "latency_p50_s": round(statistics.median(latencies), 3) if latencies else None,
            "latency_p95_s": round(latencies[int(0.95 * (len(latencies) - 1))], 3) if latencies else None,
            **audit, "errors": errors}


def _audit(url: str, clients_plan: list[dict[str, Any]], results: list[dict[str, Any]], owner: dict[int, str],
           workdir: Path) -> dict[str, Any]:
    asked: dict[str, int] = defaultdict(int)
    for cp in clients_plan:
        asked[cp["session"]] += len(cp["projects"])
    delivered: dict[str, set[str]] = defaultdict(set)
    for r in results:
        if r["grounded"]:
            delivered[r["session"]].add(normalise_statement(r["answer"]))
    tenant_of_doc = {f"project-{p:03d}.md": t for p, t in owner.items()}
    lost_facts, lost_turns, cross_tenant, cross_session, foreign_used, facts_total = [], [], [], [], [], 0
    with httpx.Client(base_url=url, timeout=60.0) as http:
        for session, n in sorted(asked.items()):
            tenant = session.split("-")[0]
            shown = http.get(f"/api/sessions/{session}").json()
            ledger = http.get(f"/api/sessions/{session}/facts").json()
            facts_total += len(ledger)
            seqs = [t["seq"] for t in shown.get("turns", [])]
            if shown.get("turn_count") != n or sorted(seqs) != list(range(1, n + 1)):
                lost_turns.append(f"{session}: {n} turns sent, turn_count {shown.get('turn_count')}, seqs {seqs}")
            statements = {normalise_statement(f["statement"]) for f in ledger}
            lost_facts += [f"{session}: {s}" for s in sorted(delivered[session] - statements)]
            for f in ledger:
                doc_tenant = tenant_of_doc.get(Path(f.get("source") or "").name)
                if f.get("session_id") != session or doc_tenant != tenant:
                    cross_tenant.append(f"{session}: {f['statement']} (from {f.get('source')})")
                elif normalise_statement(f["statement"]) not in delivered[session]:
                    cross_session.append(f"{session}: {f['statement']}")
            ids = {f["fact_id"] for f in ledger}
            for t in shown.get("turns", []):
                foreign_used += [f"{session}: turn {t['seq']} used {fid}" for fid in t.get("facts_used", [])
                                 if fid not in ids]
    return {"facts_in_ledgers": facts_total, "lost_facts": len(lost_facts), "lost_turns": len(lost_turns),
            "cross_tenant_leaks": len(cross_tenant), "cross_session_leaks": len(cross_session),
            "foreign_facts_used": len(foreign_used),
            "problems": (lost_facts + lost_turns + cross_tenant + cross_session + foreign_used)[:20]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--turns", type=int, default=3, help="questions per client")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sessions-per-tenant", type=int, default=5)
    ap.add_argument("--memory", choices=["redis", "sqlite"], default="redis")
    ap.add_argument("--deadline", type=float, default=300.0, help="seconds; clients stop asking after it")
    args = ap.parse_args()
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cograg-load-")))
        backend = "sqlite"
        if args.memory == "redis":
            binary = redis_server_binary()
            if binary is None:
                print("redis-server is not installed (scripts/install_redis.sh)", file=sys.stderr)
                return 2
            backend = stack.enter_context(redis_server(binary))
        report = run_load(workdir, backend, clients=args.clients, turns=args.turns, workers=args.workers,
                          sessions_per_tenant=args.sessions_per_tenant, deadline_s=args.deadline)
    out = REPO / "benchmarks" / "results" / f"serve-load-{report['memory']}.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    ok = report["answered"] == report["requests"] and not (
        report["lost_facts"] or report["lost_turns"] or report["cross_tenant_leaks"] or report["cross_session_leaks"]
        or report["foreign_facts_used"] or report["errors"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
