"""Calibrate `answer.min_evidence_rerank`, the refusal floor used when a reranker is configured (#12).

With `retrieval.reranker` set, the answer path's refusal gate (`Answerer._evidence_ok`, SPEC C4)
compares the best *reranker* score of the admitted chunks with `answer.min_evidence_rerank` instead
of the cosine floors. The only reranker the embedded models provide is `llm`
(`LLMRelevanceReranker`: the configured LLM rates each candidate 0–10, scores on [0, 1]), so this
script calibrates the floor for it; a cross-encoder's sigmoid scale would need its own run
(`--reranker cross-encoder:DIR`).

Questions and stores are those of `benchmarks/calibrate_floors.py` (the same split rule, the same
four sources: answerable, written unanswerable, unseen passages, gold removed), each asked through the
answerer's own search with the reranker on. Criterion: the floor of a 0.05 grid (0.00 … 1.00) with
the best balanced accuracy, chosen on **calibration** rows only (both languages together: the
reranker's scale does not depend on the language the way e5's cosines do); the evaluation split's
admit/refuse rates are reported for the old floor (0.30) and the chosen one.

An LLM rating per candidate is slow on CPU (`--candidates` × one model call per question), so the
run takes a sample: `--limit` questions per source and split.

    .venv/bin/python benchmarks/calibrate_rerank_floor.py [--llm fast] [--candidates 6] [--limit 3] [--write-docs]

Per-question scores: benchmarks/results/rerank-floor-<split>.jsonl; summary: rerank-floor.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from calibrate_floors import (
    REPO,
    SOURCES,
    Probe,
    Scored,
    choose_floor,
    open_stores,
    probes,
)

from cograg.config import Settings
from cograg.engine import Engine

GRID = [round(0.05 * i, 2) for i in range(21)]  # 0.00 … 1.00
OLD_FLOOR = 0.30


def reranking_engines(work: Path, names: list[str], llm: str, reranker: str, candidates: int) -> dict[str, Engine]:
    """The calibration stores (already built by `open_stores`) reopened with the reranker on."""
    return {name: Engine.open(settings=Settings(
        store=work / name, llm=llm, reranker=reranker, retrieval={"rerank_candidates": candidates},
        verification={"judge": "lexical"})) for name in names}


def score(engines: dict[str, Engine], items: list[Probe]) -> list[Scored]:
    rows = []
    searches = {name: eng.answerer().search for name, eng in engines.items()}
    t0 = time.perf_counter()
    for n, p in enumerate(items, start=1):
        result = searches[p.store](p.question)
        reranked = (result.evidence_source or "").startswith("reranker")
        rows.append(Scored(**p.model_dump(), score=result.evidence_score if reranked else None,
                           evidence_source=result.evidence_source, hits=len(result.hits)))
        print(f"  {p.split} {n}/{len(items)} {p.source:<15} {rows[-1].score!s:<5} "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return rows


def rates(rows: list[Scored], floor: float) -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for source in SOURCES:
        mine = [r for r in rows if r.source == source and r.score is not None]
        if mine:
            admitted = sum(r.score >= floor for r in mine)  # type: ignore[operator]
            out[source] = round((admitted if source == "answerable" else len(mine) - admitted) / len(mine), 3)
            out[f"{source}.n"] = len(mine)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--llm", default="fast", help="the reranking LLM: fast | default | gguf:PATH | openai:URL")
    ap.add_argument("--reranker", default="llm")
    ap.add_argument("--candidates", type=int, default=6, help="retrieval.rerank_candidates")
    ap.add_argument("--limit", type=int, default=3, help="questions per source and split")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    splits = ("calibration", "evaluation")
    for eng in open_stores(args.data, args.work, splits).values():  # builds missing stores, no model
        eng.close()
    items = {s: probes(args.data, s, args.limit) for s in splits}
    names = sorted({p.store for s in splits for p in items[s]})
    engines = reranking_engines(args.work, names, args.llm, args.reranker, args.candidates)
    results = REPO / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    scored = {}
    for split in splits:
        scored[split] = score(engines, items[split])
        with open(results / f"rerank-floor-{split}.jsonl", "w", encoding="utf-8") as fh:
            for r in scored[split]:
                fh.write(json.dumps({"id": r.id, "source": r.source, "store": r.store, "lang": r.lang,
                                     "score": r.score}, ensure_ascii=False) + "\n")
    for eng in engines.values():
        eng.close()
    cal = [r for r in scored["calibration"] if r.score is not None]
    negatives: dict[str, list[float]] = {}
    for r in cal:
        if not r.answerable:
            negatives.setdefault(r.source, []).append(r.score)  # type: ignore[arg-type]
    chosen = choose_floor([r.score for r in cal if r.answerable], negatives, grid=GRID)  # type: ignore[misc]
    old, new = rates(scored["evaluation"], OLD_FLOOR), rates(scored["evaluation"], chosen.floor)
    summary = {"reranker": args.reranker, "llm": args.llm, "rerank_candidates": args.candidates,
               "limit_per_source": args.limit, "grid": [GRID[0], GRID[-1], 0.05], "chosen": chosen.model_dump(),
               "calibration_rates": rates(cal, chosen.floor),
               "evaluation": {"old": {"floor": OLD_FLOOR, "rates": old}, "new": {"floor": chosen.floor, "rates": new}},
               "calibration_answerable_median": statistics.median([r.score for r in cal if r.answerable] or [0])}
    (results / "rerank-floor.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n",
                                               encoding="utf-8")
    table = render(chosen.floor, summary)
    print(table)
    print(f"--set answer.min_evidence_rerank={chosen.floor}")
    if args.write_docs:
        from benchmarks_common import write_section

        write_section(REPO / "docs" / "benchmarks.md", "## Reranker refusal floor", DOC_HEAD.format(
            llm=args.llm, candidates=args.candidates, limit=args.limit) + table)


def render(floor: float, summary: dict) -> str:
    cal = summary["calibration_rates"]
    lines = [f"Chosen on the calibration split: **{floor}** (balanced accuracy "
             f"{summary['chosen']['balanced_accuracy']:.3f}).", "",
             "| split | measure | questions | floor 0.30 (before) | chosen floor |", "|---|---|---:|---:|---:|"]
    for source in SOURCES:
        if source in cal:
            lines.append(f"| calibration | {source} {'admitted' if source == 'answerable' else 'refused'} "
                         f"| {cal[source + '.n']} | — | {cal[source]:.3f} |")
    old, new = summary["evaluation"]["old"]["rates"], summary["evaluation"]["new"]["rates"]
    for source in SOURCES:
        if source in new:
            lines.append(f"| evaluation | {source} {'admitted' if source == 'answerable' else 'refused'} "
                         f"| {new[source + '.n']} | {old[source]:.3f} | {new[source]:.3f} |")
    return "\n".join(lines) + "\n"


DOC_HEAD = """## Reranker refusal floor (calibration split → evaluation split)

Command: `.venv/bin/python benchmarks/calibrate_rerank_floor.py --llm {llm} --candidates {candidates}
--limit {limit} --write-docs`. With `retrieval.reranker` set, the refusal gate compares the best reranker
score with `answer.min_evidence_rerank`. The embedded reranker is `llm` (the LLM rates each candidate
0–10 with constrained JSON, scores on [0, 1]); here with the `{llm}` model and {candidates} candidates
per question. Questions and stores: those of the cosine floors above (four sources, split rule of
`cograg/eval/splits.py`), a sample of {limit} questions per source and split because one rating per
candidate is slow on 2 cores. Criterion: best balanced accuracy on a 0.05 grid, both languages together,
chosen on calibration rows only; ties toward admitting.

"""


if __name__ == "__main__":
    main()
