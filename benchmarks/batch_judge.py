"""The judge's all-claims call against one call per claim, on labelled two-sentence answers.

The verifier judges an answer of several sentences with one `judge_claims` call and judges alone
(`judge_claim`, verdict only) every claim the batch reply leaves without a verdict. This measures,
on the same two-claim answers and in one process (default 1.5B model, each prompt in its own role):

- how often the batch reply holds a verdict for every claim;
- the decisions (SUPPORTED or not) of `batch` (as the verifier does it) and of `single` (every claim
  alone) against the labels, and how often the two agree;
- the seconds each way spends on an answer.

Answers, from the `--split` part of each set (`cograg.eval.splits`):
- SciFact (`verification/scifact_nli_train.jsonl`): two consecutive claim/abstract pairs (abstract cut to
  700 characters, about the verifier's window), no question; SUPPORT is the only label a judge
  should accept.
- HotpotQA train100: per question whose gold answer a supporting paragraph states in words (not
  yes/no), "The answer is <gold>." and "The answer is <the next question's gold>.", each with that
  paragraph, judged as answers to the question; the first should be accepted, the second not.
  Their order alternates.

    .venv/bin/python benchmarks/batch_judge.py --split calibration --n 12 [--out FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import default_model_cache  # noqa: E402
from cograg.eval.splits import select  # noqa: E402
from cograg.models import judge as judge_module  # noqa: E402
from cograg.models.llm import get_llm  # noqa: E402

Claim = tuple[str, str, bool]  # claim, passage, whether a judge should accept it


def answers(data: Path, split: str, n: int) -> list[tuple[str, str | None, list[Claim]]]:
    """(set, question, two claims) for up to `n` answers of each set."""
    out: list[tuple[str, str | None, list[Claim]]] = []
    rows = select([json.loads(line) for line in (data / "verification" / "scifact_nli_train.jsonl").open(encoding="utf-8")],
                  split)
    for a, b in list(zip(rows[0::2], rows[1::2], strict=False))[:n]:
        out.append(("scifact", None, [(r["claim"], " ".join(r["abstract"])[:700], r["label"] == "SUPPORT") for r in (a, b)]))
    qs = select(json.loads((data / "hotpotqa_train100" / "hipporag_hotpotqa_train100.json").read_text(encoding="utf-8")),
                split)
    picked = 0
    for q, other in zip(qs, qs[1:] + qs[:1], strict=True):
        titles = {t for t, _ in q["supporting_facts"]}
        paragraph = next(("".join(s)[:700] for t, s in q["context"]
                          if t in titles and q["answer"].lower() in "".join(s)[:700].lower()), None)
        if paragraph is None or q["answer"].lower() in ("yes", "no") or picked == n:
            continue  # only answers a supporting paragraph states in words
        right = (f"The answer is {q['answer']}.", paragraph, True)
        wrong = (f"The answer is {other['answer']}.", paragraph, False)
        out.append(("hotpotqa", q["question"], [right, wrong] if picked % 2 == 0 else [wrong, right]))
        picked += 1
    return out


def run(judge: judge_module.LLMJudge, items: list[tuple[str, str | None, list[Claim]]]) -> list[dict]:
    rows = []
    for kind, question, claims in items:
        pairs = [(c, p) for c, p, _ in claims]
        t0 = time.perf_counter()
        batch = judge.judge_many(pairs, question)
        complete = all(v is not None for v in batch)
        batch = [v if v is not None else judge.judge(c, p, question) for v, (c, p) in zip(batch, pairs, strict=True)]
        batch_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        single = [judge.judge(c, p, question) for c, p in pairs]
        single_s = time.perf_counter() - t0
        rows.append({"set": kind, "question": question, "labels": [ok for _, _, ok in claims],
                     "batch_complete": complete, "batch": [v.verdict for v in batch],
                     "single": [v.verdict for v in single], "batch_s": round(batch_s, 2), "single_s": round(single_s, 2)})
        print(json.dumps(rows[-1], ensure_ascii=False), file=sys.stderr, flush=True)
    return rows


def summary(rows: list[dict]) -> dict:
    out: dict = {"answers": len(rows), "batch_complete": sum(r["batch_complete"] for r in rows)}
    for way in ("batch", "single"):
        decided = [(v == "SUPPORTED", ok) for r in rows for v, ok in zip(r[way], r["labels"], strict=True)]
        first = [(r[way][0] == "SUPPORTED", r["labels"][0]) for r in rows]
        out[way] = {"right": sum(a == b for a, b in decided), "claims": len(decided),
                    "accepted_wrongly": sum(a and not b for a, b in decided),
                    "rejected_wrongly": sum(b and not a for a, b in decided),
                    "first_claim_right": sum(a == b for a, b in first),
                    "seconds_median": round(statistics.median(r[f"{way}_s"] for r in rows), 2),
                    "seconds_total": round(sum(r[f"{way}_s"] for r in rows), 1)}
    out["same_decisions"] = sum((a == "SUPPORTED") == (b == "SUPPORTED")
                                for r in rows for a, b in zip(r["batch"], r["single"], strict=True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="calibration", choices=["calibration", "evaluation"])
    ap.add_argument("--n", type=int, default=12, help="answers from each set")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--model-cache", type=Path, default=default_model_cache())
    ap.add_argument("--out", type=Path)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    llm = get_llm("default", cache_dir=args.model_cache)
    judge = judge_module.LLMJudge(llm.for_role("judge"), timeout_s=None)
    report: dict = {"split": args.split, "load_average_before": os.getloadavg()}
    report["rows"] = run(judge, answers(args.data, args.split, args.n))
    report["load_average_after"] = os.getloadavg()
    report["summary"] = {"all": summary(report["rows"])} | {
        kind: summary([r for r in report["rows"] if r["set"] == kind]) for kind in ("scifact", "hotpotqa")}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(report["summary"], indent=1))


if __name__ == "__main__":
    main()
