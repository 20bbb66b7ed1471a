"""Multi-hop support recall on hotpotqa_train100: one-shot retrieval vs the planner's sub-question
retrieval vs the corrective loop's rewrites.

Support recall@10 = share of questions with **both** gold paragraphs among the 10 passages the
route retrieved (and, softer, the share of gold paragraphs found). Corpus: the 994 paragraphs of
the BEIR view (`cograg.eval.retrieval.hotpot_to_beir`), store `.bench-stores/eval-hotpot`.

Without `--llm` (deterministic, no model): one-shot hybrid search of the question vs the R3 plan
templates' retrieve sub-tasks (`control/plan_templates.py`), for the questions a template plans.
Sub-question rankings are merged by RRF and cut at 10, so both routes get the same 10 passages;
the union of each hop's own top 10 (what the executor's nodes see) is reported too.

With `--llm` (needs the answer model; the fast profile is fine, about a minute per question on two
cores): every question is asked through `Engine.ask` with the route forced to R2 (corrective loop)
and to R3 (planner); each turn's trace lists every search it ran (`trace.searches`), whose hits
are merged by RRF in search order and cut at 10.

The route a turn actually took is recorded too: when R3 cannot plan it falls back to R2 (then R1),
and the row keeps the searches of the mode that answered, as a user would get them. Each search of
an asked turn returns `answer.retrieve_hits` (6) hits, so "one-shot hybrid, top 6" is listed next to
the top 10 (what R1 answers from). The set is chosen before any model runs: `--type` keeps one
HotpotQA question type, `--only-missed` the questions whose one-shot top 10 lacks a gold paragraph
(picked by one-shot alone, never by how a route does). `--llm` rows stream to `--results` (JSON
lines, one per question and route) and a re-run skips the (question, route) pairs already there.

    .venv/bin/python benchmarks/retrieval_multihop.py [--llm] [--llm-profile fast] [--routes R3,R2]
        [--type bridge] [--only-missed] [--limit N] [--results PATH] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from cograg.config import Settings  # noqa: E402
from cograg.control.plan_templates import template_plan  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.eval.retrieval import hotpot_to_beir, load_beir  # noqa: E402
from cograg.retrieval.fusion import rrf  # noqa: E402
from cograg.retrieval.hops import follow_up_search  # noqa: E402


def support(ranked: list[str], gold: set[str], k: int = 10) -> tuple[float, float]:
    top = set(ranked[:k])
    return float(gold <= top), len(gold & top) / len(gold)


def merged(rankings: list[list[str]], k: int = 10) -> list[str]:
    return [r for r, _ in rrf([r for r in rankings if r])][:k]


ROUTES = {"R2": "R2_MULTI_RETRIEVE", "R3": "R3_DAG_PLAN"}


def record_ids(hits) -> list[str]:
    out: dict[str, None] = {}
    for h in hits:
        rid = h.metadata.get("record_id")
        if rid is not None:
            out.setdefault(str(rid), None)
    return list(out)


def asked_row(eng: Engine, qid: str, question: str, route: str) -> dict:
    """Ask `question` with the route forced; what the turn searched, and which mode answered."""
    t = time.perf_counter()
    resp = eng.ask(question, mode=ROUTES[route])
    trace = eng.trace(resp.trace_id)
    searched = []
    for s in trace.get("searches", []):
        chunks = [eng.store.get_chunk(c) for c in s["chunk_ids"]]  # type: ignore[union-attr]
        searched.append({"query": s["query"], "records": [str(c.metadata.get("record_id")) for c in chunks
                                                           if c is not None]})
    plan = trace.get("plan") or {}
    return {"qid": qid, "route": route, "mode": trace.get("mode"),
            "modes_tried": (trace.get("outcome") or {}).get("modes_tried", []),
            "template": (plan.get("outcome") or {}).get("template"),
            "plan_errors": ((plan.get("outcome") or {}).get("errors") or [])[-1:],
            "searches": searched, "seconds": round(time.perf_counter() - t, 1)}


def load_rows(path: Path) -> dict[tuple[str, str], dict]:
    rows: dict[tuple[str, str], dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                rows[(r["qid"], r["route"])] = r
    return rows


def in_order(rankings: list[list[str]], k: int = 10) -> list[str]:
    """Each search's hits not seen before, search after search, cut at k: what the turn's steps saw."""
    return list(dict.fromkeys(r for ranking in rankings for r in ranking))[:k]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--llm", action="store_true", help="also run the corrective loop (R2) and the planner (R3)")
    ap.add_argument("--llm-profile", default="fast", help="models.llm setting for --llm")
    ap.add_argument("--routes", default="R3,R2", help="routes asked with --llm, in order (R2, R3)")
    ap.add_argument("--type", choices=["bridge", "comparison"], default=None, help="only this question type")
    ap.add_argument("--only-missed", action="store_true",
                    help="only questions whose one-shot top 10 lacks a gold paragraph")
    ap.add_argument("--results", type=Path, default=None,
                    help="JSON lines of the --llm rows (default <work>/multihop-llm-<profile>.jsonl); resumed")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    if unknown := [r for r in routes if r not in ROUTES]:
        ap.error(f"unknown route(s) {unknown}; use R2, R3")
    beir = hotpot_to_beir(args.data / "hotpotqa_train100/hipporag_hotpotqa_train100.json",
                          args.data / "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json",
                          args.work / "hotpot_beir")
    data = load_beir(beir, "train")
    raw = {q["_id"]: q for q in json.loads(
        (args.data / "hotpotqa_train100/hipporag_hotpotqa_train100.json").read_text(encoding="utf-8"))}
    results_path = args.results or args.work / f"multihop-llm-{args.llm_profile}.jsonl"
    done = load_rows(results_path) if args.llm else {}
    settings = Settings(store=args.work / "eval-hotpot", **({"llm": args.llm_profile} if args.llm else {}))
    rows: dict[str, list[tuple[float, float]]] = {}

    def add(name: str, value: tuple[float, float]) -> None:
        rows.setdefault(name, []).append(value)

    with Engine.open(settings=settings) as eng:
        eng.ingest([data.corpus])
        one_shots: dict[str, list[str]] = {}
        qids = []
        for qid in sorted(data.queries):  # the question set, fixed before any model runs
            gold = {d for d, r in data.qrels[qid].items() if r > 0}
            one_shots[qid] = record_ids(eng.search(data.queries[qid], k=30).hits)
            if args.type and raw[qid]["type"] != args.type:
                continue
            if args.only_missed and support(one_shots[qid], gold)[0] == 1.0:
                continue
            qids.append(qid)
        qids = qids[:args.limit] if args.limit else qids
        print(f"{len(qids)} questions", flush=True)

        for qid in qids:
            question, gold = data.queries[qid], {d for d, r in data.qrels[qid].items() if r > 0}
            qtype = raw[qid]["type"]
            one_shot = one_shots[qid]
            add(f"one-shot hybrid, all ({qtype})", support(one_shot, gold))
            add("one-shot hybrid, all", support(one_shot, gold))
            add(f"one-shot hybrid, top 6 ({qtype})", support(one_shot, gold, 6))
            for k in (6, 10):  # what an R3 look-up of the question as asked sees (retrieval/hops.py)
                hopped = record_ids(follow_up_search(lambda q, k=k: eng.search(q, k=k), question).hits)
                add(f"question + follow-up hop, top {k} ({qtype})", support(hopped, gold, k))
            tp = template_plan(question)
            if tp is not None:
                hops = [record_ids(eng.search(t.description, k=30).hits) for t in tp.plan.sub_tasks
                        if t.kind == "retrieve"]
                add(f"one-shot hybrid, template-planned ({tp.name})", support(one_shot, gold))
                add(f"planner templates, RRF of hops top 10 ({tp.name})", support(merged(hops), gold))
                union = list(dict.fromkeys(r for h in hops for r in h[:10]))
                add(f"planner templates, union of each hop's top 10 ({tp.name})", support(union, gold, len(union)))
            if not args.llm:
                continue
            for route in routes:
                row = done.get((qid, route))
                if row is None:
                    row = asked_row(eng, qid, question, route)
                    with results_path.open("a", encoding="utf-8") as f:
                        f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    done[(qid, route)] = row
                    print(qid, route, f"{row['seconds']:.0f}s", row["mode"], len(row["searches"]), "searches",
                          flush=True)
                searched = [s["records"] for s in row["searches"]]
                answered = "planned" if row["mode"] == ROUTES[route] else f"fell back to {row['mode']}"
                add(f"{route} searches, RRF top 10 ({qtype})", support(merged(searched), gold))
                add(f"{route} searches, RRF top 10 ({qtype}, {answered})", support(merged(searched), gold))
                add(f"{route} searches in order, top 10 ({qtype})", support(in_order(searched), gold))
    lines = ["| route | questions | both gold in top 10 | gold paragraphs found |", "|---|---:|---:|---:|"]
    for name, vals in sorted(rows.items()):
        lines.append(f"| {name} | {len(vals)} | {sum(v[0] for v in vals) / len(vals):.3f} | "
                     f"{sum(v[1] for v in vals) / len(vals):.3f} |")
    text = "\n".join(lines)
    print(text)
    if args.write_docs:
        from benchmarks_common import write_section

        described = (f"{len(qids)} questions" + (f", {args.type} only" if args.type else "")
                     + (", those whose one-shot top 10 lacks a gold paragraph" if args.only_missed else "")
                     + (f", the first {args.limit} by id" if args.limit else ""))
        section = ("## Multi-hop support recall (hotpotqa_train100)\n\n"
                   f"Command: `.venv/bin/python benchmarks/retrieval_multihop.py {' '.join(sys.argv[1:])}`  \nRun {datetime.now(UTC).date()}. {described} (no weights are fitted "
                   "here, so there is no calibration half). Default hybrid search (adaptive fusion), no reranker. "
                   "`both gold in top 10` = HotpotQA's two supporting paragraphs both among the 10 passages; "
                   "hops merged by RRF and cut at 10 so routes are compared at the same budget.\n\n" + text + "\n")
        write_section(REPO / "docs" / "benchmarks.md", "## Multi-hop support recall (hotpotqa_train100)", section)


if __name__ == "__main__":
    main()
