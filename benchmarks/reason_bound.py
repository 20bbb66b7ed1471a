"""The judge's reason and the grader's reasoning, bounded in the reply schema (80 characters) against
unbounded: same process, same model, same prompts. Both fields come after the decision (verdict;
is_relevant and confidence), so under greedy decoding the bound must leave every decision as it
was and only shorten what follows; this measures that it does, and the generated tokens and time
it saves.

Judge pairs: the first N claim/abstract pairs of `verification/scifact_nli_train.jsonl` (abstract
cut to 700 characters, about the verifier's window). Grader pairs: the first N HotpotQA train100
questions, each with its first context paragraph. Nothing is tuned here: the bound was set by
reasoning (one short sentence) before this ran.

    .venv/bin/python benchmarks/reason_bound.py --n 12 [--kinds judge,grade] [--data ../shared/data] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from pydantic import BaseModel, Field

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from cograg.config import default_model_cache  # noqa: E402
from cograg.control import corrective_llm  # noqa: E402
from cograg.models import judge as judge_module  # noqa: E402
from cograg.models.judge import Verdict  # noqa: E402
from cograg.models.llm import ChatMessage  # noqa: E402


class UnboundedVerdict(BaseModel):  # the judge's reply schema before the bound
    verdict: Verdict
    reason: str = ""


class UnboundedGrade(BaseModel):  # the grader's reply schema before the bound
    is_relevant: bool
    confidence: float = Field(ge=0.0, le=1.0)
    reasoning: str = ""


def judge_pairs(data: Path, n: int) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in (data / "verification" / "scifact_nli_train.jsonl").open(encoding="utf-8")]
    return [(r["claim"], " ".join(r["abstract"])[:700]) for r in rows[:n]]


def grade_pairs(data: Path, n: int) -> list[tuple[str, object]]:
    from cograg.retrieval.models import SearchHit

    qs = json.loads((data / "hotpotqa_train100" / "hipporag_hotpotqa_train100.json").read_text(encoding="utf-8"))
    out = []
    for i, q in enumerate(qs[:n]):
        title, sentences = q["context"][0]
        text = "".join(sentences)
        out.append((q["question"], SearchHit(title=title, source=f"{title}.txt", chunk_id=f"c{i}", doc_id=f"d{i}",
                                             seq=0, text=text, start=0, end=len(text), token_count=len(text) // 4,
                                             score=1.0)))
    return out


def run(llm, data: Path, n: int, kinds: list[str]) -> list[dict]:
    rows = []
    judge = judge_module.LLMJudge(llm, timeout_s=None)
    grader = corrective_llm.DocumentGrader(llm, timeout_s=None)  # a busy machine must not turn a grade into an error
    bounded_grade = corrective_llm.GradeVerdict
    sets = {"judge": lambda: judge_pairs(data, n), "grade": lambda: grade_pairs(data, n)}
    for kind, pairs in ((k, sets[k]()) for k in kinds):
        for i, pair in enumerate(pairs):
            row: dict = {"kind": kind, "i": i}
            for variant, verdict_schema, grade_schema in (("unbounded", UnboundedVerdict, UnboundedGrade),
                                                          ("bounded", judge_module.JudgeVerdict, bounded_grade)):
                # the same cache state before either variant: llama.cpp reuses the longest cached
                # prefix, and a prompt evaluated whole or in part differs in its last float bits,
                # which can flip a near-tie (measured: the unbounded grader alone, one prompt asked
                # twice in a row, gave is_relevant true and then false)
                llm.chat([ChatMessage(role="user", content="ok")], max_tokens=1)
                t0 = time.perf_counter()
                if kind == "judge":  # the judge's own messages and token budget, the schema varied
                    messages = judge_module._turns(judge.prompt.render_turns(claim=pair[0], passage=pair[1],
                                                                             question=None))
                    v, resp = llm.chat_json(messages, verdict_schema, max_tokens=judge.max_tokens, timeout_s=None)
                    decision, text, tokens = v.verdict, v.reason, resp.completion_tokens
                else:
                    corrective_llm.GradeVerdict = grade_schema  # the name DocumentGrader.grade reads
                    try:
                        g = grader.grade(pair[0], pair[1])
                    finally:
                        corrective_llm.GradeVerdict = bounded_grade
                    decision, text, tokens = [g.is_relevant, g.confidence], g.reasoning, g.completion_tokens
                row[variant] = {"decision": decision, "text": text, "wall_s": round(time.perf_counter() - t0, 2),
                                "completion_tokens": tokens}
            row["same_decision"] = row["unbounded"]["decision"] == row["bounded"]["decision"]
            print(json.dumps(row, ensure_ascii=False), file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    out = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        rs = [r for r in rows if r["kind"] == kind]
        out[kind] = {
            "pairs": len(rs), "same_decision": sum(r["same_decision"] for r in rs),
            "wall_s_median": {v: statistics.median(r[v]["wall_s"] for r in rs) for v in ("unbounded", "bounded")},
            "reason_chars_median": {v: statistics.median(len(r[v]["text"]) for r in rs) for v in ("unbounded", "bounded")},
        }
        out[kind]["completion_tokens_median"] = {v: statistics.median(r[v]["completion_tokens"] for r in rs)
                                                 for v in ("unbounded", "bounded")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--model-cache", type=Path, default=default_model_cache())
    ap.add_argument("--kinds", default="judge,grade", help="judge, grade or both")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from benchmarks_common import report_on_default_llm

    def measured(llm):
        rows = run(llm, args.data, args.n, args.kinds.split(","))
        return rows, summary(rows)

    report_on_default_llm(args.model_cache, measured, args.json)


if __name__ == "__main__":
    main()
