"""What a role of its own for the judge's all-claims call buys (`cograg.models.judge.BATCH_ROLE`).

The verifier judges a one-sentence answer with the one-claim prompt (`judge_claim`) and an answer
of several sentences with the all-claims prompt (`judge_claims`). The two share no head, and on
llama.cpp a role keeps only its last prompt's KV state: in one role, each switch between them
evaluated the other's instructions again. This runs the same alternating sequence of judge calls
(one claim, two claims, one claim, ...) on the default 1.5B model twice in one process:

- `one role`: both prompts in the `judge` role (as before);
- `two roles`: the all-claims call in a role of its own.

Both start from the prompt-prefix states `cograg models prepare` saved. Per call: prompt tokens,
tokens served from the cache, seconds; per variant: medians and the total.

    .venv/bin/python benchmarks/judge_roles.py [--pairs 4] [--json]
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
from cograg.models import judge as judge_module  # noqa: E402
from cograg.models.llm import get_llm  # noqa: E402
from cograg.trace import RecordingLLM, Trace  # noqa: E402

# Different passages and claims in every call, as in a run of answers: only the instructions repeat.
FACTS = [
    ("The stone Linden Bridge was designed by the engineer Tobias Marrick and opened in 1811. It has seven "
     "semicircular arches of grey granite and replaced a timber bridge that a flood destroyed.",
     "Tobias Marrick designed the stone Linden Bridge.", "The Linden Bridge has seven semicircular arches.",
     "Who designed the stone Linden Bridge, and how many arches does it have?"),
    ("Public transport in Lindenport began on 2 August 1887, when the private Lindenport Street Railway "
     "Company opened a horse-drawn tramway between Harbour Square and Old Market.",
     "Public transport in Lindenport began on 2 August 1887.",
     "The first tramway ran between Harbour Square and Old Market.",
     "When did public transport in Lindenport begin, and where did the first tramway run?"),
    ("The first electric tram ran on 14 May 1903, crossing the River Vell on the Linden Bridge, which had "
     "been widened and strengthened for the purpose.",
     "The first electric tram ran on 14 May 1903.", "The first electric tram crossed the River Vell.",
     "When did the first electric tram run, and which river did it cross?"),
    ("The last tram of the first generation ran on 30 September 1962, and the routes were replaced by "
     "diesel buses.",
     "The last first-generation tram ran on 30 September 1962.", "Diesel buses replaced the tram routes.",
     "When did the last first-generation tram run, and what replaced the routes?"),
]


def run(variant: str, llm, pairs: int) -> list[dict]:
    original = judge_module.BATCH_ROLE
    judge_module.BATCH_ROLE = "judge" if variant == "one role" else original
    llm.role_states.forget()  # each variant starts with no role in memory: only the saved states on disk
    trace = Trace(question="judge roles")
    judge = judge_module.LLMJudge(RecordingLLM(llm.for_role("judge"), trace, purpose="verify"))
    rows = []
    try:
        for i in range(2 * pairs):
            passage, first, second, question = FACTS[(i // 2) % len(FACTS)]
            t0 = time.perf_counter()
            if i % 2 == 0:
                verdicts = [judge.judge(first, passage, question)]
            else:
                verdicts = judge.judge_many([(first, passage), (second, passage)], question)
            call = trace.model_calls[-1]
            rows.append({"variant": variant, "call": i + 1, "claims": len(verdicts),
                         "verdicts": [getattr(v, "verdict", None) for v in verdicts],
                         "prompt_tokens": call.prompt_tokens, "cached_tokens": call.cached_tokens,
                         "seconds": round(time.perf_counter() - t0, 2)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        judge_module.BATCH_ROLE = original
    return rows


def summary(rows: list[dict]) -> dict:
    return {"calls": len(rows), "total_s": round(sum(r["seconds"] for r in rows), 1),
            "median_s": round(statistics.median(r["seconds"] for r in rows), 2),
            "evaluated_tokens": sum(r["prompt_tokens"] - (r["cached_tokens"] or 0) for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4, help="one-claim + two-claim call pairs per variant")
    ap.add_argument("--model-cache", type=Path, default=default_model_cache())
    ap.add_argument("--out", type=Path, help="write the report here as JSON")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    llm = get_llm("default", cache_dir=args.model_cache)
    report: dict = {"load_average_before": os.getloadavg(), "rows": []}
    for variant in ("one role", "two roles", "one role", "two roles"):  # alternated: the machine drifts
        report["rows"] += run(variant, llm, args.pairs)
    report["load_average_after"] = os.getloadavg()
    report["summary"] = {v: summary([r for r in report["rows"] if r["variant"] == v]) for v in ("one role", "two roles")}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print("| variant | calls | total s | median s per call | prompt tokens evaluated |")
    print("|---|---:|---:|---:|---:|")
    for v, s in report["summary"].items():
        print(f"| {v} | {s['calls']} | {s['total_s']} | {s['median_s']} | {s['evaluated_tokens']} |")
    print(f"load average before {report['load_average_before']}, after {report['load_average_after']}")


if __name__ == "__main__":
    main()
