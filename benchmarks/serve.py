"""The HTTP service's overhead (issue 15): latency and throughput of `POST /api/agent/qa/v2` on
loopback against a direct `engine.ask`, with the scripted model, so that the numbers measure the
service (HTTP, JSON, one engine per request, admission, API-key check, trace stamping) and not a
model.

What runs:

- the sample corpus (`examples/corpus`) in a fresh store; the scripted model of
  `benchmarks/memory.py` (cites the retrieved sentence closest to the question), the hashing
  embedder and the lexical judge; every question in mode R1 (routing still runs), no session, so no
  answer cache; the 10 questions of `benchmarks/data/paraphrases.jsonl`, in turn;
- *direct, one engine*: `engine.ask` on one long-lived engine in this process (a library user);
- *direct, engine per request*: `EngineFactory.engine()` + `ask` + close, what the service does per
  request, without HTTP;
- *service*: `cograg`'s app under uvicorn in a child process on 127.0.0.1 (one worker, the default
  admission of 4 running + 16 waiting), called by 1, 4 and 16 concurrent clients (threads with their
  own `httpx.Client`); the anonymous rate limit is raised so that it does not refuse the load;
- *first SSE event*: time from sending `POST /api/agent/qa/v2/stream` to the first event, and to
  the final `answer` event.

Bounded: each level stops after `--requests` requests or `--max-seconds`, whichever comes first,
after 3 unmeasured warm-up requests; the child server is stopped at the end.

    .venv/bin/python benchmarks/serve.py [--requests 40] [--max-seconds 60] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from cograg.config import Settings  # noqa: E402

CONCURRENCY = (1, 4, 16)
WARMUP = 3
MODE = "R1"


def bench_settings(store: Path) -> Settings:
    # hashing vectors carry no calibrated cosine: the refusal floors are off (as in benchmarks/memory.py)
    return Settings(store=store, verification={"judge": "lexical", "min_claim_similarity": -1.0},
                    answer={"min_evidence_cosine": -1.0, "min_evidence_cosine_zh": -1.0},
                    serve={"anonymous_rate_per_minute": 1_000_000})


def model_parts() -> dict:
    from memory import scripted_llm

    from tests.fakes import HashingEmbedder

    return {"llm": scripted_llm(), "embedder": HashingEmbedder()}


def questions() -> list[str]:
    with open(REPO / "benchmarks/data/paraphrases.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["question"] for line in f if line.strip()]


def summary(times: list[float], wall: float) -> dict:
    ms = sorted(t * 1000 for t in times)
    q = statistics.quantiles(ms, n=20) if len(ms) >= 2 else ms * 19
    return {"requests": len(ms), "p50_ms": round(statistics.median(ms), 1), "p95_ms": round(q[18], 1),
            "mean_ms": round(statistics.fmean(ms), 1), "per_s": round(len(ms) / wall, 2), "wall_s": round(wall, 2)}


def bounded(run_one, n: int, max_seconds: float, concurrency: int = 1) -> dict:
    """`run_one(i)` from `concurrency` threads until `n` calls or `max_seconds` (no new call starts
    after that); each call's latency."""
    times: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    counter = iter(range(n))
    deadline = time.perf_counter() + max_seconds

    def worker() -> None:
        while time.perf_counter() < deadline:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t0 = time.perf_counter()
            try:
                run_one(i)
            except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}"[:160])
                continue
            with lock:
                times.append(time.perf_counter() - t0)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = summary(times, time.perf_counter() - start) if times else {"requests": 0}
    out["errors"] = len(errors)
    if errors:
        out["first_error"] = errors[0]
    return out


# ------------------------------------------------------------------ the server child
def serve_child(port: int, store: Path) -> None:
    import uvicorn

    from cograg.api import create_app

    app = create_app(bench_settings(store), **model_parts())
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(store: Path) -> tuple[subprocess.Popen, str]:
    import httpx

    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve-child", str(port), str(store)],
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGTERM)
    raise SystemExit("the server did not answer /healthz within 120 s")


# ------------------------------------------------------------------ the measurements
def measure(args: argparse.Namespace) -> dict:
    import httpx

    from cograg.api.engines import EngineFactory
    from cograg.engine import Engine

    qs = questions()
    load_start = os.getloadavg()
    started = datetime.now(timezone.utc)
    with tempfile.TemporaryDirectory(prefix="cograg-bench-serve-") as tmp:
        store = Path(tmp) / "store"
        settings = bench_settings(store)
        with Engine.open(settings=settings, embedder=model_parts()["embedder"]) as eng:
            eng.ingest([REPO / "examples" / "corpus"])
        results: dict = {}

        # direct: one long-lived engine
        parts = model_parts()
        with Engine.open(settings=settings, **parts) as eng:
            for i in range(WARMUP):
                eng.ask(qs[i % len(qs)], mode=MODE)
            grounded = [eng.ask(q, mode=MODE).grounded for q in qs]
            results["direct_engine"] = bounded(lambda i: eng.ask(qs[i % len(qs)], mode=MODE),
                                               args.requests, args.max_seconds)
        results["grounded_answers"] = f"{sum(grounded)}/{len(grounded)}"

        # direct: an engine per request, as the service opens them
        factory = EngineFactory(settings, **model_parts())

        def per_request(i: int) -> None:
            with factory.engine() as e:
                e.ask(qs[i % len(qs)], mode=MODE)
        for i in range(WARMUP):
            per_request(i)
        results["direct_engine_per_request"] = bounded(per_request, args.requests, args.max_seconds)

        proc, url = start_server(store)
        try:
            local = threading.local()

            def client() -> httpx.Client:
                if not hasattr(local, "client"):
                    local.client = httpx.Client(base_url=url, timeout=120)
                return local.client

            def ask_http(i: int) -> None:
                r = client().post("/api/agent/qa/v2", json={"question": qs[i % len(qs)], "mode": MODE})
                if r.status_code != 200:
                    raise RuntimeError(f"HTTP {r.status_code}: {r.text[:100]}")

            for i in range(WARMUP):
                ask_http(i)
            for c in CONCURRENCY:
                results[f"service_c{c}"] = bounded(ask_http, args.requests * (1 if c == 1 else 2), args.max_seconds, c)

            first, whole = [], []

            def stream(i: int) -> None:
                t0 = time.perf_counter()
                seen_first = False
                with client().stream("POST", "/api/agent/qa/v2/stream",
                                     json={"question": qs[i % len(qs)], "mode": MODE}) as r:
                    for line in r.iter_lines():
                        if line.startswith("event:") and not seen_first:
                            first.append(time.perf_counter() - t0)
                            seen_first = True
                        if line.startswith("event: answer"):
                            whole.append(time.perf_counter() - t0)
                            return
                raise RuntimeError("the stream ended without an answer")
            sse = bounded(stream, max(10, args.requests // 2), args.max_seconds)
            results["sse"] = {"requests": sse["requests"], "errors": sse["errors"],
                              "first_event_p50_ms": round(statistics.median(first) * 1000, 1) if first else None,
                              "first_event_p95_ms": round(statistics.quantiles([t * 1000 for t in first], n=20)[18], 1)
                              if len(first) >= 2 else None,
                              "answer_p50_ms": round(statistics.median(whole) * 1000, 1) if whole else None}
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    return {"run": started.strftime("%Y-%m-%d %H:%M UTC"), "load_start": [round(x, 2) for x in load_start],
            "load_end": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
            "python": platform.python_version(), "machine": platform.machine(),
            "requests": args.requests, "max_seconds": args.max_seconds, "results": results}


def markdown(data: dict) -> str:
    r = data["results"]
    base = r["direct_engine"]["p50_ms"]
    rows = [("direct `engine.ask`, one engine", "1", r["direct_engine"]),
            ("direct, an engine per request", "1", r["direct_engine_per_request"])]
    rows += [(f"`POST /api/agent/qa/v2` over loopback", str(c), r[f"service_c{c}"]) for c in CONCURRENCY]
    lines = ["| path | clients | requests | p50 ms | p95 ms | answers/s | p50 − direct p50 ms | errors |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for name, c, s in rows:
        lines.append(f"| {name} | {c} | {s['requests']} | {s['p50_ms']} | {s['p95_ms']} | {s['per_s']} | "
                     f"{round(s['p50_ms'] - base, 1)} | {s['errors']} |")
    sse = r["sse"]
    ls, le = data["load_start"], data["load_end"]
    return f"""## HTTP service overhead (issue 15)

Command: `.venv/bin/python benchmarks/serve.py --requests {data['requests']} --max-seconds {data['max_seconds']} --write-docs`
(raw numbers: `benchmarks/results/serve.json`).

Run {data['run']} on {data['machine']}, {data['cpus']} cores, Python {data['python']}; load average (1/5/15 min)
at start {ls[0]}/{ls[1]}/{ls[2]}, at end {le[0]}/{le[1]}/{le[2]} (other jobs were running). The scripted
model, the hashing embedder and the lexical judge over the sample corpus, mode R1, no session
(no answer cache); {r['grounded_answers']} questions answered grounded. The server is one uvicorn worker in a child process; the
clients are threads of the benchmark process on the same 2 cores, so at 4 and 16 clients client,
server and model stand-in compete for the CPU. Each level: at most the requests shown, at most
{data['max_seconds']} s, after 3 warm-up requests.

{chr(10).join(lines)}

Server-Sent Events (`POST /api/agent/qa/v2/stream`, 1 client, {sse['requests']} requests): first event after
{sse['first_event_p50_ms']} ms (p50; p95 {sse['first_event_p95_ms']} ms), the final `answer` event after {sse['answer_p50_ms']} ms (p50).

Reading: the difference between the first two rows is the cost of opening an engine per request
(a store connection, a retriever, a verifier and a trace recorder; the models are shared); the
difference between the second row and the service at 1 client is HTTP, JSON and the service's own
work (API-key check, admission, stamping the trace with its caller). With a real model a turn
takes seconds (see "Verified answers"), so this overhead is a small share of a real answer; the
service's throughput at 4 and 16 clients is bounded by the CPU, with at most 4 answers running at
once and 16 waiting.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=40, help="requests per level (twice this at 4 and 16 clients)")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="time limit per level")
    ap.add_argument("--write-docs", action="store_true", help="write the results into docs/benchmarks.md")
    ap.add_argument("--serve-child", nargs=2, metavar=("PORT", "STORE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_child:
        serve_child(int(args.serve_child[0]), Path(args.serve_child[1]))
        return
    data = measure(args)
    out = REPO / "benchmarks" / "results" / "serve.json"
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(data, indent=2))
    if args.write_docs:
        from benchmarks_common import write_section

        write_section(REPO / "docs" / "benchmarks.md", "## HTTP service overhead", markdown(data))


if __name__ == "__main__":
    main()
