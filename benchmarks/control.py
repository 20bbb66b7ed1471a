"""Multi-hop questions by execution mode (issue: control flow): R1 one-shot vs R2 self-corrective
vs R3 planned, same model, same store (the HotpotQA train100 paragraphs).

Per mode: supporting-paragraph recall@10, answer accuracy (a delivered answer contains the gold
answer: `cograg.eval.scoring.contains_gold`; a refusal is wrong), share answered (not refused),
median latency and tokens per answer.

Recall@10 is over the evidence each mode ranks first: R1 its one search; R2 the documents its
grader passed (most confident first), then everything else it retrieved in order; R3 its
sub-task searches interleaved round-robin (each hop's best hits first), then the rest.

    .venv/bin/python benchmarks/control.py --model fast --n 12 [--modes R1,R2,R3] [--write-docs]
    .venv/bin/python benchmarks/control.py --model fast --type comparison --n 10 [--no-templates]

`--split evaluation` takes the first N questions of the evaluation split (src/cograg/eval/splits.py;
the calibration split is what benchmarks/calibrate_grader.py tunes R2's grader on) instead of a
seeded sample of all 100; `--budget KEY=VALUE` (repeatable) sets a `control` setting, e.g. the
calibrated `grade_min_confidence`. R2 vs R1 on the evaluation split (issue #11):

    .venv/bin/python benchmarks/control.py --model default --split evaluation --n 50 --modes R1,R2 --write-docs

`--type comparison|bridge` draws only questions of that HotpotQA type; per mode it also records
whether R3 planned from a template (control/plan_templates.py) and how many model calls planning
took. `--no-templates` makes the LLM planner plan every R3 turn (control.plan_templates=false).

Rows stream to benchmarks/results/control-<model>[-<type>][-notemplates].jsonl; re-running resumes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.answer.answerer import AnswerConfig  # noqa: E402
from cograg.config import ControlBudget, Settings  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.eval.retrieval import hotpot_to_beir  # noqa: E402
from cograg.eval.scoring import contains_gold  # noqa: E402
from cograg.eval.splits import hotpotqa_train100  # noqa: E402
from cograg.orchestrator.orchestrator import TurnOptions  # noqa: E402

MODES = {"R1": "R1_ONE_SHOT_RETRIEVE", "R2": "R2_MULTI_RETRIEVE", "R3": "R3_DAG_PLAN"}


def ranked_evidence(mode: str, trace: dict) -> list[str]:
    searches = [s["chunk_ids"] for s in trace.get("searches", [])]
    first: list[str] = []
    if mode == "R2":
        first = list(trace.get("loop", {}).get("filtered_chunk_ids", []))
        rest = [c for s in searches for c in s]
    elif mode == "R3":
        rest = []
        for i in range(max((len(s) for s in searches), default=0)):
            rest += [s[i] for s in searches if i < len(s)]
    else:
        rest = searches[0] if searches else []
    return list(dict.fromkeys(first + rest))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--model", "--profile", default="fast")
    ap.add_argument("--type", choices=["comparison", "bridge"], default=None,
                    help="only questions of this HotpotQA type")
    ap.add_argument("--no-templates", action="store_true", help="R3 always asks the LLM planner")
    ap.add_argument("--modes", default="R1,R2,R3")
    ap.add_argument("--split", choices=["calibration", "evaluation"], default=None,
                    help="the first N questions of this split (eval/splits.py) instead of a seeded sample")
    ap.add_argument("--budget", action="append", default=[], metavar="KEY=VALUE",
                    help="a control setting for every turn, e.g. grade_min_confidence=0.7 (repeatable)")
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--summarise-only", action="store_true")
    ap.add_argument("--ids", default="", help="comma-separated HotpotQA ids: only these questions (e.g. the ones "
                                               "benchmarks/comparison_routing.py --type bridge lists as sent to R3)")
    ap.add_argument("--hits", type=int, default=10, help="answer.retrieve_hits of every turn (the default "
                                                         "settings use 6)")
    ap.add_argument("--tag", default="", help="appended to the rows file's name")
    args = ap.parse_args()
    data = args.data / "hotpotqa_train100"
    if args.split:
        questions = hotpotqa_train100(data / "hipporag_hotpotqa_train100.json", args.split)
    else:
        questions = json.loads((data / "hipporag_hotpotqa_train100.json").read_text(encoding="utf-8"))
    if args.type:
        questions = [q for q in questions if q["type"] == args.type]
    if args.ids:
        questions = [q for q in questions if q["_id"] in set(args.ids.split(","))]
    qs = (questions[:args.n] if args.split else random.Random(7).sample(questions, min(args.n, len(questions))))
    overrides = dict(kv.split("=", 1) for kv in args.budget)
    suffix = ((f"-{args.type}" if args.type else "") + ("-notemplates" if args.no_templates else "")
              + (f"-{args.split}" if args.split else "")
              + "".join(f"-{k}={v}" for k, v in sorted(overrides.items()))
              + (f"-hits{args.hits}" if args.hits != 10 else "") + (f"-{args.tag}" if args.tag else ""))
    out_file = REPO / "benchmarks" / "results" / f"control-{args.model}{suffix}.jsonl"
    out_file.parent.mkdir(exist_ok=True)
    done = {}
    if out_file.exists():
        for line in open(out_file, encoding="utf-8"):
            r = json.loads(line)
            done[(r["question"], r["mode"])] = r
    modes = args.modes.split(",")
    if not args.summarise_only:
        hot = hotpot_to_beir(data / "hipporag_hotpotqa_train100.json", data / "hipporag_hotpotqa_train100_corpus.json",
                             args.work / "hotpot_beir")
        eng = Engine.open(settings=Settings(store=args.work / "hotpotqa", llm=args.model, judge="llm",
                                            model_cache=args.work / "models"))
        eng.ingest([hot / "corpus.jsonl"])
        record_of: dict[str, str] = {}

        def record(chunk_id: str) -> str | None:
            if chunk_id not in record_of:
                c = eng.store.get_chunk(chunk_id)
                record_of[chunk_id] = str(c.metadata.get("record_id")) if c else ""
            return record_of[chunk_id]
        titles = {t: f"P{i:04d}" for i, t in enumerate(json.loads(
            (data / "hipporag_hotpotqa_train100_corpus.json").read_text(encoding="utf-8")))}
        with open(out_file, "a", encoding="utf-8") as fh:
            for i, q in enumerate(qs, start=1):
                gold = {titles[t] for t, _ in q["supporting_facts"] if t in titles}
                for m in modes:
                    if (q["question"], m) in done:
                        continue
                    opts = TurnOptions(answer=AnswerConfig(retrieve_hits=args.hits), force_mode=MODES[m],
                                       use_llm_router=False,
                                       budget=ControlBudget(plan_templates=not args.no_templates, **overrides))
                    t0 = time.perf_counter()
                    resp = eng.ask(q["question"], options=opts)
                    latency = time.perf_counter() - t0
                    trace = eng.trace(resp.trace_id)
                    evidence = [record(c) for c in ranked_evidence(m, trace)][:10]
                    row = {"question": q["question"], "mode": m, "gold": q["answer"], "answer": resp.answer,
                           "final_mode": resp.mode, "fallback": resp.fallback,
                           "correct": not resp.fallback and contains_gold([q["answer"]], resp.answer),
                           "recall@10": len(gold & set(evidence)) / max(1, len(gold)),
                           "latency_s": round(latency, 2),
                           "tokens": sum(c["prompt_tokens"] + c["completion_tokens"] for c in trace["model_calls"]),
                           "model_calls": len(trace["model_calls"]),
                           "plan_calls": sum(c["purpose"] == "plan" for c in trace["model_calls"]),
                           "template": ((trace.get("plan") or {}).get("outcome") or {}).get("template"),
                           "type": q["type"], "trace_id": resp.trace_id}
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                    fh.flush()
                    done[(q["question"], m)] = row
                    print(f"[{i}/{len(qs)} {m}] {latency:.0f}s correct={row['correct']} recall={row['recall@10']:.2f} "
                          f"final={resp.mode} template={row['template']} calls={row['model_calls']} "
                          f"{q['question'][:60]}", flush=True)
        eng.close()
    wanted = {q["question"] for q in qs}
    # a typed run has a section of its own (a heading that is no prefix of the untyped one)
    heading = (f"## Control flow on {args.type} questions{', LLM planner only' if args.no_templates else ''}"
               if args.type else "## Control flow: R1 vs R2 vs R3")
    if args.split:
        heading = f"## Control flow on the HotpotQA {args.split} split"
    drawn = (f"the first {len(qs)} questions of the {args.split} split (src/cograg/eval/splits.py)" if args.split
             else f"{len(qs)} {args.type or ''} questions drawn with seed 7")
    lines = [heading if args.type or args.split else "## Control flow: R1 vs R2 vs R3 on multi-hop questions", "",
             f"Command: `.venv/bin/python benchmarks/control.py --model {args.model} --n {args.n}"
             f"{' --type ' + args.type if args.type else ''}{' --no-templates' if args.no_templates else ''}"
             f"{' --split ' + args.split if args.split else ''} --modes {args.modes}"
             f"{' --hits ' + str(args.hits) if args.hits != 10 else ''}{' --ids <' + str(len(qs)) + ' ids>' if args.ids else ''}"
             f"{''.join(' --budget ' + kv for kv in args.budget)} --write-docs`  ",
             f"Store: the 994 HotpotQA train100 paragraphs; {drawn}; "
             f"model profile "
             f"`{args.model}` for every call of every mode (router bypassed with a forced mode; judge: the same "
             "model). Recall@10: share of the gold supporting paragraphs among the first 10 paragraphs of the "
             "evidence each mode ranks first (see the script's docstring). Accuracy: the delivered (not refused) "
             f"answer contains the gold answer. Rows: `{out_file.relative_to(REPO)}`.", "",
             "| mode | questions | supporting-paragraph recall@10 | answer accuracy | answered | fell back to another mode "
             "| median latency s | median tokens | median model calls | planned by a template | planning calls |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in modes:
        rows = [r for (qq, mm), r in done.items() if mm == m and qq in wanted]
        if not rows:
            continue
        lines.append(
            f"| {m} | {len(rows)} | {statistics.mean(r['recall@10'] for r in rows):.3f} | "
            f"{sum(r['correct'] for r in rows) / len(rows):.3f} | {sum(not r['fallback'] for r in rows) / len(rows):.2f} | "
            f"{sum(r['final_mode'] != MODES[m] for r in rows)} | {statistics.median(r['latency_s'] for r in rows):.1f} | "
            f"{int(statistics.median(r['tokens'] for r in rows))} | {int(statistics.median(r['model_calls'] for r in rows))} | "
            f"{sum(bool(r.get('template')) for r in rows)} | {sum(r.get('plan_calls', 0) for r in rows)} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.write_docs:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from benchmarks_common import write_section

        write_section(REPO / "docs" / "benchmarks.md", heading, table)


if __name__ == "__main__":
    main()
