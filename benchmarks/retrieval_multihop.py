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

    .venv/bin/python benchmarks/retrieval_multihop.py [--llm] [--llm-profile fast] [--limit N] [--write-docs]
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


def support(ranked: list[str], gold: set[str], k: int = 10) -> tuple[float, float]:
    top = set(ranked[:k])
    return float(gold <= top), len(gold & top) / len(gold)


def merged(rankings: list[list[str]], k: int = 10) -> list[str]:
    return [r for r, _ in rrf([r for r in rankings if r])][:k]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--llm", action="store_true", help="also run the corrective loop (R2) and the planner (R3)")
    ap.add_argument("--llm-profile", default="fast", help="models.llm setting for --llm")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    beir = hotpot_to_beir(args.data / "hotpotqa_train100/hipporag_hotpotqa_train100.json",
                          args.data / "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json",
                          args.work / "hotpot_beir")
    data = load_beir(beir, "train")
    raw = {q["_id"]: q for q in json.loads(
        (args.data / "hotpotqa_train100/hipporag_hotpotqa_train100.json").read_text(encoding="utf-8"))}
    qids = sorted(data.queries)[:args.limit] if args.limit else sorted(data.queries)
    settings = Settings(store=args.work / "eval-hotpot", **({"llm": args.llm_profile} if args.llm else {}))
    rows: dict[str, list[tuple[float, float]]] = {}
    with Engine.open(settings=settings) as eng:
        eng.ingest([data.corpus])

        def records(hits) -> list[str]:
            out: dict[str, None] = {}
            for h in hits:
                rid = h.metadata.get("record_id")
                if rid is not None:
                    out.setdefault(str(rid), None)
            return list(out)

        def add(name: str, value: tuple[float, float]) -> None:
            rows.setdefault(name, []).append(value)

        for qid in qids:
            question, gold = data.queries[qid], {d for d, r in data.qrels[qid].items() if r > 0}
            qtype = raw[qid]["type"]
            one_shot = records(eng.search(question, k=30).hits)
            add(f"one-shot hybrid, all ({qtype})", support(one_shot, gold))
            add("one-shot hybrid, all", support(one_shot, gold))
            tp = template_plan(question)
            if tp is not None:
                hops = [records(eng.search(t.description, k=30).hits) for t in tp.plan.sub_tasks
                        if t.kind == "retrieve"]
                add(f"one-shot hybrid, template-planned ({tp.name})", support(one_shot, gold))
                add(f"planner templates, RRF of hops top 10 ({tp.name})", support(merged(hops), gold))
                union = list(dict.fromkeys(r for h in hops for r in h[:10]))
                add(f"planner templates, union of each hop's top 10 ({tp.name})", support(union, gold, len(union)))
            if args.llm:
                for route in ("R2_MULTI_RETRIEVE", "R3_DAG_PLAN"):
                    t = time.perf_counter()
                    resp = eng.ask(question, mode=route)
                    trace = eng.trace(resp.trace_id)
                    searched = [[str(eng.store.get_chunk(c).metadata.get("record_id"))  # type: ignore[union-attr]
                                 for c in s["chunk_ids"] if eng.store.get_chunk(c) is not None]
                                for s in trace.get("searches", [])]
                    add(f"{route} searches, RRF top 10", support(merged(searched), gold))
                    add(f"{route} searches, RRF top 10 ({qtype})", support(merged(searched), gold))
                    print(qid, route, f"{time.perf_counter() - t:.0f}s", len(searched), "searches", flush=True)
    lines = ["| route | questions | both gold in top 10 | gold paragraphs found |", "|---|---:|---:|---:|"]
    for name, vals in sorted(rows.items()):
        lines.append(f"| {name} | {len(vals)} | {sum(v[0] for v in vals) / len(vals):.3f} | "
                     f"{sum(v[1] for v in vals) / len(vals):.3f} |")
    text = "\n".join(lines)
    print(text)
    if args.write_docs:
        from benchmarks_common import write_section

        section = ("## Multi-hop support recall (hotpotqa_train100)\n\n"
                   f"Command: `.venv/bin/python benchmarks/retrieval_multihop.py{' --llm' if args.llm else ''} "
                   f"--write-docs`  \nRun {datetime.now(UTC).date()}. All 100 questions (no weights are fitted "
                   "here, so there is no calibration half). Default hybrid search (adaptive fusion), no reranker. "
                   "`both gold in top 10` = HotpotQA's two supporting paragraphs both among the 10 passages; "
                   "hops merged by RRF and cut at 10 so routes are compared at the same budget.\n\n" + text + "\n")
        write_section(REPO / "docs" / "benchmarks.md", "## Multi-hop support recall (hotpotqa_train100)", section)


if __name__ == "__main__":
    main()
