"""Where the router sends HotpotQA's two-entity comparison questions (rule table `comparison_one_search`),
or with `--type bridge` its bridge questions.

Every comparison question of hotpotqa_train100, routed by the rules with the preflight search of a
real turn (hybrid, `answer.retrieve_hits` hits, the store of `benchmarks/control.py`): how many go to
R1 (one search clears the refusal floor and names both entities in R1's hits) and how many to R3.
With `--rows` (the JSON lines of `benchmarks/control.py --type comparison --modes R1,R3`), the
questions measured there are scored as routed: each takes the row of the mode the router picks now.
No model runs here.

    .venv/bin/python benchmarks/comparison_routing.py [--rows benchmarks/results/control-default-comparison.jsonl]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import Settings  # noqa: E402
from cograg.control.router import Router, load_rules  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.eval.retrieval import hotpot_to_beir  # noqa: E402
from cograg.eval.splits import split_of  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--rows", type=Path, default=None)
    ap.add_argument("--type", choices=["comparison", "bridge"], default="comparison",
                    help="HotpotQA question type to route (bridge: also lists the questions sent to R3)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    data = args.data / "hotpotqa_train100"
    questions = [q for q in json.loads((data / "hipporag_hotpotqa_train100.json").read_text(encoding="utf-8"))
                 if q["type"] == args.type]
    settings = Settings(store=args.work / "hotpotqa")
    modes: dict[str, str] = {}
    counts: Counter[tuple[str, str]] = Counter()
    with Engine.open(settings=settings) as eng:
        if not eng.store.list_documents():
            beir = hotpot_to_beir(data / "hipporag_hotpotqa_train100.json",
                                  data / "hipporag_hotpotqa_train100_corpus.json", args.work / "hotpot_beir")
            eng.ingest([beir / "corpus.jsonl"])
        router = Router(load_rules(), search=lambda q: eng.retrieve(q, k=settings.answer.retrieve_hits, mode="hybrid"),
                        floors=settings.answer)
        for q in questions:
            decision = router.route(q["question"])
            modes[q["question"]] = decision.mode
            counts[(split_of(q), decision.mode)] += 1
    report: dict = {"type": args.type, "questions": len(questions), "rules": load_rules().version,
                    "modes": {f"{s} {m}": n for (s, m), n in sorted(counts.items())}}
    if args.type == "bridge":
        report["to_R3"] = {split_of(q): [] for q in questions}
        for q in questions:
            if modes[q["question"]] == "R3_DAG_PLAN":
                report["to_R3"][split_of(q)].append(q["_id"])
    if args.rows:
        rows = [json.loads(line) for line in args.rows.read_text(encoding="utf-8").splitlines() if line.strip()]
        by_q: dict[str, dict[str, dict]] = {}
        for r in rows:
            by_q.setdefault(r["question"], {})[r["mode"]] = r
        routed = []
        for question, per_mode in by_q.items():
            mode = "R1" if modes.get(question) == "R1_ONE_SHOT_RETRIEVE" else "R3"
            if mode in per_mode:
                routed.append(per_mode[mode])
        report["as_routed"] = {
            "questions": len(routed), "routed_R1": sum(r["mode"] == "R1" for r in routed),
            "correct": sum(bool(r.get("correct")) for r in routed),
            "answered": sum(not r.get("fallback") for r in routed),
            "median_latency_s": round(statistics.median(r["latency_s"] for r in routed), 1) if routed else None}
    print(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
