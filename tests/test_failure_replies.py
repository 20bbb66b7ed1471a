"""What a turn tells the user when a part fails (SPEC C4, D4): what failed, in the user's language —
never that the sources do not establish an answer when the model failed, never that the question is
ambiguous when a mode failed, and never an exception out of Engine.ask for a plugged-in backend's
connection error."""

from __future__ import annotations

from pathlib import Path

import pytest

from cograg.control.models import ControlBudget
from cograg.engine import Engine
from cograg.errors import StoreError
from cograg.messages import failure_reason
from cograg.orchestrator.orchestrator import TurnOptions
from cograg.testing import ScriptedLLM
from tests.test_answer import make_engine, with_models
from tests.test_control_flow import DOCS, OPEN

R1 = TurnOptions(answer=OPEN, use_llm_router=False, force_mode="R1_ONE_SHOT_RETRIEVE")


@pytest.fixture()
def eng(tmp_path: Path):
    e = make_engine(tmp_path, DOCS)
    yield e
    e.close()


def test_a_model_timeout_while_drafting_blames_the_model_not_the_sources_and_is_not_retried(eng: Engine):
    llm = ScriptedLLM([TimeoutError("read timed out")] * 5)
    resp = with_models(eng, llm=llm).ask("When did the Linden Bridge open?", options=R1)
    assert resp.fallback
    assert "took too long" in resp.answer
    assert "do not establish" not in resp.answer and "ambiguous" not in resp.answer
    assert resp.citations and resp.citations[0].quote in resp.answer  # the closest evidence still shown
    assert len(llm.calls) == 1  # a timeout is not asked again: it would spend the time twice


def test_a_plugged_in_backends_connection_error_is_a_reply_not_an_exception(eng: Engine):
    llm = ScriptedLLM([ConnectionError("connection reset by peer")] * 9)
    resp = with_models(eng, llm=llm).ask("When did the Linden Bridge open?",
                                         options=TurnOptions(answer=OPEN, use_llm_router=False))
    assert resp.fallback and "could not be used" in resp.answer
    assert "do not establish" not in resp.answer


def test_a_failed_mode_ends_the_chain_saying_what_failed_not_that_the_question_is_ambiguous(
        eng: Engine, monkeypatch: pytest.MonkeyPatch):
    def unreadable(*args, **kwargs):
        raise StoreError("the chunk index could not be read")
    answering = with_models(eng, llm=ScriptedLLM([]))
    monkeypatch.setattr(answering, "retrieve", unreadable)
    resp = answering.ask("When did the Linden Bridge open?", options=R1)
    assert resp.fallback and resp.route == "CLARIFY"
    assert "document store could not be read" in resp.answer and "ambiguous" not in resp.answer
    assert any("StoreError" in n for n in resp.notes)  # the detail stays in the notes and the trace
    t = eng.trace(resp.trace_id)
    assert [m["mode"] for m in t["outcome"]["modes_tried"]] == ["R1_ONE_SHOT_RETRIEVE", "R4_CLARIFY"]


def test_a_spent_budget_is_said_in_the_users_language(eng: Engine):
    def slow_bad_plan(messages) -> str:
        import time
        time.sleep(0.6)
        return "not a plan"
    llm = ScriptedLLM([slow_bad_plan] * 5)
    opts = TurnOptions(answer=OPEN, use_llm_router=False, force_mode="R3_DAG_PLAN",
                       budget=ControlBudget(max_wall_s=1.0, plan_templates=False))
    resp = with_models(eng, llm=llm).ask("林登桥和莱茵桥哪一座先建成？", options=opts)
    assert resp.fallback and resp.clarification
    assert "预算已用完" in resp.answer and "budget" not in resp.answer
    assert "time budget" in resp.notes[0]


@pytest.mark.parametrize("detail,expected", [
    ("R1: LLMTimeout: no reply in 30 s", "took too long"),
    ("cancelled: client disconnected", "stopped"),
    ("the turn's token budget (100) is used up (180 used); R3: planner failed", "ran out"),
    ("R1: StoreError: disk I/O error", "document store"),
    ("R3: ModelError: the model file is damaged", "could not be used"),
])
def test_failure_reasons_read_as_a_user_reads_them(detail: str, expected: str):
    assert expected in failure_reason(detail, "en")
    assert failure_reason(detail, "zh") != failure_reason(detail, "en")
