#!/usr/bin/env python
"""Which stored passages the wrapped-line reading changes (`cograg.text.soft_line_breaks`).

The answer path reads a stored chunk's sentences (the quotes the model may write, the stand-in quote,
the judge's evidence window, the refusal's closest evidence) across the line breaks that wrap a
paragraph's lines. This script ingests each corpus as the project does (no embeddings) and counts
the chunks that reading splits into other sentences (or clauses) than before, alone and joined to
the next chunk of the same document as context packing joins them (a line break between chunks that
do not overlap), and the line breaks it reads as spaces. Where no chunk and no pair is split
otherwise, the answer path reads the same sentences as before.

    .venv/bin/python benchmarks/wrapped_lines.py [--data ../shared/data] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import Settings  # noqa: E402
from cograg.documents import Chunk  # noqa: E402
from cograg.eval.retrieval import hotpot_to_beir  # noqa: E402
from cograg.index.sqlite_store import SQLiteStore  # noqa: E402
from cograg.ingest.pipeline import ingest_paths  # noqa: E402
from cograg.text import sentence_spans, soft_line_breaks  # noqa: E402


def _wraps(text: str) -> int:
    """How many of `text`'s line breaks the reading takes for wraps."""
    return sum(a != b for a, b in zip(text, soft_line_breaks(text)))


def _resplit(text: str) -> bool:
    """Whether the reading gives `text` other sentences (clauses: split at semicolons too)."""
    return sentence_spans(text, semicolons=True) != sentence_spans(text, semicolons=True, wrapped=True)


def _joined(a: Chunk, b: Chunk) -> str:
    """Two neighbouring chunks as context packing joins them (`cograg.retrieval.packing`)."""
    return a.text + b.text[a.end - b.start:] if b.start < a.end else a.text + "\n" + b.text


def count(path: Path, work: Path) -> dict[str, int]:
    """Chunks of the corpus at `path` (a file or folder) that the reading changes."""
    store = SQLiteStore(work)
    ingest_paths(store, [path], settings=Settings(models={"embedder": "none"}))
    row = {"documents": 0, "chunks": 0, "chunks_resplit": 0, "neighbour_pairs": 0, "neighbour_pairs_resplit": 0,
           "line_breaks": 0, "line_breaks_read_as_spaces": 0}
    for doc in store.list_documents():
        chunks = list(store.iter_chunks(doc.doc_id))
        row["documents"] += 1
        row["chunks"] += len(chunks)
        for c in chunks:
            row["line_breaks"] += c.text.count("\n")
            row["line_breaks_read_as_spaces"] += _wraps(c.text)
            row["chunks_resplit"] += _resplit(c.text)
        row["neighbour_pairs"] += max(0, len(chunks) - 1)
        row["neighbour_pairs_resplit"] += sum(_resplit(_joined(a, b)) and not (_resplit(a.text) or _resplit(b.text))
                                              for a, b in zip(chunks, chunks[1:]))
    store.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hotpot = hotpot_to_beir(args.data / "hotpotqa_train100" / "hipporag_hotpotqa_train100.json",
                                args.data / "hotpotqa_train100" / "hipporag_hotpotqa_train100_corpus.json",
                                work / "hotpot-view")
        corpora = {"examples/corpus": REPO / "examples" / "corpus",
                   "hotpotqa_train100 (BEIR view)": hotpot / "corpus.jsonl",
                   "cmrc2018 beir/corpus.jsonl": args.data / "cmrc2018" / "beir" / "corpus.jsonl",
                   "tests/data/injection*": REPO / "tests" / "data"}
        rows = {name: count(path, work / f"store{n}") for n, (name, path) in enumerate(corpora.items())}
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("| corpus | documents | chunks | chunks read as other sentences | neighbour pairs (only) read so | "
          "line breaks read as spaces |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {r['documents']} | {r['chunks']} | {r['chunks_resplit']} | "
              f"{r['neighbour_pairs_resplit']} of {r['neighbour_pairs']} | "
              f"{r['line_breaks_read_as_spaces']} of {r['line_breaks']} |")

if __name__ == "__main__":
    main()
