"""What the model's roles sharing one llama.cpp context with swapped KV states (`models/llm/role_states`) buys.

One process, the default 1.5B model, the example corpus; the same turns run twice:

- `shared`: every role on one context with no swapping (each call keeps only what it shares with
  the call just before it, as the grader, rewriter, planner and synthesizer did before);
- `roles`: each role (answer, judge, grade, rewrite, plan, synthesize, route) keeps its own last
  prompt's KV state, swapped in and out of the one context.

The turns: the end-to-end test's R2 question (grading threshold 1.0, one rewrite) and its R3
comparison. Per turn: wall seconds, prompt tokens evaluated (not served from a cache) and the
answer call's cached tokens. Also the resident memory of loading the judge as a second
`llama_cpp.Llama` (how `for_role` worked before) against a role handle on the loaded model.

    .venv/bin/python benchmarks/role_states.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import Settings, default_model_cache  # noqa: E402
from cograg.control.models import ControlBudget  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.models.llm.llama_cpp import LlamaCppLLM  # noqa: E402
from cograg.orchestrator.orchestrator import TurnOptions  # noqa: E402

TURNS = [
    ("R2", "When did public transport in Lindenport begin?",
     TurnOptions(force_mode="R2", budget=ControlBudget(grade_pass_threshold=1.0, max_rewrite_attempts=1))),
    ("R3", "Which opened first, the Linden Bridge or the Lindenport horse-drawn tramway?",
     TurnOptions(force_mode="R3", budget=ControlBudget(max_wall_s=600, node_timeout_s=240))),
]


def rss_mb() -> int:
    with open("/proc/self/status", encoding="utf-8") as fh:
        return int(fh.read().split("VmRSS:")[1].split()[0]) // 1024


def run(variant: str, cache: Path) -> list[dict]:
    original = LlamaCppLLM.for_role
    if variant == "shared":
        LlamaCppLLM.for_role = lambda self, role: self  # type: ignore[method-assign]
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(store=Path(tmp) / "store", llm="default", judge="llm", model_cache=cache)
            with Engine.open(settings=settings) as eng:
                eng.ingest([REPO / "examples" / "corpus"])
                eng.ask("Who designed the stone Linden Bridge?")  # warm: the model loaded, the answer head cached
                for label, question, options in TURNS:
                    t0 = time.perf_counter()
                    resp = eng.ask(question, options=options)
                    wall = time.perf_counter() - t0
                    calls = eng.trace(resp.trace_id)["model_calls"]
                    answer_calls = [c for c in calls if c["purpose"].endswith("generate")]
                    rows.append({
                        "variant": variant, "turn": label, "mode": resp.mode, "fallback": resp.fallback,
                        "wall_s": round(wall, 1),
                        "prompt_tokens": sum(c["prompt_tokens"] for c in calls),
                        "evaluated_tokens": sum(c["prompt_tokens"] - (c.get("cached_tokens") or 0) for c in calls),
                        "answer_cached_tokens": [c.get("cached_tokens") for c in answer_calls],
                        "prompt_eval_s": round(sum((c.get("prompt_eval_ms") or 0) for c in calls) / 1000, 1),
                        "answer": resp.answer[:160],
                    })
                    print(json.dumps(rows[-1], ensure_ascii=False), file=sys.stderr, flush=True)
    finally:
        LlamaCppLLM.for_role = original  # type: ignore[method-assign]
    return rows


def memory(cache: Path) -> dict:
    from cograg.models.model_files import ensure_model

    path = ensure_model("default", cache)
    before = rss_mb()
    llm = LlamaCppLLM(path)
    loaded = rss_mb()
    t0 = time.perf_counter()
    second = LlamaCppLLM(path)  # what `for_role` did before: a second Llama on the same file
    second_s = time.perf_counter() - t0
    two = rss_mb()
    second.close()
    before_handle = rss_mb()
    handle = llm.for_role("judge")
    handle_mb = rss_mb() - before_handle
    shares = handle._llama is llm._llama
    llm.close()
    return {"model_mb": loaded - before, "second_llama_mb": two - loaded, "second_llama_load_s": round(second_s, 2),
            "role_handle_mb": handle_mb, "role_handle_shares_model": shares}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-cache", type=Path, default=default_model_cache())
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report = {"load_average": os.getloadavg(), "memory": memory(args.model_cache),
              "rows": run("shared", args.model_cache) + run("roles", args.model_cache)}
    report["load_average_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=1))
        return
    print(f"memory: {report['memory']}")
    print("| variant | turn | mode | wall s | prompt tokens | evaluated | answer calls' cached tokens |")
    print("|---|---|---|---:|---:|---:|---|")
    for r in report["rows"]:
        print(f"| {r['variant']} | {r['turn']} | {r['mode']} | {r['wall_s']} | {r['prompt_tokens']} | "
              f"{r['evaluated_tokens']} | {r['answer_cached_tokens']} |")
    print(f"load average before {report['load_average']}, after {report['load_average_after']}")


if __name__ == "__main__":
    main()
