"""The model calls of the end-to-end tests' R2 and R3 turns, one by one: purpose, prompt tokens,
cached tokens, completion tokens and seconds, on the example corpus and the default 1.5B model (the
questions and budgets of tests/test_e2e_control.py). For finding where a turn's time goes.

    .venv/bin/python benchmarks/turn_calls.py [r2] [r3]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import Settings, default_model_cache  # noqa: E402
from cograg.control.models import ControlBudget  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.orchestrator.orchestrator import TurnOptions  # noqa: E402

TURNS = {
    "r2": ("When did public transport in Lindenport begin?",
           TurnOptions(force_mode="R2", budget=ControlBudget(grade_pass_threshold=1.0, max_rewrite_attempts=1))),
    "r3": ("Which opened first, the Linden Bridge or the Lindenport horse-drawn tramway?",
           TurnOptions(force_mode="R3", budget=ControlBudget(max_wall_s=600, node_timeout_s=240))),
}


def main() -> None:
    which = [a.lower() for a in sys.argv[1:]] or list(TURNS)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(store=Path(tmp) / "store", llm="default", judge="llm",
                            model_cache=default_model_cache())
        with Engine.open(settings=settings) as eng:
            t0 = time.perf_counter()
            eng.ingest([REPO / "examples" / "corpus"])
            print(f"ingest {time.perf_counter() - t0:.1f} s", flush=True)
            for name in which:
                question, options = TURNS[name]
                t0 = time.perf_counter()
                resp = eng.ask(question, options=options)
                print(f"{name}: {resp.mode} fallback={resp.fallback} {time.perf_counter() - t0:.1f} s | {resp.answer[:100]}")
                print("  purpose | prompt | cached | completion | s")
                for c in eng.trace(resp.trace_id)["model_calls"]:
                    print(f"  {c['purpose']} | {c['prompt_tokens']} | {c.get('cached_tokens')} | "
                          f"{c['completion_tokens']} | {c['duration_ms'] / 1000:.1f}", flush=True)


if __name__ == "__main__":
    main()
