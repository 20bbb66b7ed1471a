"""The LLM judge with and without its reason (`verification.judge_reasons`): same process, same
model, same prompts. Without reasons the grammar stops the reply after the verdict
(`chat_json(..., enforced_schema=JudgeDecision)`), while the prompt still shows the full schema. Under
greedy decoding every token up to the verdict is the same, so every verdict must be the same; this
measures that it is, and the generated tokens and time the reason costs.

Pairs: the first N claim/abstract pairs of `verification/scifact_nli_train.jsonl` (abstract cut to
700 characters, about the verifier's window; no question), and the first N HotpotQA train100
questions with their first supporting paragraph and the claim "The answer is <gold answer>."
judged as an answer to the question (how the verifier calls the judge). Nothing is tuned here.

    .venv/bin/python benchmarks/judge_reasons.py --n 12 [--data ../shared/data] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import default_model_cache  # noqa: E402
from cograg.models import judge as judge_module  # noqa: E402
from cograg.models.llm import ChatMessage  # noqa: E402


def pairs(data: Path, n: int) -> list[tuple[str, str, str, str | None]]:
    """(set, claim, passage, question) for both sets."""
    rows = [json.loads(line) for line in (data / "verification" / "scifact_nli_train.jsonl").open(encoding="utf-8")]
    out: list[tuple[str, str, str, str | None]] = [
        ("scifact", r["claim"], " ".join(r["abstract"])[:700], None) for r in rows[:n]]
    qs = json.loads((data / "hotpotqa_train100" / "hipporag_hotpotqa_train100.json").read_text(encoding="utf-8"))
    for q in qs[:n]:
        title = q["supporting_facts"][0][0]
        paragraph = next("".join(s) for t, s in q["context"] if t == title)
        out.append(("hotpotqa", f"The answer is {q['answer']}.", paragraph[:700], q["question"]))
    return out


def run(llm, data: Path, n: int) -> list[dict]:
    judges = {"with_reason": judge_module.LLMJudge(llm, timeout_s=None, reasons=True),
              "verdict_only": judge_module.LLMJudge(llm, timeout_s=None, reasons=False)}
    rows = []
    for i, (kind, claim, passage, question) in enumerate(pairs(data, n)):
        row: dict = {"set": kind, "i": i}
        for variant, judge in judges.items():
            # the same cache state before either variant (a prompt evaluated whole or in part can
            # differ in its last float bits: benchmarks/reason_bound.py)
            llm.chat([ChatMessage(role="user", content="ok")], max_tokens=1)
            t0 = time.perf_counter()
            v = judge.judge(claim, passage, question)
            row[variant] = {"verdict": v.verdict, "reason": v.reason, "wall_s": round(time.perf_counter() - t0, 2),
                            "completion_tokens": llm.last_completion_tokens}
        row["same_verdict"] = row["with_reason"]["verdict"] == row["verdict_only"]["verdict"]
        print(json.dumps(row, ensure_ascii=False), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    out = {"pairs": len(rows), "same_verdict": sum(r["same_verdict"] for r in rows)}
    for v in ("with_reason", "verdict_only"):
        out[v] = {"wall_s_median": statistics.median(r[v]["wall_s"] for r in rows),
                  "wall_s_sum": round(sum(r[v]["wall_s"] for r in rows), 1),
                  "completion_tokens_median": statistics.median(r[v]["completion_tokens"] for r in rows)}
    return out


class _Counting:
    """The LLM with the completion tokens of its last `chat_json` kept (the judge returns only the verdict)."""

    def __init__(self, llm) -> None:
        self.llm = llm
        self.last_completion_tokens = 0

    def chat(self, *a, **kw):
        return self.llm.chat(*a, **kw)

    def chat_json(self, *a, **kw):
        obj, resp = self.llm.chat_json(*a, **kw)
        self.last_completion_tokens = resp.completion_tokens
        return obj, resp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12, help="pairs from each set")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--model-cache", type=Path, default=default_model_cache())
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from benchmarks_common import report_on_default_llm

    def measured(llm):
        rows = run(_Counting(llm), args.data, args.n)
        return rows, summary(rows)

    report_on_default_llm(args.model_cache, measured, args.json)


if __name__ == "__main__":
    main()
