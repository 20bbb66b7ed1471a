"""Fusion calibration and evaluation on the two development sets, splits kept apart.

Split rule: the project's one rule for every labelled set (`cograg.eval.splits`): a query is in the
**calibration** split when `int(sha256("cograg-split-v1:" + query_id)[:8], 16) / 2**32 < 1/3`,
otherwise in the **evaluation** split (the same split `cograg eval retrieval --split` uses).
Weights are chosen on the calibration half only; every figure this script reports is on the
evaluation half unless its row says otherwise.

Each query's BM25 and vector candidate lists (top 200 each, as `cograg eval retrieval` uses) are
computed once through the store; the fusion variants are then scored over the same lists with the
library's own fusion functions, so the comparison isolates the fusion.

    .venv/bin/python benchmarks/retrieval_fusion.py [--calibrate] [--prf] [--write-docs]

Stores: `.bench-stores/eval-cmrc_chunks` and `.bench-stores/eval-hotpot` (what
`benchmarks/retrieval_quality.py` builds), query vectors cached next to them.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from cograg.eval.retrieval import (hotpot_to_beir, load_beir, mrr_at_k, ndcg_at_k,  # noqa: E402
                                   recall_at_k, record_ranking)
from cograg.index.sqlite_store import SQLiteStore  # noqa: E402
from cograg.retrieval.adaptive_fusion import FusionCalibration, adaptive_fusion, convex_fusion  # noqa: E402
from cograg.index.term_stats import TermStats  # noqa: E402
from cograg.retrieval.feedback import FeedbackSettings, keyword_search_with_feedback  # noqa: E402
from cograg.retrieval.doc_aggregation import DocumentAggregation, aggregate  # noqa: E402
from cograg.retrieval.fusion import rrf  # noqa: E402
from cograg.eval.splits import SPLIT_RULE, split_of_id  # noqa: E402

Hits = list[tuple[int, float]]


def split_of(qid: str) -> str:
    """The project's one split rule (cograg.eval.splits): a third of the query ids calibrate."""
    return split_of_id(qid)


class Candidates:
    """Per query: BM25 and vector top lists (chunk rowid, score); rowid → BEIR record id."""

    def __init__(self, name: str, beir: Path, split: str, store_dir: Path, depth: int = 200,
                 prf: FeedbackSettings | None = None) -> None:
        data = load_beir(beir, split)
        self.name, self.queries, self.qrels = name, data.queries, data.qrels
        store = SQLiteStore(store_dir, create=False)
        if not store.has_vectors():
            raise SystemExit(f"{store_dir} has no vectors; run benchmarks/retrieval_quality.py first")
        meta = {int(r[0]): json.loads(r[1]) for r in store.conn.execute("SELECT id, metadata FROM chunks")}
        self.record = {rid: m.get("record_id") for rid, m in meta.items()}
        self.title = {rid: m.get("title") for rid, m in meta.items()}  # the passage a chunk belongs to
        qvec_file = store_dir.parent / f"qvecs-{name}.npy"
        qids = sorted(self.queries)
        if qvec_file.exists():
            qvecs = np.load(qvec_file)
        else:
            from cograg.models.embedder import get_embedder

            qvecs = np.asarray(get_embedder("e5-small").embed_queries([self.queries[q].strip() for q in qids]),
                               dtype=np.float32)
            np.save(qvec_file, qvecs)
        stats = TermStats()
        self.bm25: dict[str, Hits] = {}
        self.vector: dict[str, Hits] = {}
        for qid, vec in zip(qids, qvecs):
            q = self.queries[qid].strip()
            self.bm25[qid] = (keyword_search_with_feedback(store, stats, q, depth, settings=prf) if prf is not None
                              else store.keyword_search(q, depth))
            self.vector[qid] = store.vector_search(vec, depth)
        store.close()

    def ids(self, half: str) -> list[str]:
        return [q for q in sorted(self.queries) if split_of(q) == half]

    def score(self, fuse: Callable[[str, Hits, Hits], list[int]], half: str) -> dict[str, float]:
        qids = self.ids(half)
        sums = {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
        for qid in qids:
            ranked = record_ranking(self.record.get(r) for r in fuse(self.queries[qid].strip(),
                                                                      self.bm25[qid], self.vector[qid]))
            rels = self.qrels[qid]
            sums["ndcg@10"] += ndcg_at_k(ranked, rels)
            sums["recall@10"] += recall_at_k(ranked, rels, 10)
            sums["recall@100"] += recall_at_k(ranked, rels, 100)
            sums["mrr@10"] += mrr_at_k(ranked, rels)
        return {k: round(v / len(qids), 4) for k, v in sums.items()} | {"queries": len(qids)}


def modes(cal: FusionCalibration, group: dict[int, str] | None = None) -> dict[str, Callable[[str, Hits, Hits], list[int]]]:
    extra: dict[str, Callable[[str, Hits, Hits], list[int]]] = {}
    if group is not None:
        extra["hybrid adaptive + document aggregation (by passage title)"] = lambda q, b, v: [
            r for r, _ in aggregate(adaptive_fusion(q, b, v, cal)[0], group, DocumentAggregation())]
    return extra | {
        "bm25": lambda q, b, v: [r for r, _ in b],
        "vector": lambda q, b, v: [r for r, _ in v],
        "hybrid rrf k=60": lambda q, b, v: [r for r, _ in rrf([[r for r, _ in b], [r for r, _ in v]], k=60)],
        "hybrid weighted 0.5": lambda q, b, v: [r for r, _ in convex_fusion(b, v, 0.5)],
        "hybrid adaptive (default)": lambda q, b, v: [r for r, _ in adaptive_fusion(q, b, v, cal)[0]],
    }


def calibrate(sets: list[Candidates]) -> tuple[FusionCalibration, list[dict]]:
    """Grid search on the calibration halves: a base weight per language; one shared gain and
    normalisation (the mean over the sets decides, so the small set is not drowned by the big one)."""
    langs = {"cmrc_chunks": "zh", "hotpot": "en"}
    grid_base = [round(x, 2) for x in np.arange(0.2, 0.85, 0.05)]
    grid_gain = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    log: list[dict] = []
    best: tuple[float, float, str, dict[str, float]] | None = None
    for normalisation in ("minmax", "zscore"):
        for gain in grid_gain:
            bases: dict[str, float] = {}
            total = 0.0
            for s in sets:
                scored = []
                for base in grid_base:
                    cal = FusionCalibration(base_vector_weight={langs[s.name]: base}, confidence_gain=gain,
                                            normalisation=normalisation)  # type: ignore[arg-type]
                    nd = s.score(lambda q, b, v: [r for r, _ in adaptive_fusion(q, b, v, cal)[0]],
                                 "calibration")["ndcg@10"]
                    scored.append((nd, base))
                    log.append({"set": s.name, "normalisation": normalisation, "gain": gain, "base": base,
                                "ndcg@10": nd})
                nd, base = max(scored)
                bases[langs[s.name]] = base
                total += nd
            mean = total / len(sets)
            if best is None or mean > best[0] + 1e-9:
                best = (mean, gain, normalisation, bases)
    assert best is not None
    _, gain, normalisation, bases = best
    return FusionCalibration(base_vector_weight=bases, confidence_gain=gain,
                             normalisation=normalisation), log  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--calibrate", action="store_true", help="grid-search the weights on the calibration halves")
    ap.add_argument("--prf", action="store_true", help="also measure BM25 with pseudo-relevance feedback")
    ap.add_argument("--sets", default="cmrc_chunks,hotpot", help="which development sets (comma-separated)")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    hot = hotpot_to_beir(args.data / "hotpotqa_train100/hipporag_hotpotqa_train100.json",
                         args.data / "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json",
                         args.work / "hotpot_beir")
    specs = [("cmrc_chunks", "cmrc2018/beir_chunks (zh), split dev", args.data / "cmrc2018/beir_chunks", "dev"),
             ("hotpot", "hotpotqa_train100 BEIR view (en), split train", hot, "train")]
    specs = [s for s in specs if s[0] in args.sets.split(",")]
    t0 = time.perf_counter()
    sets = [Candidates(name, beir, split, args.work / f"eval-{name}") for name, _, beir, split in specs]
    print(f"candidates in {time.perf_counter() - t0:.1f}s", flush=True)
    cal = FusionCalibration()
    if args.calibrate:
        cal, log = calibrate(sets)
        (args.work / "fusion-calibration.json").write_text(json.dumps({"chosen": cal.model_dump(), "grid": log}))
        print("calibrated:", cal.model_dump_json(), flush=True)
    rows = []
    for (name, label, _, _), s in zip(specs, sets):
        for half in ("evaluation", "calibration"):
            for mode, fuse in modes(cal, s.title if half == "evaluation" else None).items():
                r = s.score(fuse, half)
                rows.append({"set": label, "half": half, "mode": mode, **r})
                print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    if args.prf:
        for (name, label, beir, split), s in zip(specs, sets):
            p = Candidates(name, beir, split, args.work / f"eval-{name}", prf=FeedbackSettings())
            for half in ("evaluation",):
                for mode in ("bm25", "hybrid adaptive (default)"):
                    r = p.score(modes(cal)[mode], half)
                    rows.append({"set": label, "half": half, "mode": mode + " + PRF", **r})
                    print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    table = ["| data set | half (queries) | mode | nDCG@10 | Recall@10 | Recall@100 | MRR@10 |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        if r["half"] == "evaluation":
            table.append(f"| {r['set']} | {r['half']} ({r['queries']}) | {r['mode']} | {r['ndcg@10']:.4f} | "
                         f"{r['recall@10']:.4f} | {r['recall@100']:.4f} | {r['mrr@10']:.4f} |")
    gaps = []
    for label in {r["set"] for r in rows}:
        ev = {r["mode"]: r for r in rows if r["set"] == label and r["half"] == "evaluation"}
        best_half = max(ev["bm25"]["ndcg@10"], ev["vector"]["ndcg@10"])
        gaps.append(f"{label}: adaptive − max(bm25, vector) = "
                    f"{ev['hybrid adaptive (default)']['ndcg@10'] - best_half:+.4f}, "
                    f"RRF − max = {ev['hybrid rrf k=60']['ndcg@10'] - best_half:+.4f}")
    text = "\n".join(table)
    print(text)
    print("\n".join(gaps))
    if args.write_docs:
        from benchmarks_common import write_section

        section = (
            "## Retrieval fusion (calibrated, evaluation half)\n\n"
            f"Command: `.venv/bin/python benchmarks/retrieval_fusion.py{' --calibrate' if args.calibrate else ''}"
            f"{' --prf' if args.prf else ''} --write-docs`  \n"
            f"Run {datetime.now(UTC).date()}, Python {platform.python_version()}. Split rule: a query is in the "
            f"calibration split by the project's split rule ({SPLIT_RULE}), else in the evaluation split; the weights "
            "were chosen on the calibration half only and every figure below is on the **evaluation half**. "
            "Candidates: BM25 (SQLite FTS5) and e5-small vectors, top 200 each; chunk hits mapped to BEIR records.  \n"
            f"Adaptive fusion calibration: `{cal.model_dump_json()}`\n\n" + text + "\n\n" + "\n".join(
                f"- {g}" for g in gaps) + "\n")
        write_section(REPO / "docs" / "benchmarks.md", "## Retrieval fusion (calibrated, evaluation half)", section)


if __name__ == "__main__":
    main()
