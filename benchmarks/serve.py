"""The HTTP service (issue 15): latency and throughput of `POST /api/agent/qa/v2` on loopback at
1, 4 and 16 concurrent clients, and the time to the first Server-Sent Event, with the scripted model
(the service's own overhead, against a direct `engine.ask`) or a real model profile (`fast`,
`default`: what a user of the service waits).

What runs:

- the sample corpus (`examples/corpus`) in a fresh store; every question in mode R1 (routing still
  runs), no session, so no answer cache; the 10 questions of `benchmarks/data/paraphrases.jsonl`, in
  turn;
- `--model scripted` (default): the scripted model of `benchmarks/memory.py` (cites the retrieved
  sentence closest to the question), the hashing embedder and the lexical judge, so that the
  numbers measure the service (HTTP, JSON, one engine per request, admission, API-key check and
  rate limit, trace stamping) and not a model. Also measured: *direct, one engine* (`engine.ask` on
  one long-lived engine in this process, a library user) and *direct, engine per request*
  (`EngineFactory.engine()` + `ask` + close, what the service does per request, without HTTP);
- `--model fast|default`: that embedded LLM profile with the real embedder (the corpus is ingested
  with it) and the default judge and floors; only the service is measured. The GGUF files are
  taken from `--model-cache` (assembled there on first use);
- *service*: `cograg`'s app under uvicorn in a child process on 127.0.0.1 (one worker, the default
  admission of 4 running + 16 waiting), called by 1, 4 and 16 concurrent clients (threads with their
  own `httpx.Client`); the anonymous rate limit is raised so that it does not refuse the load. With
  a real model each level gets a fresh server (a request its client gave up on at the bound would
  otherwise still hold the model when the next level starts);
- *first SSE event*: time from sending `POST /api/agent/qa/v2/stream` to the first event, and to
  the final `answer` event (1 client).

Bounded: each level sends at most its requests (`--levels 1:4,4:8,16:16`, or `--requests` at 1
client and twice that at 4 and 16) and ends `--max-seconds` after it started: no request starts
after that, and a request still running then is abandoned by its client and counted as not finished
(as are 429s and errors: only answers that came back count in the latencies). Warm-up first (3
requests with the scripted model, 1 with a real one, not measured); the server is stopped at the end.

    .venv/bin/python benchmarks/serve.py [--model scripted|fast|default] [--levels 1:4,4:8,16:16]
        [--requests 40] [--max-seconds 60] [--model-cache DIR] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from cograg.config import Settings, default_model_cache  # noqa: E402
from tests.process_support import free_port, stop_process  # noqa: E402

CONCURRENCY = (1, 4, 16)
MODE = "R1"
MODELS = ("scripted", "fast", "default")
DEFAULT_MODEL_CACHE = default_model_cache()  # the one `make setup` prepared, shared with the e2e tests
SECTION = "## HTTP service overhead"
SUBSECTIONS = {"scripted": "### Scripted model: the service's own overhead",
               "fast": "### Real model: the fast profile", "default": "### Real model: the default profile"}


def bench_settings(store: Path, model: str = "scripted", model_cache: Path | None = None) -> Settings:
    serve = {"anonymous_rate_per_minute": 1_000_000}
    if model == "scripted":
        # hashing vectors carry no calibrated cosine: the refusal floors are off (as in benchmarks/memory.py)
        return Settings(store=store, verification={"judge": "lexical", "min_claim_similarity": -1.0},
                        answer={"min_evidence_cosine": -1.0, "min_evidence_cosine_zh": -1.0}, serve=serve)
    return Settings(store=store, models={"llm": model, "model_cache": model_cache}, serve=serve)


def model_parts(model: str = "scripted") -> dict:
    """The scripted model and the hashing embedder; nothing for a real profile (built from the settings)."""
    if model != "scripted":
        return {}
    from memory import scripted_llm

    from tests.fakes import HashingEmbedder

    return {"llm": scripted_llm(), "embedder": HashingEmbedder()}


def questions() -> list[str]:
    with open(REPO / "benchmarks/data/paraphrases.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["question"] for line in f if line.strip()]


def summary(times: list[float], wall: float) -> dict:
    """p50/p95 (inclusive: a p95 of a few answers lies between them, never beyond the slowest), mean
    and rate; with the latencies themselves when they are few."""
    ms = sorted(t * 1000 for t in times)
    out = {"p50_ms": round(statistics.median(ms), 1), "p95_ms": percentile_ms(times, 95),
           "mean_ms": round(statistics.fmean(ms), 1), "per_s": round(len(ms) / wall, 3)}
    if len(ms) < 20:
        out["latencies_ms"] = [round(m, 1) for m in ms]
    return out


class Refused(Exception):
    """The server answered 429 (queue full or rate limit)."""


class Unfinished(Exception):
    """The level's time bound came before the answer: the client gave up on it."""


def bounded(run_one: Callable[[int, float], None], n: int, max_seconds: float, concurrency: int = 1) -> dict:
    """`run_one(i, seconds_left)` from `concurrency` threads until `n` calls were sent or
    `max_seconds` passed (no call starts after that; one still running gives up then and raises
    `Unfinished`). Latencies of the calls that finished; every other call counted by what happened."""
    times: list[float] = []
    errors: list[str] = []
    counts = {"sent": 0, "finished": 0, "refused_429": 0, "unfinished": 0, "errors": 0}
    lock = threading.Lock()
    counter = iter(range(n))
    deadline = time.perf_counter() + max_seconds

    def worker() -> None:
        while (left := deadline - time.perf_counter()) > 0:
            with lock:
                i = next(counter, None)
                if i is None:
                    return
                counts["sent"] += 1
            t0 = time.perf_counter()
            try:
                run_one(i, left)
                outcome = "finished"
            except Refused:
                outcome = "refused_429"
            except Unfinished:
                outcome = "unfinished"
            except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                outcome = "errors"
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}"[:160])
            with lock:
                counts[outcome] += 1
                if outcome == "finished":
                    times.append(time.perf_counter() - t0)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    out: dict = {"clients": concurrency, "planned": n, **counts, "not_started": n - counts["sent"],
                 "wall_s": round(wall, 2), "requests": counts["finished"]}
    out.update(summary(times, wall) if times else {"p50_ms": None, "p95_ms": None, "mean_ms": None, "per_s": 0.0})
    if errors:
        out["first_error"] = errors[0]
    return out


# ------------------------------------------------------------------ the server child
def serve_child(port: int, store: Path, model: str, model_cache: Path | None) -> None:
    import uvicorn

    from cograg.api import create_app

    app = create_app(bench_settings(store, model, model_cache), **model_parts(model))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def start_server(store: Path, model: str, model_cache: Path | None) -> tuple[subprocess.Popen, str]:
    import httpx

    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve-child", str(port), str(store), model,
                             str(model_cache or "")], start_new_session=True)
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
    stop_server(proc)
    raise SystemExit("the server did not answer /healthz within 120 s")


def stop_server(proc: subprocess.Popen) -> None:
    stop_process(proc, timeout_s=30, group=True)  # the server and anything it forked


class Clients:
    """One `httpx.Client` per thread against `url`; `ask` and `stream` within a time left."""

    def __init__(self, url: str, qs: list[str]) -> None:
        self.url = url
        self.qs = qs
        self.local = threading.local()
        self.first: list[float] = []
        self.whole: list[float] = []

    def client(self):  # noqa: ANN201 - httpx is imported lazily
        import httpx

        if not hasattr(self.local, "client"):
            self.local.client = httpx.Client(base_url=self.url)
        return self.local.client

    def ask(self, i: int, left: float) -> None:
        import httpx

        t0 = time.perf_counter()
        try:
            r = self.client().post("/api/agent/qa/v2", json={"question": self.qs[i % len(self.qs)], "mode": MODE},
                                   timeout=httpx.Timeout(left))
        except httpx.TimeoutException:
            self.local.client.close()  # the server sees the client go; a new connection for the next request
            del self.local.client
            raise Unfinished from None
        if r.status_code == 429:
            raise Refused
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:100]}")
        if time.perf_counter() - t0 > left:  # httpx's timeouts are per read, not for the whole request
            raise Unfinished

    def stream(self, i: int, left: float) -> None:
        import httpx

        t0 = time.perf_counter()
        seen_first = False
        try:
            with self.client().stream("POST", "/api/agent/qa/v2/stream", timeout=httpx.Timeout(left),
                                      json={"question": self.qs[i % len(self.qs)], "mode": MODE}) as r:
                if r.status_code == 429:
                    raise Refused
                for line in r.iter_lines():
                    now = time.perf_counter() - t0
                    if line.startswith("event:") and not seen_first:
                        seen_first = True
                        self.first.append(now)  # the first event counts even if the answer comes too late
                    if now > left:  # leaving the stream cancels the turn on the server
                        raise Unfinished
                    if line.startswith("event: answer"):
                        self.whole.append(now)
                        return
        except httpx.TimeoutException:
            raise Unfinished from None
        raise RuntimeError("the stream ended without an answer")


def percentile_ms(values: list[float], q: int) -> float | None:
    """The median (q=50) or the 95th percentile (q=95) of `values` (seconds), in ms."""
    if not values:
        return None
    ms = sorted(v * 1000 for v in values)
    if q == 50 or len(ms) < 2:
        return round(statistics.median(ms), 1)
    return round(statistics.quantiles(ms, n=20, method="inclusive")[18], 1)


def sse_summary(sse: dict, clients: Clients) -> dict:
    return {**{k: sse[k] for k in ("planned", "sent", "finished", "refused_429", "unfinished", "errors",
                                    "not_started", "wall_s")},
            "requests": sse["finished"], "first_events": len(clients.first),
            "first_event_p50_ms": percentile_ms(clients.first, 50), "first_event_p95_ms": percentile_ms(clients.first, 95),
            "answer_p50_ms": percentile_ms(clients.whole, 50)}


def parse_levels(text: str | None, requests: int) -> list[tuple[int, int]]:
    if not text:
        return [(c, requests * (1 if c == 1 else 2)) for c in CONCURRENCY]
    levels = []
    for part in text.split(","):
        clients, _, n = part.partition(":")
        levels.append((int(clients), int(n)))
    return levels


# ------------------------------------------------------------------ the measurements
def measure_direct(settings: Settings, qs: list[str], args: argparse.Namespace, results: dict) -> None:
    """Scripted model only: `engine.ask` in this process, one engine and an engine per request."""
    from cograg.api.engines import EngineFactory
    from cograg.engine import Engine

    parts = model_parts()
    with Engine.open(settings=settings, **parts) as eng:
        for i in range(args.warmup):
            eng.ask(qs[i % len(qs)], mode=MODE)
        grounded = [eng.ask(q, mode=MODE).grounded for q in qs]
        results["direct_engine"] = bounded(lambda i, _: eng.ask(qs[i % len(qs)], mode=MODE),
                                           args.requests, args.max_seconds)
    results["grounded_answers"] = f"{sum(grounded)}/{len(grounded)}"
    factory = EngineFactory(settings, **model_parts())

    def per_request(i: int, _: float) -> None:
        with factory.engine() as e:
            e.ask(qs[i % len(qs)], mode=MODE)
    for i in range(args.warmup):
        per_request(i, 0.0)
    results["direct_engine_per_request"] = bounded(per_request, args.requests, args.max_seconds)


def warm(clients: Clients, n: int, max_seconds: float) -> dict:
    """Unmeasured requests before a level (model load, first prompt), given twice a level's time so
    that the level does not start while the model is still busy with them; their time is reported."""
    t0 = time.perf_counter()
    out = bounded(clients.ask, n, 2 * max_seconds)
    return {"requests": n, "finished": out["finished"], "seconds": round(time.perf_counter() - t0, 1)}


def measure(args: argparse.Namespace) -> dict:
    from cograg.engine import Engine

    qs = questions()
    load_start = os.getloadavg()
    started = datetime.now(timezone.utc)
    real = args.model != "scripted"
    levels = parse_levels(args.levels, args.requests)
    with tempfile.TemporaryDirectory(prefix="cograg-bench-serve-") as tmp:
        store = Path(tmp) / "store"
        settings = bench_settings(store, args.model, args.model_cache)
        t0 = time.perf_counter()
        with Engine.open(settings=settings, **({} if real else {"embedder": model_parts()["embedder"]})) as eng:
            eng.ingest([REPO / "examples" / "corpus"])
        results: dict = {"ingest_s": round(time.perf_counter() - t0, 1), "warmup": {}}
        if not real:
            measure_direct(settings, qs, args, results)

        proc = None
        try:
            # with the scripted model one server serves every level; with a real one each level (and
            # the stream) gets a fresh server, warmed up: nothing left running from the level before
            for c, planned in [*levels, (0, args.sse_requests)]:
                if proc is None or real:
                    if proc is not None:
                        stop_server(proc)
                    proc, url = start_server(store, args.model, args.model_cache)
                    clients = Clients(url, qs)
                    results["warmup"][f"c{c}" if c else "sse"] = warm(clients, args.warmup, args.max_seconds)
                if c == 0:
                    results["sse"] = sse_summary(bounded(clients.stream, planned, args.max_seconds), clients)
                    continue
                results[f"service_c{c}"] = bounded(clients.ask, planned, args.max_seconds, c)
                print(json.dumps({f"service_c{c}": results[f"service_c{c}"]}), file=sys.stderr, flush=True)
        finally:
            if proc is not None:
                stop_server(proc)
    return {"run": started.strftime("%Y-%m-%d %H:%M UTC"), "model": args.model, "mode": MODE,
            "load_start": [round(x, 2) for x in load_start], "load_end": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine(),
            "levels": [list(level) for level in levels], "warmup_requests": args.warmup, "requests": args.requests,
            "max_seconds": args.max_seconds,
            "command": command_line(args), "results": results}


def command_line(args: argparse.Namespace) -> str:
    parts = [".venv/bin/python benchmarks/serve.py"]
    if args.model != "scripted":
        parts.append(f"--model {args.model}")
    parts.append(f"--levels {args.levels}" if args.levels else f"--requests {args.requests}")
    parts.append(f"--max-seconds {args.max_seconds:g}")
    if args.model != "scripted" and args.model_cache != DEFAULT_MODEL_CACHE:
        parts.append("--model-cache DIR")
    if args.sse_requests != default_sse_requests(args):
        parts.append(f"--sse-requests {args.sse_requests}")
    parts.append("--write-docs")
    return " ".join(parts)


def default_sse_requests(args: argparse.Namespace) -> int:
    return max(10, args.requests // 2) if args.model == "scripted" else 2


# ------------------------------------------------------------------ the report
def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def markdown_scripted(data: dict) -> str:
    r = data["results"]
    base = r["direct_engine"]["p50_ms"]
    rows = [("direct `engine.ask`, one engine", "1", r["direct_engine"]),
            ("direct, an engine per request", "1", r["direct_engine_per_request"])]
    rows += [("`POST /api/agent/qa/v2` over loopback", str(c), r[f"service_c{c}"]) for c, _ in data["levels"]]
    lines = ["| path | clients | requests | p50 ms | p95 ms | answers/s | p50 − direct p50 ms | not finished |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for name, c, s in rows:
        lost = s["refused_429"] + s["unfinished"] + s["errors"]
        lines.append(f"| {name} | {c} | {s['finished']} | {_ms(s['p50_ms'])} | {_ms(s['p95_ms'])} | {s['per_s']} | "
                     f"{round(s['p50_ms'] - base, 1) if s['p50_ms'] is not None else '–'} | {lost} |")
    sse = r["sse"]
    ls, le = data["load_start"], data["load_end"]
    return f"""{SUBSECTIONS['scripted']}

Command: `{data['command']}` (raw numbers: `benchmarks/results/serve.json`).

Run {data['run']} on {data['machine']}, {data['cpus']} cores, Python {data['python']}; load average (1/5/15 min)
at start {ls[0]}/{ls[1]}/{ls[2]}, at end {le[0]}/{le[1]}/{le[2]} (other jobs were running). The scripted
model, the hashing embedder and the lexical judge over the sample corpus, mode R1, no session
(no answer cache); {r['grounded_answers']} questions answered grounded. The server is one uvicorn worker in a child process; the
clients are threads of the benchmark process on the same cores, so at 4 and 16 clients client,
server and model stand-in compete for the CPU. Each level: at most the requests shown, at most
{data['max_seconds']:g} s, after {data['warmup_requests']} warm-up requests.

{chr(10).join(lines)}

Server-Sent Events (`POST /api/agent/qa/v2/stream`, 1 client, {sse['requests']} requests): first event after
{_ms(sse['first_event_p50_ms'])} ms (p50; p95 {_ms(sse['first_event_p95_ms'])} ms), the final `answer` event after {_ms(sse['answer_p50_ms'])} ms (p50).

Reading: the difference between the first two rows is the cost of opening an engine per request
(a store connection, a retriever, a verifier and a trace recorder; the models are shared); the
difference between the second row and the service at 1 client is HTTP, JSON and the service's own
work (API-key check and rate limit, admission, stamping the trace with its caller). With a real model a turn
takes seconds (below), so this overhead is a small share of a real answer; the
service's throughput at 4 and 16 clients is bounded by the CPU, with at most 4 answers running at
once and 16 waiting.
"""


def markdown_real(data: dict) -> str:
    r = data["results"]
    lines = ["| clients | sent | answered | 429 | not finished in time | errors | not started | p50 s | mean s | "
             "answers/s | level wall s |",
             "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    sec = (lambda v: "–" if v is None else f"{v / 1000:.1f}")  # noqa: E731
    for c, _ in data["levels"]:
        s = r[f"service_c{c}"]
        lines.append(f"| {c} | {s['sent']} | {s['finished']} | {s['refused_429']} | {s['unfinished']} | "
                     f"{s['errors']} | {s['not_started']} | {sec(s['p50_ms'])} | {sec(s['mean_ms'])} | "
                     f"{s['per_s']} | {s['wall_s']} |")
    sse = r["sse"]
    ls, le = data["load_start"], data["load_end"]
    warm = ", ".join(f"{k}: {v['seconds']} s" for k, v in r["warmup"].items())
    n429 = sum(r[f"service_c{c}"]["refused_429"] for c, _ in data["levels"])
    refused = (f"{n429} requests were refused with 429 (the queue was full)." if n429 else
               "No request was refused (16 clients fit in 4 running + 16 waiting).")
    return f"""{SUBSECTIONS[data['model']]}

Command: `{data['command']}` (raw numbers: `benchmarks/results/serve-{data['model']}.json`).

Run {data['run']} on {data['machine']}, {data['cpus']} cores, Python {data['python']}; load average (1/5/15 min)
at start {ls[0]}/{ls[1]}/{ls[2]}, at end {le[0]}/{le[1]}/{le[2]} (other jobs were running on the same cores).
The `{data['model']}` LLM profile, the real embedder (the corpus ingested with it in {r['ingest_s']} s) and the
default judge, mode R1, no session. One uvicorn worker (4 answers running, 16 waiting; one heavy
model job at a time per process), a fresh server per level and for the stream, each after one
unmeasured warm-up question (model load and first answer: {warm}).
Each level sends at most the requests shown and ends {data['max_seconds']:g} s after it started: a request
still running then is abandoned and counted as not finished; "not started" were never sent.
Latencies are over the answered requests only (too few of them for a p95).

{chr(10).join(lines)}

Server-Sent Events (1 client, {sse['sent']} sent, {sse['finished']} answered within the bound): first event after
{_ms(sse['first_event_p50_ms'])} ms (p50 of {sse['first_events']}), the final `answer` event after {sec(sse['answer_p50_ms'])} s (p50).

Reading: one process runs one heavy model job at a time, so concurrent answers take turns on the
model: at 4 and 16 clients each answer waits for the others' model calls, its latency grows with
the number of clients and the answers per second stay near those of one client; on a slow machine
many of them do not finish within a level's bound. {refused} More answers per second need more processes (`--workers N`, each with its own copy of
the model, on more cores) or a model server (`--model openai:URL`).
"""


def write_subsection(path: Path, heading: str, text: str) -> None:
    """Replace the `heading` subsection of the service section of docs/benchmarks.md (or add it at
    the section's end), keeping the section's other subsections and the rest of the file."""
    from benchmarks_common import write_section

    old = path.read_text(encoding="utf-8") if path.exists() else ""
    start = old.find(SECTION)
    if start == -1:
        write_section(path, SECTION, f"{SECTION} (issue 15)\n\n{text}")
        return
    end = old.find("\n## ", start + len(SECTION))
    end = len(old) if end == -1 else end + 1
    section = old[start:end]
    at = section.find(heading)
    if at == -1:
        section = section.rstrip() + "\n\n" + text.rstrip() + "\n\n"
    else:
        nxt = section.find("\n### ", at + len(heading))
        section = section[:at] + text.rstrip() + "\n" + (section[nxt:] if nxt != -1 else "\n")
    path.write_text(old[:start] + section + old[end:], encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=MODELS, default="scripted",
                    help="scripted (the service's own overhead) or a real LLM profile")
    ap.add_argument("--levels", help="clients:requests per level, e.g. 1:4,4:8,16:16 (default: from --requests)")
    ap.add_argument("--requests", type=int, default=40, help="requests per level (twice this at 4 and 16 clients)")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="time limit per level")
    ap.add_argument("--sse-requests", type=int, help="streamed requests (default: 10+ scripted, 2 real)")
    ap.add_argument("--model-cache", type=Path, default=DEFAULT_MODEL_CACHE,
                    help="where the real models' GGUF files are (assembled there on first use)")
    ap.add_argument("--write-docs", action="store_true", help="write the results into docs/benchmarks.md")
    ap.add_argument("--serve-child", nargs=4, metavar=("PORT", "STORE", "MODEL", "CACHE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_child:
        port, store, model, cache = args.serve_child
        serve_child(int(port), Path(store), model, Path(cache) if cache else None)
        return
    args.warmup = 3 if args.model == "scripted" else 1
    if args.sse_requests is None:
        args.sse_requests = default_sse_requests(args)
    data = measure(args)
    name = "serve.json" if args.model == "scripted" else f"serve-{args.model}.json"
    out = REPO / "benchmarks" / "results" / name
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(data, indent=2))
    if args.write_docs:
        text = markdown_scripted(data) if args.model == "scripted" else markdown_real(data)
        write_subsection(REPO / "docs" / "benchmarks.md", SUBSECTIONS[args.model], text)


if __name__ == "__main__":
    main()
