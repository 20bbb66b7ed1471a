"""Retrieval evaluation on BEIR-format folders (SPEC H): nDCG@10, Recall@10/100, MRR@10 per mode.

The corpus is ingested as one JSONL document whose records keep their BEIR `_id`; chunk hits are
mapped back to record ids (first occurrence wins) before scoring, so long passages split into
several chunks are judged as the passage they came from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from cograg.errors import CogragError
from cograg.eval.records import load_objects, read_text, shown, text_problem
from cograg.retrieval.models import SearchMode, SearchRequest


class BeirData(BaseModel):
    corpus: Path
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def check_beir_folder(d: Path) -> None:
    """A one-line error where `d` is no folder at all (missing, or a file in its place)."""
    if not d.is_dir():
        raise CogragError(f"{d} is a file, not a BEIR folder" if d.exists() else f"no such folder {d}")


def load_beir(directory: Path | str, split: str) -> BeirData:
    d = Path(directory)
    check_beir_folder(d)
    corpus, queries_file, qrels_file = d / "corpus.jsonl", d / "queries.jsonl", d / "qrels" / f"{split}.tsv"
    for f in (corpus, queries_file, qrels_file):
        if not f.is_file():
            raise CogragError(f"not a BEIR folder: missing {f}")
    qrels = load_qrels(qrels_file)
    queries = {qid: text for qid, text in load_queries(queries_file).items() if qid in qrels}
    if not queries:
        raise CogragError(f"no queries of split {split!r} have relevance judgements")
    return BeirData(corpus=corpus, queries=queries, qrels=qrels)


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query id -> corpus id -> relevance, from `query-id<TAB>corpus-id<TAB>score` rows under an
    optional header. A row of another shape is an error: skipping it would score its query as if
    nothing were relevant."""
    qrels: dict[str, dict[str, int]] = {}
    for line_no, line in enumerate(read_text(path, "qrels file").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            raise CogragError(f"{path} line {line_no}: not query-id, corpus-id and score separated by tabs")
        try:
            score = int(parts[2])
        except ValueError:
            if line_no == 1:
                continue  # the header
            raise CogragError(f"{path} line {line_no}: score {shown(parts[2])} is not a whole number") from None
        qrels.setdefault(parts[0], {})[parts[1]] = score
    return qrels


def load_queries(path: Path) -> dict[str, str]:
    """query id -> text, from JSON lines `{"_id", "text"}`."""
    return {str(rec["_id"]): rec["text"] for rec in load_objects(path, _query_problem, "queries file")}


def _query_problem(rec: dict[str, Any]) -> str | None:
    # an id the qrels cannot name (a list, a bool) or a text the search cannot read
    if "_id" not in rec or "text" not in rec:
        return "a query needs _id and text"
    qid = rec["_id"]
    if isinstance(qid, bool) or not isinstance(qid, str | int) or not str(qid).strip():
        return f"_id must be a non-empty string (got {shown(qid)})"
    return text_problem(rec, "text")


def ndcg_at_k(ranked: list[str], rels: dict[str, int], k: int = 10) -> float:
    dcg = sum((2 ** rels.get(doc, 0) - 1) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    idcg = sum((2 ** r - 1) / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: list[str], rels: dict[str, int], k: int) -> float:
    relevant = {d for d, r in rels.items() if r > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at_k(ranked: list[str], rels: dict[str, int], k: int = 10) -> float:
    for i, doc in enumerate(ranked[:k]):
        if rels.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def record_ranking(record_ids: Iterable[str | None]) -> list[str]:
    seen: dict[str, None] = {}
    for rid in record_ids:
        if rid is not None and rid not in seen:
            seen[rid] = None
    return list(seen)


def evaluate(search: Callable[[SearchRequest], list[str | None]], data: BeirData,
             modes: Iterable[SearchMode], *, limit: int | None = None,
             progress: Callable[[str, int, int], None] | None = None,
             request_options: dict[str, object] | None = None, query_split: str = "all",
             rows: list[dict[str, object]] | None = None) -> dict[str, object]:
    """Score `search` (request → record ids of the hits, best first) for each mode, on the
    queries of `query_split` (cograg.eval.splits: calibration, evaluation or all). With `rows`,
    one row per query and mode is appended to it (`ok`: a relevant record in the top 10)."""
    from cograg.eval.splits import select_ids

    qids = select_ids(sorted(data.queries), query_split)
    qids = qids[:limit] if limit else qids
    report: dict[str, object] = {}
    for mode in modes:
        sums = {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
        for i, qid in enumerate(qids, start=1):
            ranked = record_ranking(search(SearchRequest(query=data.queries[qid], k=300, retrieve_k=200,
                                                         mode=mode, rerank=False, **(request_options or {}))))
            rels = data.qrels[qid]
            scores = {"ndcg@10": ndcg_at_k(ranked, rels, 10), "recall@10": recall_at_k(ranked, rels, 10),
                      "recall@100": recall_at_k(ranked, rels, 100), "mrr@10": mrr_at_k(ranked, rels, 10)}
            for key, value in scores.items():
                sums[key] += value
            if rows is not None:
                rows.append({"id": qid, "group": mode, **{k: round(v, 4) for k, v in scores.items()},
                             "ok": scores["recall@10"] > 0})
            if progress:
                progress(mode, i, len(qids))
        report[mode] = {k: round(v / len(qids), 4) if qids else 0.0 for k, v in sums.items()}
    report["queries"] = len(qids)
    return report


def hotpot_to_beir(question_file: Path | str, corpus_file: Path | str, out_dir: Path | str) -> Path:
    """BEIR view of a HotpotQA sample: each paragraph a corpus record (title + sentences), each
    question a query, its supporting paragraphs the qrels (split `train`)."""
    questions = json.loads(Path(question_file).read_text(encoding="utf-8"))
    corpus = json.loads(Path(corpus_file).read_text(encoding="utf-8"))
    out = Path(out_dir)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    ids = {title: f"P{i:04d}" for i, title in enumerate(corpus)}
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for title, sentences in corpus.items():
            text = "".join(sentences).strip() if isinstance(sentences, list) else str(sentences)
            fh.write(json.dumps({"_id": ids[title], "title": title, "text": text}, ensure_ascii=False) + "\n")
    with open(out / "queries.jsonl", "w", encoding="utf-8") as qf, \
            open(out / "qrels" / "train.tsv", "w", encoding="utf-8") as rf:
        rf.write("query-id\tcorpus-id\tscore\n")
        for q in questions:
            qf.write(json.dumps({"_id": q["_id"], "text": q["question"]}, ensure_ascii=False) + "\n")
            for title in sorted({t for t, _ in q["supporting_facts"]}):
                if title in ids:
                    rf.write(f"{q['_id']}\t{ids[title]}\t1\n")
    return out
