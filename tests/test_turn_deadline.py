"""A turn's wall budget bounds every model call it makes, not only whether a call may start: each
call's timeout is cut to what is left of the turn (`models.llm.base.calls_end_by`), so llama.cpp's
deadline criterion (or the HTTP client's timeout) ends a call at the turn's end instead of letting
it run its own configured timeout — the judge's 120 s after a 5 s turn. R3's tasks run in their
own threads and are held to the same deadline."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from cograg.control.models import ControlBudget
from cograg.engine import Engine
from cograg.models.judge import LLMJudge
from cograg.models.llm.base import MIN_CALL_TIMEOUT_S, calls_end_by
from cograg.orchestrator.orchestrator import TurnOptions
from cograg.testing import ScriptedLLM
from tests.test_answer import make_engine, with_models
from tests.test_control_flow import DOCS, OPEN, TWO_BRIDGES, Brain, block_with

WALL_S = 5.0


HI = [{"role": "user", "content": "hi"}]


def supported(messages) -> str:
    return json.dumps({"verdict": "SUPPORTED", "reason": "the passage says so"})


def reworded(q: str, text: str) -> dict:
    """Each bridge's opening year in other words than its passage's, so the judge is asked."""
    bridge, year = ("Rhine", "1870") if "rhine" in q.lower() and "linden" not in q.lower() else ("Linden", "1811")
    n = block_with(text, f"opened in {year}")
    if n is None:
        return {"answer": "The documents do not say.", "citations": [], "fallback": True}
    return {"answer": f"The {bridge} Bridge first took traffic in {year} [{n}].",
            "citations": [{"id": n, "quote": ""}], "fallback": False}


def test_a_call_in_a_deadline_scope_gets_no_more_than_the_time_left():
    llm = ScriptedLLM([supported] * 8)
    llm.chat(HI, timeout_s=120)
    with calls_end_by(time.monotonic() + 2):
        llm.chat(HI, timeout_s=120)
        llm.chat(HI)  # no timeout of its own: still the scope's
        with calls_end_by(time.monotonic() + 60):  # an inner scope cannot extend the outer one
            llm.chat(HI, timeout_s=120)
        list(llm.stream(HI, timeout_s=120))
    with calls_end_by(time.monotonic() - 1):  # spent: a valid timeout, spent at once
        llm.chat(HI, timeout_s=120)
    timeouts = [c.kwargs["timeout_s"] for c in llm.calls]
    assert timeouts[0] == 120
    assert all(0 < t <= 2 for t in timeouts[1:5]), timeouts
    assert timeouts[5] == MIN_CALL_TIMEOUT_S


def test_a_thread_started_without_the_context_is_not_bounded():
    # the reason R3's executor starts its task threads in a copy of the turn's context
    llm = ScriptedLLM([supported] * 2)
    with calls_end_by(time.monotonic() + 2):
        t = threading.Thread(target=lambda: llm.chat(HI, timeout_s=120))
        t.start()
        t.join()
    assert llm.calls[0].kwargs["timeout_s"] == 120


@pytest.fixture()
def eng(tmp_path: Path):
    e = make_engine(tmp_path, DOCS)
    yield e
    e.close()


def _turn(eng: Engine, question: str, mode: str, brain: Brain):
    judge_llm = ScriptedLLM([supported] * 200, name="judge")
    answer_llm = ScriptedLLM([brain] * 200, name="answer")
    opts = TurnOptions(answer=OPEN, force_mode=mode, use_llm_router=False,
                       budget=ControlBudget(max_wall_s=WALL_S, plan_templates=False))
    engine = with_models(eng, llm=answer_llm, judge=LLMJudge(judge_llm, timeout_s=120.0))
    resp = engine.ask(question, options=opts)
    return resp, answer_llm.calls, judge_llm.calls


def test_r1_answer_and_judge_calls_end_with_the_turn(eng: Engine):
    resp, answers, judged = _turn(eng, "When did the Linden Bridge open?", "R1_ONE_SHOT_RETRIEVE", Brain(answer=reworded))
    assert "1811" in resp.answer and answers and judged
    assert all(c.kwargs["timeout_s"] <= WALL_S for c in answers + judged), \
        sorted({c.kwargs["timeout_s"] for c in answers + judged})


def test_r3_task_threads_end_with_the_turn(eng: Engine):
    resp, answers, judged = _turn(eng, "Which opened first, the Linden Bridge or the Rhine Bridge?", "R3_DAG_PLAN",
                                  Brain(plan=TWO_BRIDGES, answer=reworded))
    assert resp.mode == "R3_DAG_PLAN" and "1811" in resp.answer and len(judged) >= 2
    assert all(c.kwargs["timeout_s"] <= WALL_S for c in answers + judged), \
        sorted({c.kwargs["timeout_s"] for c in answers + judged})
