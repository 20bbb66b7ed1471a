"""One turn, one budget, one stop button (SPEC D4) and what a partial reply may say (C1, C3): the
model proposes, the system decides. Whole turns through the orchestrator with the scripted model
of test_control_flow.py, which answers each prompt by its content.

- A partial R3 reply names what is missing in words the system chose — never the planner's text
  (an invented claim with a real citation marker, a phone number, pages of padding).
- The token budget is one account for the turn: planner, plan tasks, synthesis and every fallback;
  once it is spent no synthesis, no repair call and no fallback mode runs.
- A turn stopped mid-plan delivers no answer and ends CANCELLED.
- The wall budget is the turn's: a fallback mode runs on what is left of it.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from cograg.answer.contract import answer_sentences
from cograg.control.models import CancelToken, ControlBudget
from cograg.engine import Engine
from cograg.orchestrator.events import EventBus
from tests.test_answer import make_engine
from tests.test_control_flow import DOCS, TWO_BRIDGES, Brain, ask, block_with

BRIDGES_Q = "Which opened first, the Linden Bridge or the Rhine Bridge?"
CYCLE = {"sub_tasks": [  # a plan the executor can never run: the planner is asked once more, then R3 fails
    {"id": 1, "description": "When did the Linden Bridge open?", "dependencies": [2]},
    {"id": 2, "description": "When did the Rhine Bridge open?", "dependencies": [1]}]}
MARKER = re.compile(r"\[\d+\]")


@pytest.fixture()
def eng(tmp_path: Path):
    e = make_engine(tmp_path, DOCS)
    yield e
    e.close()


def tokens_by_purpose(eng: Engine, resp, prefix: str) -> list[int]:
    return [c["prompt_tokens"] + c["completion_tokens"] for c in eng.trace(resp.trace_id)["model_calls"]
            if c["purpose"].startswith(prefix)]


def unverified_text(resp) -> str:
    """The answer without its verified sentences: what the system wrote around them."""
    rest = resp.answer
    for claim in resp.claims:
        if claim.kept:
            rest = rest.replace(claim.sentence, "")
    return rest


# --------------------------------------------------------------------------- A: partial replies


def test_a_partial_reply_never_repeats_the_planners_words(eng: Engine):
    """The planner's sub-task is a question, then an invented claim citing [1] and a phone number,
    then 3,000 words of padding; its look-up finds nothing. The reply names the missing part by the
    user's own words, bounded, with no marker the verifier did not check."""
    hostile = ("When did the Rhine Bridge open? The Linden Bridge collapsed in 1990, killing 40 people [1]. "
               "Call +1-555-0100 to claim compensation [1]." + " pad" * 3000)
    plan = {"sub_tasks": [
        {"id": 1, "description": "When did the Linden Bridge open?", "dependencies": []},
        {"id": 2, "description": hostile, "dependencies": []},
        {"id": 3, "description": "Which of the two bridges opened first?", "dependencies": [1, 2]}]}

    def answer(q: str, text: str) -> dict:
        n = block_with(text, "opened in 1811")
        if q.startswith("When did the Linden") and n:
            return {"answer": f"The Linden Bridge opened in 1811 [{n}].", "citations": [{"id": n, "quote": ""}],
                    "fallback": False}
        return {"answer": "The documents do not say.", "citations": [], "fallback": True}

    resp = ask(eng, Brain(plan=plan, answer=answer), BRIDGES_Q, mode="R3")
    assert resp.fallback and "The Linden Bridge opened in 1811 [1]." in resp.answer
    for planted in ("collapsed", "1990", "555", "compensation", "pad"):
        assert planted not in resp.answer
    assert len(resp.answer) < 400
    assert not MARKER.search(unverified_text(resp))  # every marker is in a sentence the verifier kept
    missing = resp.answer.split("Not established: ", 1)[1]
    assert "Rhine Bridge" in missing  # still says which part: in the question's words


def test_a_chinese_partial_reply_names_the_missing_part_by_the_questions_words(eng: Engine):
    hostile = "哪个研究所育成了银雾？银雾在1990年造成40人死亡[1]。请致电+1-555-0100索赔。" + "填充" * 3000
    plan = {"sub_tasks": [
        {"id": 1, "description": "银雾是哪一年育成的？", "dependencies": []},
        {"id": 2, "description": hostile, "dependencies": []},
        {"id": 3, "description": "谁在2001年培育了银雾？", "dependencies": []},  # a year the user never gave
        {"id": 4, "description": "哪个研究所育成了银雾？", "dependencies": []},
        {"id": 5, "description": "银雾是哪一年、由哪个研究所育成的？", "dependencies": [1, 2, 3, 4]}]}

    def answer(q: str, text: str) -> dict:
        n = block_with(text, "1978")
        if "哪一年" in q and "研究所" not in q and n:
            return {"answer": f"银雾于1978年育成[{n}]。", "citations": [{"id": n, "quote": ""}], "fallback": False}
        return {"answer": "", "citations": [], "fallback": True}

    resp = ask(eng, Brain(plan=plan, answer=answer), "银雾是哪一年育成的？是哪个研究所育成的？", mode="R3")
    assert resp.fallback and resp.answer.startswith("现有资料只能确定部分答案。银雾于1978年育成[1]。")
    for planted in ("1990", "死亡", "555", "索赔", "填充", "2001"):
        assert planted not in resp.answer
    assert len(resp.answer) < 200 and not MARKER.search(unverified_text(resp))
    missing = resp.answer.split("未能确定：", 1)[1]
    assert "“银雾”" in missing  # the hostile task, by the question's words
    assert "哪个研究所育成了银雾？" in missing  # a sub-question in the user's words is shown as written


def test_a_statement_is_never_shown_as_a_missing_question():
    """Made only of the user's words, "The Linden Bridge opened first." is still the planner's claim."""
    from cograg.orchestrator.missing_parts import name_missing

    assert name_missing("The Linden Bridge opened first.", BRIDGES_Q, "en", trusted=False) == (
        "the part of the question about “opened first”, “Linden Bridge”")
    assert name_missing("When did the Rhine Bridge open?", BRIDGES_Q, "en", trusted=False) == (
        "When did the Rhine Bridge open?")
    assert name_missing("Why did the Rhine Bridge collapse?", BRIDGES_Q, "en", trusted=False) == (
        "the part of the question about “Rhine Bridge”")
    assert name_missing("Who sells tickets?", BRIDGES_Q, "en", trusted=False) == "a part of the question"


# --------------------------------------------------------------------------- B: one token account


def plan_tokens(eng: Engine, plan) -> int:
    """What the planner's reply to this question costs (a turn with room to spare)."""
    resp = ask(eng, Brain(plan=plan), BRIDGES_Q, mode="R3")
    return tokens_by_purpose(eng, resp, "plan")[0]


def test_no_synthesis_once_the_plan_spent_the_turns_tokens(eng: Engine):
    """The planner's tokens count: with one token left after planning, the two look-ups start (the
    budget is checked before a call), the reasoning task does not, and neither does a synthesis."""
    budget = ControlBudget(max_total_tokens=plan_tokens(eng, TWO_BRIDGES) + 1)
    brain = Brain(plan=TWO_BRIDGES)
    resp = ask(eng, brain, BRIDGES_Q, mode="R3", budget=budget)
    t = eng.trace(resp.trace_id)
    assert t["plan"]["report"]["status"] == "budget_exceeded"
    assert "synthesize" not in brain.kinds and not tokens_by_purpose(eng, resp, "task3")
    assert resp.fallback and resp.answer.startswith("The budget for this question ran out")
    assert "The Linden Bridge opened in 1811 [1]." in resp.answer
    assert "The Rhine Bridge opened in 1870 [2]." in resp.answer
    assert not MARKER.search(unverified_text(resp))


def test_a_spent_budget_stops_the_planners_repair_and_the_fallbacks(eng: Engine):
    """The first plan reply spends the whole budget: no repair call, no R2, a reply that says why."""
    brain = Brain(plan=CYCLE, grade=lambda q, doc: {"is_relevant": True, "confidence": 0.9, "reasoning": "ok"})
    resp = ask(eng, brain, BRIDGES_Q, mode="R3", budget=ControlBudget(max_total_tokens=100))
    assert brain.kinds == ["plan"]
    assert resp.fallback and resp.clarification and "token budget (100) is used up" in resp.notes[0]
    t = eng.trace(resp.trace_id)
    assert [m["mode"] for m in t["outcome"]["modes_tried"]] == ["R3_DAG_PLAN"]


def test_a_fallback_runs_on_the_tokens_the_failed_mode_left(eng: Engine):
    """R3's two plan calls (a cycle, then its repair) are paid from the turn's account; R2 after it
    grades with what is left, not with a fresh budget (fresh, it would grade every hit and pass)."""
    brain = Brain(plan=CYCLE)
    resp = ask(eng, brain, BRIDGES_Q, mode="R3")
    planned = sum(tokens_by_purpose(eng, resp, "plan"))
    grade = tokens_by_purpose(eng, resp, "grade")[0]
    assert eng.trace(resp.trace_id)["loop"]["stop_reason"] == "grade_passed"  # the unlimited turn

    brain = Brain(plan=CYCLE)
    resp = ask(eng, brain, BRIDGES_Q, mode="R3", budget=ControlBudget(max_total_tokens=planned + 2 * grade))
    loop = eng.trace(resp.trace_id)["loop"]
    assert brain.kinds.count("plan") == 2
    assert loop["stop_reason"] == "token_budget" and brain.kinds.count("grade") <= 3


# --------------------------------------------------------------------------- C: the stop button


def test_a_turn_stopped_mid_plan_delivers_no_answer(eng: Engine):
    """One look-up is done when the user stops the turn during the other: no synthesis, no answer
    from the half that was found, and the turn ends CANCELLED."""
    cancel, linden_done = CancelToken(), threading.Event()
    bus = EventBus()
    bus.subscribe(lambda e: linden_done.set() if e.name == "TASK_DONE" and e.data.get("id") == 1 else None)

    def on_call(text: str) -> None:
        if "<retrieved_documents>" in text and "Rhine Bridge open?" in text:
            linden_done.wait(5)
            cancel.cancel("user pressed stop")

    brain = Brain(plan=TWO_BRIDGES, on_call=on_call)
    resp = ask(eng, brain, BRIDGES_Q, mode="R3", cancel=cancel, bus=bus)
    t = eng.trace(resp.trace_id)
    assert {n["id"]: n["status"] for n in t["plan"]["nodes"]}[1] == "done"
    assert "synthesize" not in brain.kinds
    assert resp.fallback and "1811" not in resp.answer
    assert t["states"][-1] == "CANCELLED"


def test_a_turn_stopped_during_the_synthesis_delivers_no_answer(eng: Engine):
    cancel = CancelToken()

    def synth(text: str) -> dict:
        cancel.cancel("user pressed stop")
        return {"answer": "The Linden Bridge opened in 1811 [cite: task, 1]. "
                          "The Rhine Bridge opened in 1870 [cite: task, 2]."}

    resp = ask(eng, Brain(plan=TWO_BRIDGES, synth=synth), BRIDGES_Q, mode="R3", cancel=cancel)
    assert resp.fallback and "1811" not in resp.answer
    assert eng.trace(resp.trace_id)["states"][-1] == "CANCELLED"


# --------------------------------------------------------------------------- D: one wall budget


def test_a_fallback_runs_on_the_time_the_failed_mode_left(eng: Engine):
    """A slow planner that never plans (about 1 s of the turn's 1.5 s), then R2 with a slow grader
    that passes nothing: the loop gets the half second left, not a fresh 1.5 s."""
    def plan(text: str) -> str:
        time.sleep(0.25)
        return "not a plan"

    def grade(q: str, doc: str) -> dict:
        time.sleep(0.3)
        return {"is_relevant": False, "confidence": 0.9, "reasoning": "off topic"}

    brain = Brain(plan=plan, grade=grade)
    started = time.perf_counter()
    resp = ask(eng, brain, BRIDGES_Q, mode="R3", budget=ControlBudget(max_wall_s=1.5, max_rewrite_attempts=10))
    elapsed = time.perf_counter() - started
    t = eng.trace(resp.trace_id)
    assert [m["mode"] for m in t["outcome"]["modes_tried"]][:2] == ["R3_DAG_PLAN", "R2_MULTI_RETRIEVE"]
    assert t["loop"]["stop_reason"] == "wall_budget"
    assert t["loop"]["total_duration_ms"] < 1200  # fresh, the loop would have run 1.5 s
    assert elapsed < 2.2


def test_the_plan_runs_on_the_time_planning_left(eng: Engine):
    """A planner that takes 1 s of the turn's 1.5 s: a hanging look-up is abandoned when the turn's
    time is up, not 1.5 s after the plan started."""
    def plan(text: str) -> dict:
        time.sleep(1.0)
        return TWO_BRIDGES

    brain = Brain(plan=plan, hang_on="Rhine Bridge open")
    started = time.perf_counter()
    resp = ask(eng, brain, BRIDGES_Q, mode="R3", budget=ControlBudget(max_wall_s=1.5, node_timeout_s=30))
    elapsed = time.perf_counter() - started
    t = eng.trace(resp.trace_id)
    assert t["plan"]["report"]["status"] == "budget_exceeded" and "synthesize" not in brain.kinds
    assert t["plan"]["report"]["duration_ms"] < 900
    assert elapsed < 2.1
    assert resp.fallback and "The Linden Bridge opened in 1811 [1]." in resp.answer
    assert answer_sentences(resp.answer)[0].startswith("The budget for this question ran out")
