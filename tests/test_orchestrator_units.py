"""State machine (D6), event bus and synthesizer (D5) as units; the whole turn is in
test_control_flow.py."""

from __future__ import annotations

import json
import threading

import pytest

from cograg.answer.contract import Citation
from cograg.answer.verifier import Verifier
from cograg.control.models import TaskResult
from cograg.control.synthesizer import CitationNumbering, Synthesizer, resolve_task_citations
from cograg.models.judge import LexicalJudge
from cograg.models.llm import LLMOutputError
from cograg.orchestrator.events import BusEvent, EventBus
from cograg.orchestrator.state_machine import Action, State, TurnStateMachine
from cograg.testing import ScriptedLLM


def run(events: list[tuple[str, dict]]) -> TurnStateMachine:
    m = TurnStateMachine()
    for name, data in events:
        m.handle(name, data)
    return m


@pytest.mark.parametrize("events,final,path", [
    ([("USER_INPUT_RECEIVED", {}), ("ROUTE_DECIDED", {"mode": "R1_ONE_SHOT_RETRIEVE"}), ("RETRIEVED", {}),
      ("DRAFT_READY", {}), ("VERIFIED", {}), ("ANSWER_READY", {})],
     State.DONE, ["IDLE", "ROUTING", "RETRIEVING", "DRAFTING", "VERIFYING", "DONE"]),
    ([("USER_INPUT_RECEIVED", {}), ("ROUTE_DECIDED", {"mode": "R2_MULTI_RETRIEVE"}), ("RETRIEVED", {}),
      ("GRADED", {}), ("QUERY_REWRITTEN", {}), ("RETRIEVED", {}), ("GRADED", {}), ("EVIDENCE_SELECTED", {}),
      ("DRAFT_READY", {}), ("VERIFIED", {}), ("ANSWER_READY", {})],
     State.DONE, ["IDLE", "ROUTING", "RETRIEVING", "GRADING", "RETRIEVING", "GRADING", "DRAFTING", "VERIFYING",
                  "DONE"]),
    ([("USER_INPUT_RECEIVED", {}), ("ROUTE_DECIDED", {"mode": "R3_DAG_PLAN"}), ("PLAN_READY", {}),
      ("TASK_STARTED", {}), ("TASK_DONE", {}), ("EXECUTION_DONE", {}), ("DRAFT_READY", {}), ("VERIFIED", {}),
      ("ANSWER_READY", {})],
     State.DONE, ["IDLE", "ROUTING", "PLANNING", "EXECUTING", "SYNTHESIZING", "VERIFYING", "DONE"]),
    ([("USER_INPUT_RECEIVED", {}), ("ROUTE_DECIDED", {"mode": "R3_DAG_PLAN"}), ("PLAN_READY", {}),
      ("TASK_DONE", {}), ("CONFLICT_DETECTED", {})],
     State.REQUESTING_CLARIFICATION, ["IDLE", "ROUTING", "PLANNING", "EXECUTING", "REQUESTING_CLARIFICATION"]),
    ([("USER_INPUT_RECEIVED", {}), ("ROUTE_DECIDED", {"mode": "R3_DAG_PLAN"}), ("PLAN_FAILED", {}),
      ("FALLBACK", {}), ("FALLBACK_STARTED", {"mode": "R2_MULTI_RETRIEVE"}), ("RETRIEVED", {}), ("GRADED", {}),
      ("EVIDENCE_SELECTED", {}), ("REFUSED", {})],
     State.REFUSED, ["IDLE", "ROUTING", "PLANNING", "FALLING_BACK", "RETRIEVING", "GRADING", "DRAFTING", "REFUSED"]),
    ([("USER_INPUT_RECEIVED", {}), ("ROUTE_DECIDED", {"mode": "R5_BLOCK"}), ("REFUSED", {})],
     State.BLOCKED, ["IDLE", "ROUTING", "BLOCKED"]),
    ([("USER_INPUT_RECEIVED", {}), ("ROUTE_DECIDED", {"mode": "R4_CLARIFY"})],
     State.REQUESTING_CLARIFICATION, ["IDLE", "ROUTING", "REQUESTING_CLARIFICATION"]),
    ([("USER_INPUT_RECEIVED", {}), ("ROUTE_DECIDED", {"mode": "R0_DIRECT_WRITE"}), ("DRAFT_READY", {}),
      ("ANSWER_READY", {})], State.DONE, ["IDLE", "ROUTING", "WRITING", "VERIFYING", "DONE"]),
    ([("USER_INPUT_RECEIVED", {}), ("ROUTE_DECIDED", {"mode": "R3_DAG_PLAN"}), ("PLAN_READY", {}),
      ("CANCELLED", {})], State.CANCELLED, ["IDLE", "ROUTING", "PLANNING", "EXECUTING", "CANCELLED"]),
])
def test_state_machine_paths(events, final, path):
    m = run(events)
    assert m.state is final
    assert m.history == path
    assert m.anomalies == []
    assert m.finished


def test_state_machine_records_out_of_order_events_as_anomalies_and_keeps_informational_ones_quiet():
    m = run([("USER_INPUT_RECEIVED", {}), ("PLAN_READY", {}), ("MODEL_ERROR", {"error": "x"})])
    assert m.state is State.ROUTING
    assert m.anomalies == ["PLAN_READY in ROUTING"]


def test_state_machine_names_the_next_step_of_the_turn():
    m = TurnStateMachine()
    assert m.next_action() is Action.RECEIVE
    m.handle("USER_INPUT_RECEIVED")
    assert m.next_action() is Action.ROUTE
    m.handle("ROUTE_DECIDED", {"mode": "R3_DAG_PLAN"})
    assert m.next_action() is Action.RUN_MODE and m.start_mode() == "R3_DAG_PLAN"
    assert m.next_action() is Action.FINISH  # while the mode runs, its own events move the machine
    m.handle("PLAN_FAILED")
    assert m.next_action() is Action.FALL_BACK and m.fallback_mode() == "R2_MULTI_RETRIEVE"
    m.handle("FALLBACK_STARTED", {"mode": "R2_MULTI_RETRIEVE"})
    assert m.next_action() is Action.RUN_MODE and m.start_mode() == "R2_MULTI_RETRIEVE"
    # a mode whose target state is terminal (R4 writes its question there) still runs
    r4 = run([("USER_INPUT_RECEIVED", {}), ("ROUTE_DECIDED", {"mode": "R4_CLARIFY"})])
    assert r4.finished and r4.next_action() is Action.RUN_MODE
    r4.start_mode()
    assert r4.next_action() is Action.FINISH and r4.fallback_mode() is None


def test_event_bus_delivers_drops_a_broken_subscriber_and_streams():
    bus = EventBus()
    got: list[str] = []
    bus.subscribe(lambda e: got.append(e.name))

    def broken(e: BusEvent) -> None:
        raise RuntimeError("client went away")
    bus.subscribe(broken)
    events, close = bus.stream()
    streamed: list[str] = []
    reader = threading.Thread(target=lambda: streamed.extend(e.name for e in events))
    reader.start()
    for name in ("USER_INPUT_RECEIVED", "ROUTE_DECIDED"):
        bus.publish(BusEvent(trace_id="t", name=name, at_ms=0.0, state="IDLE"))
    close()
    reader.join(timeout=5)
    assert got == ["USER_INPUT_RECEIVED", "ROUTE_DECIDED"]
    assert streamed == ["USER_INPUT_RECEIVED", "ROUTE_DECIDED"]
    assert len(bus.errors) == 1 and "client went away" in bus.errors[0]


CHUNKS = {"c1": "The Linden Bridge opened in 1811.", "c2": "The Rhine Bridge opened in 1870.",
          "c3": "Tea grows on hills."}


def cit(i: str, chunk: str) -> Citation:
    return Citation(id=i, doc_id="d" + chunk, chunk_id=chunk, quote=CHUNKS[chunk], source=f"{chunk}.md", score=1.0)


def results() -> dict[int, TaskResult]:
    return {1: TaskResult(id=1, description="When did the Linden Bridge open?", kind="retrieve", status="done",
                          statement="The Linden Bridge opened in 1811 [1].", citations=[cit("1", "c1")]),
            2: TaskResult(id=2, description="When did the Rhine Bridge open?", kind="retrieve", status="done",
                          statement="The Rhine Bridge opened in 1870 [1].", citations=[cit("1", "c2")])}


def test_task_citations_resolve_to_the_chunks_behind_each_task():
    numbering = CitationNumbering()
    text = ("The Linden Bridge opened in 1811 [cite: task, 1]. The Rhine Bridge opened in 1870 [cite: task, 2]. "
            "So the Linden Bridge is older [cite: task, 1, 2]. It is also prettier. Ghost [cite: task, 9].")
    sentences, unknown, uncited = resolve_task_citations(text, results(), numbering)
    assert sentences == ["The Linden Bridge opened in 1811 [1].", "The Rhine Bridge opened in 1870 [2].",
                         "So the Linden Bridge is older [1][2]."]
    assert unknown == [9]
    assert uncited == 2
    assert [c.chunk_id for c in numbering.citations] == ["c1", "c2"]


def test_a_task_id_of_thousands_of_digits_is_an_unknown_task_not_a_crash():
    text = "The Linden Bridge opened in 1811 [cite: task, " + "9" * 5000 + "]. The Rhine Bridge opened in 1870 [cite: task, 2]."
    sentences, unknown, uncited = resolve_task_citations(text, results(), CitationNumbering())
    assert sentences == ["The Rhine Bridge opened in 1870 [1]."]
    assert unknown == [-1] and uncited == 1


def synthesizer(llm) -> Synthesizer:
    return Synthesizer(llm, Verifier(LexicalJudge()), chunk_text=CHUNKS.__getitem__)


def test_synthesis_is_verified_against_the_resolved_chunks():
    llm = ScriptedLLM([json.dumps({"answer": "The Linden Bridge opened in 1811 [cite: task, 1]. "
                                             "The Rhine Bridge opened in 1870 [cite: task, 2]. "
                                             "Tea grows on hills [cite: task, 1]."})])
    out = synthesizer(llm).synthesize("Which bridge is older?", list(results().values()))
    assert out.method == "model"
    assert out.answer == "The Linden Bridge opened in 1811 [1]. The Rhine Bridge opened in 1870 [2]."
    assert [c.chunk_id for c in out.citations] == ["c1", "c2"]
    dropped = [c for c in out.claims if not c.kept]
    assert len(dropped) == 1 and dropped[0].sentence.startswith("Tea grows")


def test_synthesis_falls_back_to_the_verified_task_statements():
    for reply in (LLMOutputError("garbage"), json.dumps({"answer": "No citations here at all."})):
        out = synthesizer(ScriptedLLM([reply, reply, reply])).synthesize("Which bridge is older?",
                                                                          list(results().values()))
        assert out.method == "task_statements"
        assert out.answer == "The Linden Bridge opened in 1811 [1]. The Rhine Bridge opened in 1870 [2]."
        assert [c.id for c in out.citations] == ["1", "2"]


def test_two_steps_that_established_the_same_fact_read_once():
    # seen on HotpotQA: "Both Never Cry Wolf and Big Hero 6 films were released by what label?" answered
    # "Walt Disney Pictures [1]. Walt Disney Pictures [1]." from its two look-ups
    same = {1: TaskResult(id=1, description="Which bridge opened in 1811?", kind="retrieve", status="done",
                          statement="The Linden Bridge opened in 1811 [1].", citations=[cit("1", "c1")]),
            2: TaskResult(id=2, description="What opened in 1811?", kind="retrieve", status="done",
                          statement="the Linden Bridge opened in 1811 [1]", citations=[cit("1", "c1")])}
    out = synthesizer(ScriptedLLM([LLMOutputError("garbage")] * 3)).synthesize("What opened in 1811?",
                                                                                list(same.values()))
    assert out.answer == "The Linden Bridge opened in 1811 [1]."
    from cograg.answer.contract import distinct_sentences
    assert distinct_sentences(["A b [1].", "a  B [2]", "C [1]."]) == ["A b [1].", "C [1]."]
    assert distinct_sentences(["银雾于1978年育成[1]。", "银雾于1978年育成[2]"]) == ["银雾于1978年育成[1]。"]
