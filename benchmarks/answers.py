"""Answer quality and cost on real data with the embedded models (issue: verified answers).

Questions: 50 from cmrc2018 dev (Chinese, passage store), 30 from HotpotQA train100 (English,
paragraph store), 20 unanswerable ones written for these corpora (benchmarks/data/unanswerable.jsonl).
Per model profile: share of answers containing the gold answer, citation recall and precision in the
ALCE sense (judged by the project's LLM claim judge on the default 1.5B model — named in the report),
refusal rate on unanswerable questions, hallucinated ids proposed by the model (all removed before
delivery) and delivered, median latency, tokens per answer.

    .venv/bin/python benchmarks/answers.py --profiles default,fast [--n-cmrc 50 --n-hotpot 30] [--write-docs]

Results stream to benchmarks/results/answers-<profile>.jsonl so an interrupted run keeps what it did.
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
from cograg.config import Settings  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.eval.answers import alce_citations  # noqa: E402
from cograg.eval.retrieval import hotpot_to_beir  # noqa: E402
from cograg.eval.scoring import contains_gold  # noqa: E402
from cograg.models.judge import LLMJudge  # noqa: E402
from cograg.prompts import load_prompt  # noqa: E402


def questions(data: Path, n_cmrc: int, n_hotpot: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    cm = [json.loads(line) for line in open(data / "cmrc2018/qa_dev.jsonl", encoding="utf-8")]
    hp = json.loads((data / "hotpotqa_train100/hipporag_hotpotqa_train100.json").read_text(encoding="utf-8"))
    out = []
    for q in rng.sample(cm, n_cmrc):
        answers = q.get("answers") or q.get("answer") or []
        answers = answers if isinstance(answers, list) else [answers]
        answers = [a["text"] if isinstance(a, dict) else a for a in answers]
        out.append({"corpus": "cmrc2018", "question": q["question"], "gold": answers, "answerable": True})
    for q in rng.sample(hp, n_hotpot):
        out.append({"corpus": "hotpotqa", "question": q["question"], "gold": [q["answer"]], "answerable": True})
    una = []
    for line in open(REPO / "benchmarks/data/unanswerable.jsonl", encoding="utf-8"):
        q = json.loads(line)
        una.append({"corpus": q["corpus"], "question": q["question"], "gold": [], "answerable": False})
    # round-robin over the three groups, so an interrupted run still covers all of them
    groups = [[q for q in out if q["corpus"] == "cmrc2018"], [q for q in out if q["corpus"] == "hotpotqa"], una]
    mixed = []
    for i in range(max(len(g) for g in groups)):
        mixed += [g[i] for g in groups if i < len(g)]
    return mixed


def alce(judge: LLMJudge, resp, chunk_text, question: str) -> tuple[int, int, int, int]:
    """(supported statements, statements, relevant citations, citations) in the ALCE sense
    (cograg.eval.answers.alce_citations, the same code `cograg eval answers` runs)."""
    c = alce_citations(judge, resp.answer, {c.id: chunk_text(c.chunk_id) for c in resp.citations}, question)
    return c.supported, c.statements, c.relevant_citations, c.citations


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--profiles", default="default,fast")
    ap.add_argument("--n-cmrc", type=int, default=50)
    ap.add_argument("--n-hotpot", type=int, default=30)
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--summarise-only", action="store_true",
                    help="only summarise the rows already in benchmarks/results (e.g. of an interrupted run)")
    args = ap.parse_args()
    if args.summarise_only:
        summaries = {}
        wanted = {q["question"] for q in questions(args.data, args.n_cmrc, args.n_hotpot)}
        for profile in args.profiles.split(","):
            f = REPO / "benchmarks" / "results" / f"answers-{profile}.jsonl"
            if f.exists():
                rows = [r for r in (json.loads(line) for line in open(f, encoding="utf-8")) if r["question"] in wanted]
                summaries[profile] = summarise(rows)
        table = render(summaries, args)
        done = {p: s["answerable"] + s["unanswerable"] for p, s in summaries.items()}
        if any(n < len(wanted) for n in done.values()):
            table += (f"\nPartial run: the script was stopped before the end (time). Questions done per profile: "
                      f"{done} of {len(wanted)}; the round-robin order (cmrc, HotpotQA, unanswerable) keeps every "
                      "group represented. Re-running the same command resumes where it stopped.\n")
        print(table)
        if args.write_docs:
            sys.path.insert(0, str(REPO / "benchmarks"))
            from benchmarks_common import write_section

            write_section(REPO / "docs" / "benchmarks.md", "## Verified answers", table)
        return
    qs = questions(args.data, args.n_cmrc, args.n_hotpot)
    hot = hotpot_to_beir(args.data / "hotpotqa_train100/hipporag_hotpotqa_train100.json",
                         args.data / "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json",
                         args.work / "hotpot_beir")
    corpora = {"cmrc2018": args.data / "cmrc2018/beir/corpus.jsonl", "hotpotqa": hot / "corpus.jsonl"}
    results_dir = REPO / "benchmarks" / "results"
    results_dir.mkdir(exist_ok=True)
    summaries = {}
    judge_engine = None
    for profile in args.profiles.split(","):
        rows = []
        out_file = results_dir / f"answers-{profile}.jsonl"
        done = {}
        if out_file.exists():
            done = {json.loads(line)["question"]: json.loads(line) for line in open(out_file, encoding="utf-8")}
        engines = {}
        for name, corpus in corpora.items():
            eng = Engine.open(settings=Settings(store=args.work / name, llm=profile, judge="llm",
                                                model_cache=args.work / "models"))
            eng.ingest([corpus])
            engines[name] = eng
        if judge_engine is None:
            judge_engine = engines["cmrc2018"] if profile == "default" else Engine.open(
                settings=Settings(store=args.work / "cmrc2018", llm="default", model_cache=args.work / "models"))
        judge = LLMJudge(judge_engine.components.llm.get())
        with open(out_file, "a", encoding="utf-8") as fh:
            for i, q in enumerate(qs, start=1):
                if q["question"] in done:
                    rows.append(done[q["question"]])
                    continue
                eng = engines[q["corpus"]]
                t = time.perf_counter()
                resp = eng.ask(q["question"], config=AnswerConfig())
                latency = time.perf_counter() - t
                trace = eng.trace(resp.trace_id)
                tokens = sum(c["prompt_tokens"] + c["completion_tokens"] for c in trace["model_calls"])
                chunk_text = lambda cid, e=eng: (e.store.get_chunk(cid).text if e.store.get_chunk(cid) else "")  # noqa: E731
                sup, stm, rel, cit = alce(judge, resp, chunk_text, q["question"]) if not resp.fallback else (0, 0, 0, 0)
                row = {"question": q["question"], "corpus": q["corpus"], "answerable": q["answerable"],
                       "gold": q["gold"], "answer": resp.answer, "fallback": resp.fallback,
                       "contains_gold": right(q["gold"], resp.answer, resp.fallback),
                       "supported": sup, "statements": stm, "relevant_citations": rel, "citations": cit,
                       "hallucinated_ids_proposed": len(resp.removed.hallucinated_ids),
                       "hallucinated_ids_delivered": sum(1 for c in resp.citations
                                                         if eng.store.get_chunk(c.chunk_id) is None),
                       "latency_s": round(latency, 2), "tokens": tokens, "trace_id": resp.trace_id}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                fh.flush()
                rows.append(row)
                print(f"[{profile} {i}/{len(qs)}] {latency:.1f}s fallback={resp.fallback} "
                      f"gold={row['contains_gold']} {q['question'][:50]}", flush=True)
        summaries[profile] = summarise(rows)
        print(profile, json.dumps(summaries[profile]), flush=True)
    table = render(summaries, args)
    print(table)
    if args.write_docs:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from benchmarks_common import write_section

        write_section(REPO / "docs" / "benchmarks.md", "## Verified answers", table)


def right(gold: list[str], answer: str, fallback: bool) -> bool:
    """The delivered answer contains the gold answer; a refusal is never right, though the evidence
    it quotes may contain the gold (rows written before this rule counted such refusals)."""
    return not fallback and contains_gold(gold, answer)


def summarise(rows: list[dict]) -> dict:
    # scored again from the row's own answer, so rows of any age count by the current rule
    rows = [r | {"contains_gold": right(r["gold"], r["answer"], r["fallback"])} if r["answerable"] else r
            for r in rows]
    ans = [r for r in rows if r["answerable"]]
    una = [r for r in rows if not r["answerable"]]
    stm = sum(r["statements"] for r in ans)
    cit = sum(r["citations"] for r in ans)
    by_corpus = {c: round(sum(r["contains_gold"] for r in ans if r["corpus"] == c) /
                          max(1, sum(1 for r in ans if r["corpus"] == c)), 3) for c in ("cmrc2018", "hotpotqa")}
    return {
        "answerable": len(ans), "unanswerable": len(una), "contains_gold_by_corpus": by_corpus,
        "answerable_by_corpus": {c: sum(1 for r in ans if r["corpus"] == c) for c in ("cmrc2018", "hotpotqa")},
        "contains_gold": round(sum(r["contains_gold"] for r in ans) / max(1, len(ans)), 3),
        "answered": round(sum(not r["fallback"] for r in ans) / max(1, len(ans)), 3),
        "citation_recall": round(sum(r["supported"] for r in ans) / stm, 3) if stm else None,
        "citation_precision": round(sum(r["relevant_citations"] for r in ans) / cit, 3) if cit else None,
        "refusal_unanswerable": round(sum(r["fallback"] for r in una) / max(1, len(una)), 3),
        "hallucinated_ids_proposed": sum(r["hallucinated_ids_proposed"] for r in rows),
        "hallucinated_ids_delivered": sum(r["hallucinated_ids_delivered"] for r in rows),
        "median_latency_s": round(statistics.median(r["latency_s"] for r in rows), 2),
        "median_tokens": int(statistics.median(r["tokens"] for r in rows)),
        "mean_tokens": int(statistics.mean(r["tokens"] for r in rows)),
    }


def render(summaries: dict, args: argparse.Namespace) -> str:
    lines = ["## Verified answers", "",
             f"Command: `.venv/bin/python benchmarks/answers.py --profiles {args.profiles} --n-cmrc {args.n_cmrc} "
             f"--n-hotpot {args.n_hotpot} --write-docs`  ",
             "Stores: cmrc2018 dev passages (Chinese) and the 994 HotpotQA train100 paragraphs (English), hybrid "
             "retrieval with multilingual-e5-small, default answer settings. Citation recall/precision follow "
             f"ALCE; the judge is the project's LLM claim judge (`{load_prompt('judge_claim').version}`) on "
             "Qwen2.5-Coder-1.5B-Instruct "
             "Q4_K_M. Per-row results: `benchmarks/results/answers-<profile>.jsonl`.", "",
             "| profile | answerable Qs (cmrc / hotpot) | contains gold (cmrc / hotpot) | answered (not refused) | citation recall | citation precision | "
             "refusal on unanswerable | hallucinated ids proposed → delivered | median latency s | tokens/answer (median, mean) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p, s in summaries.items():
        ac, cg = s["answerable_by_corpus"], s["contains_gold_by_corpus"]
        lines.append(f"| {p} | {s['answerable']} ({ac['cmrc2018']} / {ac['hotpotqa']}) | {s['contains_gold']} "
                     f"({cg['cmrc2018']} / {cg['hotpotqa']}) | {s['answered']} | {s['citation_recall']} | "
                     f"{s['citation_precision']} | {s['refusal_unanswerable']} ({s['unanswerable']} Qs) | "
                     f"{s['hallucinated_ids_proposed']} → {s['hallucinated_ids_delivered']} | {s['median_latency_s']} | "
                     f"{s['median_tokens']}, {s['mean_tokens']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
