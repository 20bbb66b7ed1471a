"""Scale-out index (SPEC I): Milvus Lite against the SQLite index on the same chunks and vectors.

Measured, per size: ingest throughput into each backend (the SQLite write path with stored
vectors; filling Milvus from those stored vectors, which is `cograg index migrate`; and, bounded,
the per-document write path of a Milvus-indexed store), search latency p50/p95 per mode through the
same `Retriever`, and recall@10 parity: the share of SQLite's top 10 that Milvus also returns for
the same query (same analysed text, same vectors; BM25 statistics and tokenisation differ, FLAT
and the SQLite scan are both exact). One mode searches as a principal: a third of the documents
are readable by group `team-a` only, a third by `team-b` only, the rest by everyone, and the
principal is in `team-a`, so the ACL filter runs inside every search; a hit of a `team-b`
document would be counted as a leak. It runs up to `--acl-up-to` chunks: the SQLite index's ACL
filter for BM25 takes seconds per query at 10k chunks already.

Corpus: the real chunks of cmrc2018 (Chinese) and HotpotQA (English) in /work/shared/data,
replicated with perturbation to the target size (as benchmarks/retrieval.py). Vectors: a 256-d
hashing embedding of the analysed terms (signed buckets, L2-normalised) — cheap, deterministic,
and the same for both backends, which is what parity needs; it is not a quality model. Queries:
real questions from both data sets; query embedding excluded from the timings.

    .venv/bin/python benchmarks/scale.py [--sizes 10000,100000] [--queries 100] [--write-path-chunks 2000]
        [--search-budget-s 300] [--acl-up-to 10000] [--write-docs]

Each size's row is printed as one JSON line when that size is done, so a run cut short by a time
limit still reports the sizes it finished.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from retrieval import ReplayEmbedder, base_texts, build_store, pct  # noqa: E402

from cograg.index.analyzer import analyze  # noqa: E402
from cograg.index.indexing import ChunkIndexer  # noqa: E402
from cograg.index.migrate import migrate_index  # noqa: E402
from cograg.index.sqlite_store import SQLiteStore  # noqa: E402
from cograg.retrieval.models import Principal, SearchRequest  # noqa: E402
from cograg.retrieval.search import Retriever  # noqa: E402

DIM = 256
EMBEDDER = "bench:hashing256"
READING = (
    "Reading: Milvus Lite, the embedded engine the tests use, returns the same top-10 vectors (up to ties) and "
    "most of the same BM25 hits as the SQLite index at both sizes and, searched as a `team-a` principal, "
    "no `team-b` chunk. "
    "It is a pure-Python engine, and two things made it 50–200× slower than SQLite in the previous run of this "
    "section (commit 24ba4e4: 1.4 s BM25, 0.4 s vector, 1.9 s hybrid per query at 10k chunks; about 7 s per "
    "query estimated at 100k): rows written by a process sit in an in-memory table that every search scans row "
    "by row, rebuilding a BM25 scorer over it per query, until they are flushed into an indexed segment (the "
    "benchmark searched right after `cograg index migrate` filled the collection); and filters on ARRAY fields "
    "(the ACL groups and tags) are evaluated row by row in Python over the whole segment, vectors included. The "
    "index now flushes a Lite collection after a bulk load and before the first search after a write, and keeps "
    "ACL groups and tags as hex-encoded VARCHAR fields that Lite filters vectorised (`like`), with the same "
    "results. On the index calls alone at 10k chunks (8 questions, k=50, old code then new, load average "
    "5.8–7.3): BM25 2705 → 15 ms, vector 548 → 47 ms, one-request hybrid 3304 → 125 ms, BM25 with an ACL "
    "filter 2120 → 41 ms (762 ms with the flush alone). What is left at 100k, 0.3–0.65 s per search, is "
    "Milvus Lite's "
    "own per-query work over every row in Python and NumPy (it copies the vectors that pass the filter before "
    "its brute-force product, and rebuilds per-row version maps); FLAT stays, being exact as parity needs. "
    "Milvus Lite is for development and tests; the Milvus backend is meant for a Milvus server shared by several "
    "workers, whose latency is not measured here (no server on this machine; `docker-compose.yml` starts one). "
    "The SQLite `hybrid acl` cell is the SQLite index's own ACL filter for BM25: `rowid IN (…)` next to the FTS5 "
    "`MATCH` makes SQLite run the match once per allowed chunk (2 s for one query at 10k; written `+rowid IN "
    "(…)`, 30 ms with the same rows), which is why that mode stops at 10k.")
MODES = {"bm25": {"mode": "bm25"}, "vector": {"mode": "vector"}, "hybrid rrf": {"mode": "hybrid", "fusion": "rrf"},
         "hybrid": {"mode": "hybrid"}, "hybrid acl": {"mode": "hybrid", "principal": Principal(groups=["team-a"])}}
TEAMS = ([], ["team-a"], ["team-b"])  # document i's ACL is TEAMS[i % 3]


def assign_acls(root: Path) -> set[str]:
    """Give the built store's documents their ACLs (TEAMS); returns the `team-b` document ids."""
    store = SQLiteStore(root)
    hidden = set()
    try:
        for i, doc in enumerate(sorted(store.list_documents(), key=lambda d: d.doc_id)):
            store.update_document_metadata(doc.model_copy(update={"acl": TEAMS[i % 3]}))
            if TEAMS[i % 3] == ["team-b"]:
                hidden.add(doc.doc_id)
    finally:
        store.close()
    return hidden


def hashing_vector(text: str) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    for term in analyze(text):
        h = int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest(), "little")
        v[h % DIM] += 1.0 if (h >> 16) & 1 else -1.0
    n = float(np.linalg.norm(v))
    if n == 0:
        v[0], n = 1.0, 1.0
    return v / n


class FixedQueries:
    """Query vectors computed before timing (embedding is excluded)."""

    name, dim = EMBEDDER, DIM

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(n: int, texts: list[str], vecs: np.ndarray, qs: list[str], qvecs: dict[str, np.ndarray],
            write_path_chunks: int, search_budget_s: float, acl: bool) -> dict:
    from cograg.index.milvus_store import MilvusStore

    row: dict = {"chunks": n, "uptime_start": uptime()}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        t0 = time.perf_counter()
        build_store(root, n, texts, vecs, EMBEDDER)
        row["ingest_sqlite_chunks_per_s"] = round(n / (time.perf_counter() - t0))
        log(f"sqlite store built: {row['ingest_sqlite_chunks_per_s']} chunks/s")
        hidden = assign_acls(root)
        report = migrate_index(root, "milvus:milvus.db")
        row["migrate_milvus_chunks_per_s"] = round(report.indexed / report.seconds)
        row["migrate_milvus_s"] = report.seconds
        log(f"milvus filled: {row['migrate_milvus_chunks_per_s']} chunks/s")
        if write_path_chunks:
            m = min(write_path_chunks, n)
            t0 = time.perf_counter()
            build_store(Path(tmp) / "written", m, texts, vecs, EMBEDDER,
                        open_store=lambda p: MilvusStore(p, uri=str(p / "milvus.db")))
            row["ingest_milvus_write_path_chunks_per_s"] = round(m / (time.perf_counter() - t0))
            row["write_path_chunks"] = m
            log(f"milvus write path: {row['ingest_milvus_write_path_chunks_per_s']} chunks/s")

        plain = SQLiteStore(root)
        plain.indexer = ChunkIndexer(None)
        milvus = MilvusStore(root, uri=str(root / "milvus.db"))
        milvus.indexer = ChunkIndexer(None)
        retrievers = {"sqlite": Retriever(plain, embedder=FixedQueries(qvecs)),
                      "milvus": Retriever(milvus, embedder=FixedQueries(qvecs))}

        leaks = {"sqlite": 0, "milvus": 0}

        def run(backend: str, q: str, opts: dict) -> list[str]:
            res = retrievers[backend].search(SearchRequest(query=q, k=10, rerank=False, **opts))
            if "principal" in opts:
                leaks[backend] += sum(h.doc_id in hidden for h in res.hits)
            return [h.chunk_id for h in res.hits]

        modes = {m: o for m, o in MODES.items() if acl or "principal" not in o}
        for q in qs[:5]:  # warm caches (the SQLite vector matrix, Milvus's loaded segments)
            for backend in retrievers:
                for opts in modes.values():
                    run(backend, q, opts)
        times: dict[str, list[float]] = {}
        overlap: dict[str, list[float]] = {}
        log("searching")
        searched_from = time.perf_counter()
        row["queries"] = 0
        for i, q in enumerate(qs):  # interleaved query by query, so the machine's load falls on both alike
            if i >= 5 and time.perf_counter() - searched_from > search_budget_s:
                log(f"search budget of {search_budget_s:.0f} s spent after {i} queries")
                break
            for mode, opts in modes.items():
                tops = {}
                for backend in retrievers:
                    t = time.perf_counter()
                    tops[backend] = run(backend, q, opts)
                    times.setdefault(f"{backend} {mode}", []).append((time.perf_counter() - t) * 1000)
                if tops["sqlite"]:
                    overlap.setdefault(mode, []).append(len(set(tops["sqlite"]) & set(tops["milvus"]))
                                                        / len(tops["sqlite"]))
            t = time.perf_counter()
            milvus.index.hybrid_search(q, qvecs[q], 10, retrieve_k=50)
            times.setdefault("milvus native hybrid (RRFRanker)", []).append((time.perf_counter() - t) * 1000)
            row["queries"] = i + 1
            if i % 10 == 9:
                log(f"{i + 1} queries")
        for name, xs in times.items():
            row[name] = [round(statistics.median(xs), 2), round(pct(xs, 95), 2)]
        for mode, xs in overlap.items():
            row[f"recall@10 parity {mode}"] = round(statistics.mean(xs), 3)
        row["acl_leaks"] = leaks if acl else None
        for r in retrievers.values():
            r.close()
        milvus.close()
        plain.close()
    row["uptime_end"] = uptime()
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--sizes", default="10000")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--write-path-chunks", type=int, default=2000,
                    help="chunks written document by document through a Milvus-indexed store (bounded)")
    ap.add_argument("--search-budget-s", type=float, default=300,
                    help="per size: stop starting queries after this many seconds of searching (at least 5 run)")
    ap.add_argument("--acl-up-to", type=int, default=10_000,
                    help="the largest size searched as a principal (the SQLite ACL filter is slow)")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    started = time.perf_counter()
    base, queries = base_texts(args.data)
    sizes = [int(s) for s in args.sizes.split(",")]
    texts = base[:max(sizes)]
    vecs = np.stack([hashing_vector(t) for t in texts])
    log(f"{len(texts)} base texts embedded")
    qs = [q.strip() for q in random.Random(1).sample(queries, args.queries)]
    qvecs = {q: hashing_vector(q) for q in qs}
    rows = []
    for n in sizes:
        rows.append(measure(n, texts, vecs, qs, qvecs, args.write_path_chunks, args.search_budget_s,
                            n <= args.acl_up_to))
        print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    elapsed = time.perf_counter() - started

    lat = list(MODES)
    table = ["| chunks | backend | " + " | ".join(lat) + " | recall@10 parity (" + " / ".join(lat) + ") |",
             "|---:|---|" + "---:|" * len(lat) + "---|"]
    for r in rows:
        parity = " / ".join(f"{r[f'recall@10 parity {m}']:.3f}" if f"recall@10 parity {m}" in r else "–"
                            for m in lat)
        for backend in ("sqlite", "milvus"):
            cells = " | ".join(f"{r[f'{backend} {m}'][0]} / {r[f'{backend} {m}'][1]}" if f"{backend} {m}" in r
                               else "not run" for m in lat)
            table.append(f"| {r['chunks']:,} | {'SQLite' if backend == 'sqlite' else 'Milvus Lite'} | {cells} | "
                         f"{parity if backend == 'milvus' else '(reference)'} |")
    notes = []
    for r in rows:
        native = r["milvus native hybrid (RRFRanker)"]
        notes.append(
            f"- {r['chunks']:,} chunks: ingest into SQLite (FTS5 + stored vectors) {r['ingest_sqlite_chunks_per_s']:,} "
            f"chunks/s; filling Milvus Lite from the stored vectors (`cograg index migrate`) "
            f"{r['migrate_milvus_chunks_per_s']:,} chunks/s; the per-document write path of a Milvus-indexed store "
            f"(SQLite commit, then Milvus upsert) {r.get('ingest_milvus_write_path_chunks_per_s', 'n/a')} chunks/s "
            f"over {r.get('write_path_chunks', 0):,} chunks; Milvus's own one-request hybrid search (RRFRanker) "
            f"{native[0]} / {native[1]} ms; {r['queries']} queries"
            + (f"; `team-b` hits returned to the `team-a` principal: SQLite {r['acl_leaks']['sqlite']}, "
               f"Milvus Lite {r['acl_leaks']['milvus']}" if r["acl_leaks"] is not None else "") + ". "
            f"Load: `{r['uptime_start']}` → `{r['uptime_end']}`")
    text = "\n".join(table) + "\n\n" + "\n".join(notes)
    print(text)
    if args.write_docs:
        (REPO / "benchmarks" / "results" / "scale-index.json").write_text(
            json.dumps(rows, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        cmd = (f".venv/bin/python benchmarks/scale.py --sizes {args.sizes} --queries {args.queries} "
               f"--write-path-chunks {args.write_path_chunks} --search-budget-s {args.search_budget_s:g} "
               f"--acl-up-to {args.acl_up_to} --write-docs")
        import pymilvus

        section = (
            "## Scale-out: index\n\n"
            f"Command: `{cmd}` ({elapsed:.0f} s)  \n"
            f"Run {datetime.now(UTC).isoformat(timespec='minutes')} on {platform.machine()}, {os.cpu_count()} cores "
            f"shared with other jobs (`uptime` at the start and end of each size below), Python "
            f"{platform.python_version()}, pymilvus {pymilvus.__version__} with Milvus Lite (embedded, one file).\n\n"
            "Same chunks, same stored vectors, same `Retriever` (k=10, 50 candidates per retriever, no reranker), "
            f"up to {args.queries} real questions (cmrc2018 + HotpotQA; the number run per size is below), query "
            "embedding excluded; cells are p50 / p95 ms, the two backends interleaved query by query. `hybrid acl` "
            "is `hybrid` searched as a principal in group `team-a`, with a third of the documents readable by "
            "`team-a` only, a third by `team-b` only and the rest by everyone (run up to "
            f"{args.acl_up_to:,} chunks: SQLite's ACL-filtered BM25 takes seconds per query there already). "
            "Corpus: cmrc2018 + HotpotQA chunks replicated with perturbation; vectors: a 256-d hashing embedding "
            "(the same for both backends; not a quality model). "
            "recall@10 parity = the mean share of SQLite's top 10 that Milvus Lite also returns. Vector search is "
            "exact on both sides (FLAT inner product vs SQLite's full scan), so its parity is 1 up to ties; BM25 "
            "differs by design (Milvus computes BM25 from its own jieba analyzer and statistics, SQLite's FTS5 from "
            "cograg's analyzer), and hybrid inherits that.\n\n" + text + "\n\n" + READING + "\n")
        from benchmarks_common import write_section

        write_section(REPO / "docs" / "benchmarks.md", "## Scale-out: index", section)


if __name__ == "__main__":
    main()
