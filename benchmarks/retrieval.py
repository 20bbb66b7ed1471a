"""Search latency at 10k and 100k chunks: cograg's bm25 / vector / hybrid vs a baseline.

Corpus: real chunks from cmrc2018 (Chinese) and HotpotQA (English), replicated with perturbation
(sentence order shuffled, a random real word dropped and another inserted) until the target size.
Vectors: real multilingual-e5 embeddings of the original chunks, perturbed with Gaussian noise
and re-normalised per replica (embedding 100k chunks would take most of an hour on 2 cores and is
not what this measures). Query embedding is excluded from the timings, as specified; queries are
real questions from both data sets.

Baseline, same process, same chunks and vectors: rank_bm25 (BM25Okapi over the same analysed terms),
numpy brute-force cosine, reciprocal rank fusion in Python.

    .venv/bin/python benchmarks/retrieval.py [--sizes 10000,100000] [--queries 200] [--write-docs]
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


def build_store(path: Path, n: int, texts: list[str], vecs: np.ndarray, name: str, seed: int = 0) -> None:
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    vocab = [w for t in texts[:2000] for w in t.split(" ") if w.isalpha()][:5000] or ["x"]
    store = SQLiteStore(path)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--baseline-queries", type=int, default=30, help="rank_bm25 is slow; fewer queries")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()

    from cograg.models.embedder import get_embedder

    import os

    load_at_start = os.getloadavg()[0]
    texts, queries = base_texts(args.data)
    embedder = get_embedder("e5-small")
    cache = REPO / ".bench-stores" / f"latency-base-{len(texts)}.npy"
    if cache.exists():
        vecs = np.load(cache)
    else:
        t0 = time.perf_counter()
        vecs = np.asarray(embedder.embed_passages(texts), dtype=np.float32)
        print(f"embedded {len(texts)} base chunks in {time.perf_counter() - t0:.1f}s", flush=True)
        cache.parent.mkdir(exist_ok=True)
        np.save(cache, vecs)
    rng = random.Random(1)
    qs = [q.strip() for q in rng.sample(queries, args.queries)]  # the retriever strips queries too
    qvecs = {q: np.asarray(v, dtype=np.float32) for q, v in zip(qs, embedder.embed_queries(qs))}

    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            build_store(Path(tmp), n, texts, vecs, embedder.name)
            build_s = time.perf_counter() - t0
            store = SQLiteStore(Path(tmp))

            class Fixed:  # query vectors precomputed: embedding is excluded from the timings
                name, dim = embedder.name, embedder.dim

                def embed_queries(self, t: list[str]) -> np.ndarray:
                    return np.stack([qvecs[x] for x in t])

            store.indexer = ChunkIndexer(None)
            retriever = Retriever(store, embedder=Fixed())
            retriever.search(SearchRequest(query=qs[0], mode="hybrid"))  # load matrix, warm caches
            res: dict[str, list[float]] = {"bm25": [], "vector": [], "hybrid": []}
            for q in qs:
                for mode in res:
                    t = time.perf_counter()
                    retriever.search(SearchRequest(query=q, mode=mode, k=10, rerank=False))
                    res[mode].append((time.perf_counter() - t) * 1000)

            # baseline over the same chunks and vectors
            rows_db = store.conn.execute("SELECT c.id, d.title, c.text, c.heading_path FROM chunks c "
                                         "JOIN documents d USING(doc_id) ORDER BY c.id").fetchall()
            ids = [r[0] for r in rows_db]
            from rank_bm25 import BM25Okapi

            t0 = time.perf_counter()
            bm = BM25Okapi([analyze(f"{r[1]}\n{r[2]}") for r in rows_db])
            base_build = time.perf_counter() - t0
            mat = store.vector_index.matrix(store.conn, store.generation()).vectors
            base: list[float] = []
            for q in qs[:args.baseline_queries]:
                t = time.perf_counter()
                s_bm = bm.get_scores(analyze(q))
                top_bm = np.argsort(-s_bm)[:50]
                s_v = mat @ qvecs[q]
                top_v = np.argsort(-s_v)[:50]
                fused = rrf([[ids[i] for i in top_bm], [ids[i] for i in top_v]])[:10]
                base.append((time.perf_counter() - t) * 1000)
                assert fused
            row = {"chunks": n, "build_s": round(build_s, 1), "baseline_build_s": round(base_build, 1)}
            for mode, xs in res.items():
                row[f"{mode}_p50"] = round(statistics.median(xs), 2)
                row[f"{mode}_p95"] = round(pct(xs, 95), 2)
            row["baseline_p50"] = round(statistics.median(base), 2)
            row["baseline_p95"] = round(pct(base, 95), 2)
            row["speedup_hybrid_vs_baseline_p50"] = round(row["baseline_p50"] / row["hybrid_p50"], 1)
            print(json.dumps(row), flush=True)
            rows.append(row)
            retriever.close()
            store.close()

    table = ["| chunks | bm25 p50 / p95 (ms) | vector p50 / p95 | hybrid p50 / p95 | baseline hybrid p50 / p95 | baseline ÷ hybrid (p50) |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        table.append(f"| {r['chunks']:,} | {r['bm25_p50']} / {r['bm25_p95']} | {r['vector_p50']} / {r['vector_p95']} | "
                     f"{r['hybrid_p50']} / {r['hybrid_p95']} | {r['baseline_p50']} / {r['baseline_p95']} | "
                     f"{r['speedup_hybrid_vs_baseline_p50']}× |")
    text = "\n".join(table)
    print(text)
    if args.write_docs:
        section = (
            "## Retrieval latency\n\n"
            f"Command: `.venv/bin/python benchmarks/retrieval.py --sizes {args.sizes} --queries {args.queries}`  \n"
            f"Run {datetime.now(UTC).date()} on {platform.machine()}, {__import__('os').cpu_count()} cores, "
            f"load average at start {load_at_start:.1f} (other jobs were running), "
            f"Python {platform.python_version()}. {args.queries} real questions (cmrc2018 + HotpotQA) per mode, "
            f"baseline {args.baseline_queries} queries; query embedding excluded. Times are per search, "
            "top-10 of 50 candidates per retriever, RRF k=60, including loading the hit rows.\n\n"
            "Corpus: real cmrc2018/HotpotQA chunks replicated with perturbation (shuffled sentences, one word "
            "swapped); vectors: their real e5 embeddings plus Gaussian noise (σ=0.02), re-normalised.\n"
            "Baseline: `rank_bm25.BM25Okapi` over the same analysed terms + numpy brute-force cosine + "
            "Python RRF, same process, same chunks.\n\n" + text + "\n")
        from benchmarks_common import write_section

        write_section(REPO / "docs" / "benchmarks.md", "## Retrieval latency", section)


if __name__ == "__main__":
    main()
