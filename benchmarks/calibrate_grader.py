"""Calibrate R2's document grader on the calibration split of HotpotQA train100 (issue #11).

For each calibration question (src/cograg/eval/splits.py: the first half by SHA-256 of
"hotpotqa_train100:<_id>"; never the evaluation half) the script searches the HotpotQA store as R2
does, grades the first `grade_top_k` hits with the real `DocumentGrader` (prompt `grade_document`,
latest version) and records each verdict next to whether the hit is a gold supporting paragraph.
From those rows it picks:

- `control.grade_min_confidence`: the confidence a relevant verdict needs to pass, the value of a
  grid (0.30 … 0.95) with the best F1 of "passed" against "gold paragraph" (ties: the lower value);
- `control.grade_pass_threshold`: the pass rate below which the loop rewrites the query, the value
  with the best balanced accuracy of "pass rate ≥ threshold" against "every gold paragraph of the
  question is among the graded hits" (a rewrite is worth its time only when something is missing).

It also reports how often nothing passed while the first search's evidence cleared the refusal
floor (R2 then answers from the retrieved documents) and how many of those had a gold paragraph.

    .venv/bin/python benchmarks/calibrate_grader.py --model default [--n 50] [--retrieve-hits 10]

Rows stream to benchmarks/results/grader-calibration-<model>.jsonl (a re-run resumes); the summary
prints the two `--set` options to use. Slow: one model call per graded hit (5 per question).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import AnswerConfig, ControlBudget, Settings  # noqa: E402
from cograg.control.corrective import DocumentGrader  # noqa: E402
from cograg.eval.retrieval import hotpot_to_beir  # noqa: E402
from cograg.eval.splits import hotpotqa_train100  # noqa: E402

CONFIDENCE_GRID = [round(0.30 + 0.05 * i, 2) for i in range(14)]  # 0.30 … 0.95
PASS_RATE_GRID = [round(0.1 * i, 1) for i in range(1, 11)]  # 0.1 … 1.0


def f1(tp: int, fp: int, fn: int) -> float:
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def choose_confidence(grades: list[dict]) -> tuple[float, list[dict]]:
    table = []
    for t in CONFIDENCE_GRID:
        passed = [g["is_relevant"] and g["confidence"] >= t and g["error"] is None for g in grades]
        tp = sum(p and g["gold"] for p, g in zip(passed, grades, strict=True))
        fp = sum(p and not g["gold"] for p, g in zip(passed, grades, strict=True))
        fn = sum(not p and g["gold"] for p, g in zip(passed, grades, strict=True))
        table.append({"threshold": t, "precision": round(tp / max(1, tp + fp), 3),
                      "recall": round(tp / max(1, tp + fn), 3), "f1": round(f1(tp, fp, fn), 3)})
    best = max(table, key=lambda r: (r["f1"], -r["threshold"]))
    return best["threshold"], table


def choose_pass_rate(questions: list[dict], min_confidence: float) -> tuple[float, list[dict]]:
    table = []
    for t in PASS_RATE_GRID:
        hit = {True: [0, 0], False: [0, 0]}  # complete? -> [predicted right, count]
        for q in questions:
            rate = (sum(g["is_relevant"] and g["confidence"] >= min_confidence and g["error"] is None
                        for g in q["grades"]) / max(1, len(q["grades"])))
            complete = q["gold_graded"] == q["gold_total"]
            hit[complete][0] += (rate >= t) == complete
            hit[complete][1] += 1
        parts = [right / n for right, n in hit.values() if n]
        table.append({"threshold": t, "balanced_accuracy": round(sum(parts) / max(1, len(parts)), 3)})
    best = max(table, key=lambda r: (r["balanced_accuracy"], -r["threshold"]))
    return best["threshold"], table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--model", "--profile", default="default")
    ap.add_argument("--n", type=int, default=50, help="calibration questions to grade (of 50)")
    ap.add_argument("--retrieve-hits", type=int, default=10, help="as benchmarks/control.py")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--summarise-only", action="store_true")
    args = ap.parse_args()
    data = args.data / "hotpotqa_train100"
    qs = hotpotqa_train100(data / "hipporag_hotpotqa_train100.json", "calibration")[:args.n]
    out_file = REPO / "benchmarks" / "results" / f"grader-calibration-{args.model}.jsonl"
    out_file.parent.mkdir(exist_ok=True)
    done = {}
    if out_file.exists():
        done = {r["id"]: r for r in (json.loads(line) for line in open(out_file, encoding="utf-8"))}
    budget = ControlBudget()
    answer = AnswerConfig(retrieve_hits=args.retrieve_hits)
    if not args.summarise_only and any(q["_id"] not in done for q in qs):
        from cograg.engine import Engine

        hot = hotpot_to_beir(data / "hipporag_hotpotqa_train100.json", data / "hipporag_hotpotqa_train100_corpus.json",
                             args.work / "hotpot_beir")
        eng = Engine.open(settings=Settings(store=args.work / "hotpotqa", llm=args.model,
                                            model_cache=args.work / "models"))
        eng.ingest([hot / "corpus.jsonl"])
        grader = DocumentGrader(eng.components.llm.get(), timeout_s=answer.llm_timeout_s)
        titles = {t: f"P{i:04d}" for i, t in enumerate(json.loads(
            (data / "hipporag_hotpotqa_train100_corpus.json").read_text(encoding="utf-8")))}
        with open(out_file, "a", encoding="utf-8") as fh:
            for i, q in enumerate(qs, start=1):
                if q["_id"] in done:
                    continue
                gold = {titles[t] for t, _ in q["supporting_facts"] if t in titles}
                t0 = time.perf_counter()
                result = eng.search(q["question"], k=answer.retrieve_hits, mode="hybrid")
                grades = []
                for h in result.hits[:budget.grade_top_k]:
                    chunk = eng.store.get_chunk(h.chunk_id)
                    record = str(chunk.metadata.get("record_id")) if chunk else ""
                    g = grader.grade(q["question"], h)
                    grades.append({"chunk_id": h.chunk_id, "record": record, "gold": record in gold,
                                   "is_relevant": g.is_relevant, "confidence": g.confidence, "error": g.error,
                                   "reasoning": g.reasoning})
                floor = answer.evidence_floor(chinese=False, source=result.evidence_source)
                row = {"id": q["_id"], "question": q["question"], "type": q["type"], "grades": grades,
                       "gold_total": len(gold), "gold_graded": sum(g["gold"] for g in grades),
                       "evidence_score": result.evidence_score, "evidence_floor": floor,
                       "seconds": round(time.perf_counter() - t0, 1)}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                fh.flush()
                done[q["_id"]] = row
                print(f"[{i}/{len(qs)}] {row['seconds']}s gold {row['gold_graded']}/{row['gold_total']} graded, "
                      f"relevant {sum(g['is_relevant'] for g in grades)}/{len(grades)} {q['question'][:60]}",
                      flush=True)
        eng.close()
    rows = [done[q["_id"]] for q in qs if q["_id"] in done]
    if not rows:
        print("no calibration rows yet")
        return
    grades = [g for r in rows for g in r["grades"]]
    conf, conf_table = choose_confidence(grades)
    rate, rate_table = choose_pass_rate(rows, conf)
    none_passed = [r for r in rows if not any(g["is_relevant"] and g["confidence"] >= conf and g["error"] is None
                                              for g in r["grades"])]
    overridden = [r for r in none_passed if r["evidence_score"] is not None and r["evidence_score"] >= r["evidence_floor"]]
    print(f"calibration split: {len(rows)} questions, {len(grades)} graded hits, "
          f"{sum(g['gold'] for g in grades)} of them gold; model profile {args.model}")
    print("grade_min_confidence grid:", json.dumps(conf_table))
    print("grade_pass_threshold grid:", json.dumps(rate_table))
    print(f"nothing passed at {conf}: {len(none_passed)} questions; of these {len(overridden)} clear the refusal "
          f"floor (R2 answers from the retrieved documents), {sum(r['gold_graded'] > 0 for r in overridden)} "
          "with a gold paragraph among them")
    print(f"chosen: --set control.grade_min_confidence={conf} --set control.grade_pass_threshold={rate}  "
          f"(benchmarks/control.py: --budget grade_min_confidence={conf} --budget grade_pass_threshold={rate})")


if __name__ == "__main__":
    main()
