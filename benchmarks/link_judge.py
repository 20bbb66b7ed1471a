"""Whether the judge can tell a wrong-entity answer by its link to what the question describes.

A question that asks for a date of a described entity ("When was the Canadian actress who starred
in Barrier Device as a sex researcher born?") is often answered with another entity's date ("Grace
Lee was born on October 3, 1973 [1]", the film's director). Every such claim is true of its own
passage, so the verifier passes it. This script asks the judge the link itself, "<the answer's
subject> is the <described entity>.", against the context the answer was written from. No answer
model call: it reads each question's latest trace in the eval store (`cograg eval` keeps them),
and judges only answers whose subject is a name and whose question has a phrase it can take.

    PYTHONPATH=src .venv/bin/python benchmarks/link_judge.py benchmarks/data/number_bridges.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import Settings  # noqa: E402
from cograg.engine import Engine  # noqa: E402

STORE = Path.home() / ".cograg" / "eval" / "answers-hotpotqa_train100-beir-view-corpus"
# "When was the <described entity> born?" and the like: the phrase between "the" and the verb
PHRASE = re.compile(r"^(?:when|in what year|in which year|since what year)\s+(?:was|were|did|has|have)\s+the\s+"
                    r"(?P<x>.+?)\s+(?:born|die|died|founded|released|made|published|end|become|been)\b", re.I)
SUBJECT = re.compile(r"^((?:[A-Z][\w.'-]*\s?)+)")
NOT_NAMES = {"The", "A", "An", "January", "February", "March", "April", "May", "June", "July", "August",
             "September", "October", "November", "December"}


def link_claim(question: str, answer: str) -> str | None:
    """"<subject> is the <phrase>." for an answer that opens with a name, else None."""
    m = PHRASE.match(question.strip())
    s = SUBJECT.match(re.sub(r"\s*\[\d+\]", "", answer).strip())
    if not m or not s:
        return None
    subject = s.group(1).strip()
    if subject.split()[0] in NOT_NAMES:  # "The film was released …", "December 23, 1923 [1]"
        return None
    return f"{subject} is the {m.group('x').rstrip(', ')}."


def judged(latest: dict[str, dict], gold: dict[str, dict], text, judge) -> list[dict]:
    """One row per answered question whose link claim can be written: the claim and its verdict."""
    rows = []
    for question, trace in latest.items():
        outcome = trace["outcome"]
        if outcome.get("fallback"):
            continue
        claim = link_claim(question, outcome["answer"])
        if claim is None:
            continue
        context = "\n\n".join(text(c) for b in trace["context_blocks"] for c in b["chunk_ids"])
        start = time.perf_counter()
        verdict = judge.judge(claim, context, question=question).verdict
        rows.append({"id": gold[question].get("id"), "right": gold[question]["answer"] in outcome["answer"],
                     "claim": claim, "verdict": verdict, "seconds": round(time.perf_counter() - start, 1)})
        print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("questions", type=Path, help="a JSONL set with question and answer (the gold)")
    ap.add_argument("--store", type=Path, default=STORE, help="the eval store whose traces answered the set")
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = ap.parse_args()

    gold = {r["question"]: r for r in map(json.loads, args.questions.read_text(encoding="utf-8").splitlines())}
    db = sqlite3.connect(args.store / "cograg.db")

    def text(chunk_id: str) -> str:
        row = db.execute("select text from chunks where chunk_id = ?", (chunk_id,)).fetchone()
        return row[0] if row else ""

    latest: dict[str, dict] = {}
    for question, data in db.execute("select question, data from traces order by created_at"):
        if question in gold:
            latest[question] = json.loads(data)
    # the judge's own engine over an empty store of its own: the eval store is only read
    with tempfile.TemporaryDirectory() as tmp, Engine.open(settings=Settings(
            store=Path(tmp) / "store", models={"llm": "default"}, verification={"judge": "llm"})) as eng:
        rows = judged(latest, gold, text, eng.components.judge.get())
    for right in (True, False):
        part = [r for r in rows if r["right"] is right]
        print(f"{'right' if right else 'wrong'} answers: {len(part)}, link SUPPORTED "
              f"{sum(r['verdict'] == 'SUPPORTED' for r in part)}")
    if rows:
        print(f"median judge call {statistics.median(r['seconds'] for r in rows):.1f} s")
    if args.out:
        args.out.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
