"""Prompt-lookup drafts (`cograg.models.llm.lookup_decoding`) against plain decoding, inside `ask`.

For each of the latency benchmark's questions (`latency.pick`: cmrc2018 and HotpotQA, R1, default
model): one unmeasured answer puts the answer prompt in the KV cache, then the question is answered
with drafts and without, in alternating order, so both measured answer calls evaluate only their
last prompt token and the difference is generation. Recorded per answer: the answer call's wall
time and generated tokens, the whole answer's latency, the answer text and whether it holds the gold
answer. Draft verification runs batched decodes, which llama.cpp computes with other kernels than a
one-token decode, so greedy texts may differ where two tokens are nearly tied: the texts are compared.

    .venv/bin/python benchmarks/lookup_decoding.py --n 10 [--draft 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency import REPO, RESULTS, engines, load, one_answer, pick  # noqa: E402

from cograg.models.llm.factory import LOOKUP_ENV  # noqa: E402
from cograg.models.llm.lookup_decoding import PromptLookupDrafts  # noqa: E402


def answer_call(row: dict) -> dict | None:
    """The first answer call's wall time and generated tokens; None for a turn refused before any."""
    call = next((c for c in row["calls"] if c["purpose"] == "generate"), None)
    return None if call is None else {"s": round(call["duration_ms"] / 1000, 2), "tokens": call["completion_tokens"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--draft", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None, help="rows (default results/lookup-decoding-dN.jsonl)")
    args = ap.parse_args()

    os.environ[LOOKUP_ENV] = str(args.draft)  # the model loads with drafts installed; switched per answer
    engs = engines(args.data, args.work, {"llm": "default"})
    llama = engs["hotpotqa"].components.llm.get()._llama  # one model for both stores
    drafts = llama.draft_model
    assert isinstance(drafts, PromptLookupDrafts) and drafts.max_draft == args.draft

    def answer(q: dict, with_drafts: bool) -> dict:
        llama.draft_model = drafts if with_drafts else None
        return one_answer(engs[q["corpus"]], q, None)

    rows = []  # questions with an answer call in both runs
    out = args.out or RESULTS / f"lookup-decoding-d{args.draft}.jsonl"
    with open(out, "w", encoding="utf-8") as fh:
        for i, q in enumerate(pick(args.data, args.n)):
            answer(q, False)  # puts this question's answer prompt in the cache
            order = (True, False) if i % 2 == 0 else (False, True)
            got = {on: answer(q, on) for on in order}
            row = {"question": q["question"], "corpus": q["corpus"], "draft": args.draft, "load": load()}
            for on, r in got.items():
                key = "lookup" if on else "plain"
                row[key] = {"answer": r["answer"], "fallback": r["fallback"], "contains_gold": r["contains_gold"],
                            "latency_s": r["latency_s"], "answer_call": answer_call(r)}
            row["same_text"] = row["lookup"]["answer"] == row["plain"]["answer"]
            if row["plain"]["answer_call"] is None or row["lookup"]["answer_call"] is None:
                print(f"[{i + 1}/{args.n}] no answer call (refused before the model)", flush=True)
                continue
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()
            rows.append(row)
            print(f"[{i + 1}/{args.n}] plain {row['plain']['answer_call']} lookup {row['lookup']['answer_call']} "
                  f"same={row['same_text']} load={row['load']}", flush=True)
    for e in engs.values():
        e.close()

    def med(key: str, field: str) -> float:
        return round(statistics.median(r[key]["answer_call"][field] for r in rows), 2)

    per_token = {k: round(statistics.median(r[k]["answer_call"]["s"] / max(1, r[k]["answer_call"]["tokens"])
                                            for r in rows) * 1000, 1) for k in ("plain", "lookup")}
    summary = {
        "n": len(rows), "draft": args.draft, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "answer_call_median_s": {"plain": med("plain", "s"), "lookup": med("lookup", "s")},
        "answer_call_ms_per_generated_token_median": per_token,
        "answer_median_s": {k: round(statistics.median(r[k]["latency_s"] for r in rows), 2)
                            for k in ("plain", "lookup")},
        "same_text": sum(r["same_text"] for r in rows),
        "contains_gold": {k: sum(bool(r[k]["contains_gold"]) for r in rows) for k in ("plain", "lookup")},
        "answered": {k: sum(not r[k]["fallback"] for r in rows) for k in ("plain", "lookup")},
        "load_min_max": [min(r["load"] for r in rows), max(r["load"] for r in rows)],
    }
    print("summary", json.dumps(summary), flush=True)
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
