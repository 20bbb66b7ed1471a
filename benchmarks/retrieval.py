"""Search latency at 10k and 100k chunks: cograg's bm25 / vector / hybrid vs a baseline.

Corpus: the real chunks of the two evaluation stores (cmrc2018 beir_chunks, Chinese; HotpotQA,
English) with their stored e5 vectors, replicated with perturbation
(sentence order shuffled, a random real word dropped and another inserted) until the target size.
Vectors: real multilingual-e5 embeddings of the original chunks, perturbed with Gaussian noise
and re-normalised per replica (embedding 100k chunks would take most of an hour on 2 cores and is
not what this measures). Query embedding is excluded from the timings, as specified; queries are
real questions from both data sets.

Baselines, same process, same chunks, same analysed terms and vectors, measured in the same run:
bm25s (sparse-matrix BM25, what LlamaIndex's BM25Retriever uses) + numpy exact cosine with
`argpartition` + reciprocal rank fusion in Python; rank_bm25 (BM25Okapi) on fewer queries, as it is slow.

cograg is measured as shipped (adaptive fusion; coarse PCA vector pass from 50k chunks on) and with
each speed measure off, so every gain is a ratio within one run. The machine is shared: the load
average is recorded at the start and end of every size.

cograg's BM25 is measured with both engines (`retrieval.bm25_engine`: the in-memory impact matrix
and SQLite FTS5), with the top-10 overlap between them.

    .venv/bin/python benchmarks/retrieval.py [--sizes 10000,100000] [--queries 200]
        [--base-stores eval-cmrc_chunks,eval-hotpot] [--keep-stores DIR] [--write-docs]

Set OPENBLAS_NUM_THREADS=1 on a machine whose cores are busy with other work: a multi-threaded
OpenBLAS mat-vec then waits for its threads (measured here: 0.9 vs 16-24 ms for one 10k scan).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.documents import Chunk, Document  # noqa: E402
from cograg.index.analyzer import analyze  # noqa: E402
from cograg.index.indexing import ChunkIndexer, index_text  # noqa: E402
from cograg.index.sqlite_store import SQLiteStore  # noqa: E402
from cograg.ingest.pipeline import chunk_id_for  # noqa: E402
from cograg.retrieval.fusion import rrf  # noqa: E402
from cograg.retrieval.models import SearchRequest  # noqa: E402
from cograg.retrieval.search import Retriever  # noqa: E402


def base_texts(data: Path) -> tuple[list[str], list[str]]:
    texts, queries = [], []
    with open(data / "cmrc2018/beir_chunks/corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            texts.append(f"{r['title']}\n{r['text']}")
    with open(data / "cmrc2018/beir_chunks/queries.jsonl", encoding="utf-8") as fh:
        queries += [json.loads(line)["text"] for line in fh]
    corpus = json.loads((data / "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json").read_text())
    texts += [f"{t}\n{''.join(s)}" for t, s in corpus.items()]
    qs = json.loads((data / "hotpotqa_train100/hipporag_hotpotqa_train100.json").read_text())
    queries += [q["question"] for q in qs]
    return texts, queries


def perturb(text: str, rng: random.Random, vocab: list[str]) -> str:
    parts = [p for p in text.replace("。", "。\n").replace(". ", ".\n").split("\n") if p]
    head, body = parts[0], parts[1:]
    rng.shuffle(body)
    words = " ".join(body).split(" ")
    if len(words) > 3:
        words.pop(rng.randrange(len(words)))
    words.insert(rng.randrange(len(words) + 1), rng.choice(vocab))
    return head + "\n" + " ".join(words)


class ReplayEmbedder:
    """Returns precomputed vectors for known texts (benchmark only)."""

    def __init__(self, table: dict[str, np.ndarray], dim: int, name: str) -> None:
        self.table, self.dim, self.name = table, dim, name

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


def build_store(path: Path, n: int, texts: list[str], vecs: np.ndarray, name: str, seed: int = 0,
                open_store=SQLiteStore) -> None:
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    vocab = [w for t in texts[:2000] for w in t.split(" ") if w.isalpha()][:5000] or ["x"]
    store = open_store(path)
    table: dict[str, np.ndarray] = {}
    embedder = ReplayEmbedder(table, vecs.shape[1], name)
    store.indexer = ChunkIndexer(embedder)
    per_doc = 200
    i = 0
    doc_no = 0
    while i < n:
        doc_id = f"bench{doc_no:06d}"
        doc = Document(doc_id=doc_id, source_path=f"/bench/{doc_no}.txt", content_hash="x", doc_type="text",
                       title=f"bench {doc_no}", size_bytes=0, updated_at="2026-01-01T00:00:00+00:00",
                       ingested_at="2026-01-01T00:00:00+00:00", chunker="bench", chunk_count=0)
        chunks = []
        for seq in range(min(per_doc, n - i)):
            j = (i + seq) % len(texts)
            text = texts[j] if i + seq < len(texts) else perturb(texts[j], rng, vocab)
            v = vecs[j] + nrng.normal(0, 0.02, vecs.shape[1]).astype(np.float32) * (i + seq >= len(texts))
            v /= np.linalg.norm(v)
            c = Chunk(chunk_id=chunk_id_for(doc_id, seq, text), doc_id=doc_id, seq=seq, text=text, start=0,
                      end=len(text), orig_start=0, orig_end=len(text), token_count=len(text))
            table[index_text(c, doc.title)] = v.astype(np.float32)
            chunks.append(c)
        with store.write_document(doc) as w:
            w.add_chunks(chunks)
        table.clear()
        i += len(chunks)
        doc_no += 1
    store.close()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def base_from_stores(work: Path, stores: tuple[str, ...] = ("eval-cmrc_chunks", "eval-hotpot")) -> tuple[list[str], np.ndarray]:
    """The real chunks of the evaluation stores (title line + chunk text) with their stored e5
    vectors, so no embedding is needed here (run benchmarks/retrieval_quality.py first)."""
    import sqlite3

    texts: list[str] = []
    vecs: list[np.ndarray] = []
    for name in stores:
        conn = sqlite3.connect(str(work / name / "cograg.db"))
        for title, text, vec in conn.execute(
                "SELECT json_extract(c.metadata, '$.title'), c.text, v.vec FROM chunks c "
                "JOIN chunk_vectors v ON v.chunk_rowid = c.id ORDER BY c.id"):
            texts.append(f"{title}\n{text}" if title else text)
            vecs.append(np.frombuffer(vec, dtype=np.float32))
        conn.close()
    if not texts:
        raise SystemExit(f"no embedded chunks in {work}/{stores}; run benchmarks/retrieval_quality.py first")
    return texts, np.stack(vecs)


def timed(fn, queries: list[str]) -> list[float]:
    xs = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        xs.append((time.perf_counter() - t) * 1000)
    return xs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--baseline-queries", type=int, default=30, help="rank_bm25 is slow; fewer queries")
    ap.add_argument("--common-term-share", type=float, default=0.05,
                    help="document-frequency cut-off measured against no cut-off")
    ap.add_argument("--base-stores", default="eval-cmrc_chunks,eval-hotpot",
                    help="embedded stores under --work whose chunks and vectors seed the corpus")
    ap.add_argument("--keep-stores", type=Path, default=None,
                    help="build each size's store once in this folder and reuse it on later runs")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()

    import os

    import bm25s

    from cograg.index.vectors import VectorIndex
    from cograg.models.embedder import get_embedder

    _, queries = base_texts(args.data)
    texts, vecs = base_from_stores(args.work, tuple(args.base_stores.split(",")))
    embedder = get_embedder("e5-small")
    rng = random.Random(1)
    qs = [q.strip() for q in rng.sample(queries, args.queries)]  # the retriever strips queries too
    qvecs = {q: np.asarray(v, dtype=np.float32) for q, v in zip(qs, embedder.embed_queries(qs))}

    class Fixed:  # query vectors precomputed: embedding is excluded from the timings
        name, dim = embedder.name, embedder.dim

        def embed_queries(self, t: list[str]) -> np.ndarray:
            return np.stack([qvecs[x] for x in t])

    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) if args.keep_stores is None else args.keep_stores / f"chunks-{n}"
            t0 = time.perf_counter()
            build_s: float | None = None
            if not (path / "built").exists():
                build_store(path, n, texts, vecs, embedder.name)
                build_s = round(time.perf_counter() - t0, 1)
                if args.keep_stores is not None:
                    (path / "built").write_text(args.base_stores)
            store = SQLiteStore(path)
            store.indexer = ChunkIndexer(None)
            import psutil

            rss = psutil.Process().memory_info().rss
            t0 = time.perf_counter()
            postings = store.bm25_index.postings(store.conn, store.generation())
            bm25_build = time.perf_counter() - t0
            bm25_rss_mb = (psutil.Process().memory_info().rss - rss) / 1e6
            retriever = Retriever(store, embedder=Fixed())
            load_start = os.getloadavg()[0]

            def search(mode: str, **kw):
                return lambda q: retriever.search(SearchRequest(query=q, mode=mode, k=10, rerank=False, **kw))

            variants = {
                "bm25": search("bm25"), "vector": search("vector"), "hybrid": search("hybrid"),
                "hybrid rrf": search("hybrid", fusion="rrf"),
            }
            res: dict[str, list[float]] = {}
            for q in qs[:5]:
                for fn in variants.values():
                    fn(q)  # load the matrix, warm caches
            # cograg as shipped, then with the FTS5 BM25 engine, then with every speed measure off;
            # interleaved per query so the machine's load falls on all of them alike
            shipped_engine = store.bm25_engine
            exact_index = VectorIndex(coarse_from=10**12)
            coarse_index = store.vector_index
            store.common_term_share = args.common_term_share
            shipped_terms = {}
            for q in qs:
                for name, fn in variants.items():
                    t = time.perf_counter()
                    fn(q)
                    res.setdefault(name, []).append((time.perf_counter() - t) * 1000)
                store.bm25_engine = "fts5"
                for name in ("bm25", "hybrid"):
                    t = time.perf_counter()
                    variants[name](q)
                    res.setdefault(f"{name}, fts5", []).append((time.perf_counter() - t) * 1000)
                store.vector_index = exact_index
                store.common_term_share = None
                for name in ("vector", "hybrid", "bm25"):
                    t = time.perf_counter()
                    variants[name](q)
                    res.setdefault(f"{name}, no speed-ups", []).append((time.perf_counter() - t) * 1000)
                store.vector_index = coarse_index
                store.common_term_share = args.common_term_share
                store.bm25_engine = shipped_engine
            # what the speed measures cost in results: overlap of the top 10 with and without
            overlap_v, overlap_b, overlap_m, overlap_m_ties = [], [], [], []
            for q in qs:
                a = {r for r, _ in coarse_index.search(store.conn, store.generation(), qvecs[q], 10)}
                b = {r for r, _ in exact_index.search(store.conn, store.generation(), qvecs[q], 10)}
                overlap_v.append(len(a & b) / max(len(b), 1))
                a = {r for r, _ in store.keyword_search(q, 10)}
                store.common_term_share = None
                b = {r for r, _ in store.keyword_search(q, 10)}
                store.common_term_share = args.common_term_share
                overlap_b.append(len(a & b) / max(len(b), 1))
                # the in-memory BM25 against FTS5, all terms: plain overlap, and counting a hit FTS5
                # ranks below 10th only because of a tie with its 10th score as shared
                store.common_term_share = None
                store.bm25_engine = "memory"
                mem = store.keyword_search(q, 10)
                store.bm25_engine = "fts5"
                fts = dict(store.keyword_search(q, 50))
                store.bm25_engine = shipped_engine
                store.common_term_share = args.common_term_share
                top_fts = dict(sorted(fts.items(), key=lambda kv: -kv[1])[:10])
                tenth = min(top_fts.values(), default=0.0)
                same = sum(1 for r, _ in mem if r in top_fts)
                tied = sum(1 for r, _ in mem if r in fts and fts[r] >= tenth - 1e-6 * abs(tenth))
                overlap_m.append(same / max(len(top_fts), 1))
                overlap_m_ties.append(min(tied, len(top_fts)) / max(len(top_fts), 1))

            # baselines over the same chunks, terms and vectors
            rows_db = store.conn.execute("SELECT c.id, d.title, c.text, c.heading_path FROM chunks c "
                                         "JOIN documents d USING(doc_id) ORDER BY c.id").fetchall()
            ids = [r[0] for r in rows_db]
            corpus_terms = [analyze(f"{r[1]}\n{r[2]}") for r in rows_db]
            t0 = time.perf_counter()
            bm_s = bm25s.BM25()
            bm_s.index(corpus_terms, show_progress=False)
            bm25s_build = time.perf_counter() - t0
            vocab = bm_s.vocab_dict
            mat = exact_index.matrix(store.conn, store.generation()).vectors

            def bm25s_top(q: str, k: int = 50) -> list[int]:
                terms = [t for t in analyze(q) if t in vocab] or [next(iter(vocab))]
                docs, _ = bm_s.retrieve([terms], k=k, show_progress=False, n_threads=1)
                return [ids[i] for i in docs[0]]

            def numpy_top(q: str, k: int = 50) -> list[int]:
                s = mat @ qvecs[q]
                top = np.argpartition(-s, k - 1)[:k]
                return [ids[i] for i in top[np.argsort(-s[top])]]

            res["baseline bm25s"] = timed(bm25s_top, qs)
            res["baseline numpy argpartition"] = timed(numpy_top, qs)
            res["baseline bm25s + numpy + RRF"] = timed(
                lambda q: rrf([bm25s_top(q), numpy_top(q)])[:10], qs)
            from rank_bm25 import BM25Okapi

            t0 = time.perf_counter()
            bm = BM25Okapi(corpus_terms)
            rank_build = time.perf_counter() - t0
            res["baseline rank_bm25 + numpy + RRF"] = timed(
                lambda q: rrf([[ids[i] for i in np.argsort(-bm.get_scores(analyze(q)))[:50]], numpy_top(q)])[:10],
                qs[:args.baseline_queries])
            load_end = os.getloadavg()[0]
            row = {"chunks": n, "build_s": build_s, "bm25s_build_s": round(bm25s_build, 1),
                   "rank_bm25_build_s": round(rank_build, 1), "load_start": round(load_start, 2),
                   "load_end": round(load_end, 2),
                   "vector_top10_overlap_coarse_vs_exact": round(statistics.mean(overlap_v), 4),
                   "bm25_top10_overlap_cutoff_vs_full": round(statistics.mean(overlap_b), 4),
                   "bm25_top10_overlap_memory_vs_fts5": round(statistics.mean(overlap_m), 4),
                   "bm25_top10_overlap_memory_vs_fts5_ties": round(statistics.mean(overlap_m_ties), 4),
                   "bm25_memory_build_s": round(bm25_build, 1), "bm25_memory_mb": round(postings.nbytes / 1e6, 1),
                   "bm25_memory_rss_mb": round(bm25_rss_mb, 1), "bm25_postings": int(postings.impacts.nnz),
                   "bm25_terms": len(postings.vocab)}
            for name, xs in res.items():
                row[name] = [round(statistics.median(xs), 2), round(pct(xs, 95), 2)]
            print(json.dumps(row), flush=True)
            rows.append(row)
            retriever.close()
            store.close()

    names = ["bm25", "vector", "hybrid", "hybrid rrf", "bm25, fts5", "hybrid, fts5", "bm25, no speed-ups",
             "vector, no speed-ups", "hybrid, no speed-ups", "baseline bm25s", "baseline numpy argpartition",
             "baseline bm25s + numpy + RRF", "baseline rank_bm25 + numpy + RRF"]
    table = ["| chunks | load (start → end) | " + " | ".join(names) + " |",
             "|---:|---|" + "---:|" * len(names)]
    for r in rows:
        table.append(f"| {r['chunks']:,} | {r['load_start']} → {r['load_end']} | "
                     + " | ".join(f"{r[x][0]} / {r[x][1]}" for x in names) + " |")
    ratios = []
    for r in rows:
        h = r["hybrid"][0]
        ratios.append(f"- {r['chunks']:,} chunks: hybrid p50 {h} ms; ÷ no speed-ups "
                      f"{r['hybrid, no speed-ups'][0] / h:.2f}×, bm25s + numpy + RRF ÷ cograg hybrid "
                      f"{r['baseline bm25s + numpy + RRF'][0] / h:.2f}×, rank_bm25 baseline ÷ cograg hybrid "
                      f"{r['baseline rank_bm25 + numpy + RRF'][0] / h:.1f}×; top-10 overlap coarse vs exact vectors "
                      f"{r['vector_top10_overlap_coarse_vs_exact']:.3f}, BM25 with vs without the "
                      f"common-term cut-off {r['bm25_top10_overlap_cutoff_vs_full']:.3f}; in-memory BM25: "
                      f"hybrid fts5 ÷ hybrid {r['hybrid, fts5'][0] / h:.2f}×, bm25 fts5 ÷ bm25 "
                      f"{r['bm25, fts5'][0] / r['bm25'][0]:.2f}×, top-10 overlap with FTS5 "
                      f"{r['bm25_top10_overlap_memory_vs_fts5']:.3f} "
                      f"({r['bm25_top10_overlap_memory_vs_fts5_ties']:.3f} counting ties at the 10th score), built in "
                      f"{r['bm25_memory_build_s']} s, {r['bm25_memory_mb']} MB ({r['bm25_postings']:,} postings, "
                      f"{r['bm25_terms']:,} terms; process RSS +{r['bm25_memory_rss_mb']} MB); store build "
                      f"{'kept from an earlier run' if r['build_s'] is None else str(r['build_s']) + ' s'}, bm25s index {r['bm25s_build_s']} s, rank_bm25 {r['rank_bm25_build_s']} s")
    text = "\n".join(table) + "\n\n" + "\n".join(ratios)
    print(text)
    if args.write_docs:
        section = (
            "## Retrieval latency\n\n"
            f"Command: `.venv/bin/python benchmarks/retrieval.py --sizes {args.sizes} --queries {args.queries} "
            f"--base-stores {args.base_stores} --write-docs`  \n"
            f"Run {datetime.now(UTC).isoformat(timespec='minutes')} on {platform.machine()}, {os.cpu_count()} cores "
            "shared with other jobs (1-minute load average at the start and end of each size in the table), "
            f"Python {platform.python_version()}, OpenBLAS threads "
            f"{os.environ.get('OPENBLAS_NUM_THREADS', 'default')}. {args.queries} real questions (cmrc2018 + HotpotQA) per variant, "
            f"rank_bm25 baseline {args.baseline_queries}; query embedding excluded. Cells are p50 / p95 in ms per "
            "search, top 10 of 50 candidates per retriever, including loading the hit rows; the cograg variants "
            "are interleaved query by query so load falls on all alike. Medians.\n\n"
            f"Corpus: the chunks of the embedded stores `{args.base_stores}` under `.bench-stores` (title line + "
            "chunk text) replicated with perturbation (shuffled sentences, one word swapped); vectors: their stored "
            "e5 embeddings plus Gaussian noise (σ=0.02), re-normalised.\n"
            "`hybrid` = the default search (adaptive fusion, BM25 and vectors run concurrently, coarse 128-d PCA pass + "
            "exact re-scoring of 1000 candidates from 50k chunks on, BM25 from the in-memory impact matrix) plus the option "
            f"`retrieval.common_term_share = {args.common_term_share}` (BM25 query terms in more than that share of "
            "chunks dropped; off by default); `fts5` = the same with `retrieval.bm25_engine = fts5` (BM25 scored by "
            "SQLite FTS5); `no speed-ups` = FTS5, exact full vector scan and all query terms. Baselines over the same "
            "analysed terms and vectors, same process: bm25s 0.2 (`n_threads=1`), numpy `argpartition` exact "
            "cosine, Python RRF; rank_bm25 `BM25Okapi`.\n\n" + text + "\n")
        from benchmarks_common import write_section

        write_section(REPO / "docs" / "benchmarks.md", "## Retrieval latency", section)


if __name__ == "__main__":
    main()
