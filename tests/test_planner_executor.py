"""Planner (SPEC D3) and DAG executor (SPEC D4): plan validation, the planner's one repair call, and
the executor's ordering, parallelism, timeouts, retries, skips, cancellation, budgets and events.
Everything runs on fakes (ScriptedLLM, runner functions); the whole module takes a few seconds."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import pytest

from cograg.answer.contract import Citation
from cograg.control.executor import DAGExecutor, ExecutionReport, merge_evidence
from cograg.control.models import CancelToken, ControlBudget, Plan, SubTask, TaskResult
from cograg.control.planner import PlanError, Planner, check_grounded, sink_ids, validate_plan
from cograg.models.llm import LLMTimeout, LLMUnavailable
from cograg.testing import ScriptedLLM

BUDGET = ControlBudget()


def task(i: int, deps: list[int] | None = None, type: str | None = None, description: str | None = None) -> dict:
    out: dict[str, Any] = {"id": i, "description": description or f"Linden question {i}", "dependencies": deps or []}
    if type:
        out["type"] = type
    return out


def plan_json(*tasks: dict) -> str:
    return json.dumps({"sub_tasks": list(tasks)})


VALID = plan_json(task(1), task(2), task(3, [1, 2]))

# --------------------------------------------------------------------------- validate_plan


@pytest.mark.parametrize(
    ("raw", "kind", "needle"),
    [
        ("not json at all", "schema", "not valid JSON"),
        ({"tasks": []}, "schema", "sub_tasks"),
        ({"sub_tasks": [{"id": 1, "dependencies": []}]}, "schema", "description"),
        ({"sub_tasks": [task(1, type="draft_answer")]}, "schema", "type"),
        ({"sub_tasks": []}, "empty", "no sub-tasks"),
        ({"sub_tasks": [task(1), task(1)]}, "duplicate_id", "id 1"),
        ({"sub_tasks": [task(1), task(2, [7])]}, "unknown_dependency", "[7]"),
        ({"sub_tasks": [task(1, [1])]}, "self_dependency", "itself"),
        ({"sub_tasks": [task(1), task(2, [1, 3]), task(3, [2])]}, "cycle", "2 → 3 → 2"),
        ({"sub_tasks": [task(i) for i in range(1, 10)]}, "too_many_nodes", "9 sub-tasks"),
        ({"sub_tasks": [task(1), task(2, [1]), task(3, [2]), task(4, [3])]}, "too_deep", "4 tasks long"),
        ({"sub_tasks": [task(1, description="   ")]}, "empty_description", "sub-task 1"),
        ({"sub_tasks": [task(1, type="conflict_resolve")]}, "missing_dependencies", "conflict_resolve"),
        ({"sub_tasks": [task(1, type="evidence_merge")]}, "missing_dependencies", "evidence_merge"),
        ({"sub_tasks": [task(1, type="reason")]}, "missing_dependencies", "reason"),
    ],
)
def test_validate_plan_rejects(raw: Any, kind: str, needle: str) -> None:
    with pytest.raises(PlanError) as err:
        validate_plan(raw, BUDGET)
    assert err.value.kind == kind
    assert needle in err.value.reason


def test_validate_plan_accepts_and_normalises() -> None:
    plan = validate_plan(plan_json(task(1, description="  q1 "), task(2), task(3, [1, 2, 1]),
                                   task(4, [3], type="conflict_resolve")), BUDGET)
    assert [t.id for t in plan.sub_tasks] == [1, 2, 3, 4]
    assert plan.sub_tasks[0].description == "q1"
    assert plan.sub_tasks[2].dependencies == [1, 2]  # repeated id dropped
    assert [t.kind for t in plan.sub_tasks] == ["retrieve", "retrieve", "reason", "conflict_resolve"]
    assert sink_ids(plan) == [4]
    # a Plan object and a dict are accepted too; depth 3 is within the default budget
    assert validate_plan(plan, BUDGET) == plan
    assert validate_plan(json.loads(VALID), BUDGET).sub_tasks[2].dependencies == [1, 2]


def test_validate_plan_budget_is_configurable() -> None:
    chain = {"sub_tasks": [task(1), task(2, [1]), task(3, [2]), task(4, [3])]}
    assert len(validate_plan(chain, ControlBudget(max_depth=4)).sub_tasks) == 4
    with pytest.raises(PlanError):
        validate_plan({"sub_tasks": [task(1), task(2)]}, ControlBudget(max_nodes=1))


# --------------------------------------------------------------------------- Planner


def test_planner_valid_plan_first_time() -> None:
    llm = ScriptedLLM([VALID])
    out = Planner(llm, BUDGET, timeout_s=10).plan("Compare A and B in the Linden report",
                                                  [{"id": "f1", "statement": "A was founded in 1990."}])
    assert out.plan is not None and [t.id for t in out.plan.sub_tasks] == [1, 2, 3]
    assert out.attempts == 1 and out.errors == []
    assert out.prompt_version == "plan_decompose@2"
    assert out.tokens > 0 and out.raw_outputs == [VALID]
    prompt = llm.calls[0].messages[-1].content
    assert "Compare A and B in the Linden report" in prompt
    assert '<fact id="f1">A was founded in 1990.</fact>' in prompt
    assert "at most 8 tasks" in prompt and "<rejected_plan>" not in prompt


def test_planner_repairs_invalid_json() -> None:
    # chat_json retries unusable JSON once itself, so two bad answers make one failed planner call
    llm = ScriptedLLM(["no plan here", "still no plan", VALID])
    out = Planner(llm, BUDGET, timeout_s=10).plan("Compare A and B in the Linden report", [])
    assert out.plan is not None and out.attempts == 2
    assert len(out.errors) == 1 and "no JSON object" in out.errors[0]
    repair_prompt = llm.calls[2].messages[-1].content
    assert "<rejected_plan>" in repair_prompt and "still no plan" in repair_prompt
    assert "no JSON object" in repair_prompt


def test_planner_cycle_twice_gives_no_plan() -> None:
    cyclic = plan_json(task(1, [2]), task(2, [1]))
    llm = ScriptedLLM([cyclic, cyclic])
    out = Planner(llm, BUDGET, timeout_s=10).plan("Compare A and B in the Linden report", [])
    assert out.plan is None and out.attempts == 2
    assert len(out.errors) == 2 and all("cycle" in e for e in out.errors)
    repair_prompt = llm.calls[1].messages[-1].content
    assert "dependency cycle" in repair_prompt and '"dependencies":[2]' in repair_prompt


def test_planner_rejects_fifty_nodes_and_shows_why() -> None:
    fifty = plan_json(*(task(i) for i in range(1, 51)))
    llm = ScriptedLLM([fifty, VALID])
    out = Planner(llm, BUDGET, timeout_s=10).plan("Everything about A in the Linden report", [])
    assert out.plan is not None and out.attempts == 2
    assert "50 sub-tasks; at most 8" in out.errors[0]
    assert "50 sub-tasks; at most 8" in llm.calls[1].messages[-1].content


def test_planner_never_raises_on_model_errors() -> None:
    out = Planner(ScriptedLLM([LLMUnavailable("down"), LLMUnavailable("still down")]), BUDGET, timeout_s=10).plan("q", [])
    assert out.plan is None and out.attempts == 2 and len(out.errors) == 2
    # a timeout used the whole planning deadline: no repair call
    out = Planner(ScriptedLLM([LLMTimeout("slow"), VALID]), BUDGET, timeout_s=10).plan("q", [])
    assert out.plan is None and out.attempts == 1 and "timed out" in out.errors[0]


# --------------------------------------------------------------------------- executor helpers


def plan_of(*tasks: dict) -> Plan:
    return Plan.model_validate({"sub_tasks": list(tasks)})


def done(t: SubTask, statement: str = "", tokens: int = 0, citations: list[Citation] | None = None) -> TaskResult:
    return TaskResult(id=t.id, description=t.description, kind=t.kind, status="done",
                      statement=statement or f"answer {t.id}", tokens=tokens, citations=citations or [])


class Recorder:
    """A runner that records calls, inputs and the peak number of concurrent calls."""

    def __init__(self, delay: float = 0.0, tokens: int = 0) -> None:
        self.delay = delay
        self.tokens = tokens
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.calls: list[int] = []
        self.inputs: dict[int, list[int]] = {}

    def __call__(self, t: SubTask, facts: list[TaskResult], token: CancelToken) -> TaskResult:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.calls.append(t.id)
            self.inputs[t.id] = [f.id for f in facts]
        try:
            time.sleep(self.delay)
            return done(t, tokens=self.tokens)
        finally:
            with self.lock:
                self.active -= 1


def runners(r: Any) -> dict[str, Any]:
    return {k: r for k in ("retrieve", "reason", "rewrite", "evidence_merge", "conflict_resolve")}


FAST = ControlBudget(node_timeout_s=0.2, max_wall_s=5.0)


# --------------------------------------------------------------------------- executor


def test_executor_respects_dependencies_and_passes_established_facts() -> None:
    rec = Recorder(delay=0.01)
    events: list[tuple[str, dict]] = []
    plan = plan_of(task(1), task(2), task(3, [2, 1]), task(4, [3], type="conflict_resolve"))
    report = DAGExecutor(runners(rec), FAST, on_event=lambda n, p: events.append((n, p))).run(plan)
    assert report.status == "ok" and report.reason is None
    pos = {i: report.completion_order.index(i) for i in (1, 2, 3, 4)}
    assert pos[3] > pos[1] and pos[3] > pos[2] and pos[4] > pos[3]
    assert rec.inputs[3] == [2, 1] and rec.inputs[4] == [3]  # dependency order, as the plan lists them
    assert report.sinks_done == [4] and report.sink_ids == [4]
    assert [r.id for r in report.done_results()] == report.completion_order
    assert report.results[4].kind == "conflict_resolve" and report.results[4].attempts == 1
    names = [(n, p["id"]) for n, p in events]
    for i in (1, 2, 3, 4):
        assert names.index(("TASK_STARTED", i)) < names.index(("TASK_DONE", i))
    assert names.index(("TASK_DONE", 3)) < names.index(("TASK_STARTED", 4))
    assert report.timings[4].started_ms >= report.timings[3].finished_ms  # type: ignore[operator]
    assert "sinks_done" in report.model_dump()


def test_independent_nodes_run_in_parallel_within_max_parallel() -> None:
    rec = Recorder(delay=0.15)
    report = DAGExecutor(runners(rec), FAST.model_copy(update={"max_parallel": 4})).run(
        plan_of(*(task(i) for i in range(1, 5))))
    assert report.status == "ok"
    assert rec.peak == 4 and report.duration_ms < 450  # overlapped: sequential would be 600 ms

    rec = Recorder(delay=0.05)
    report = DAGExecutor(runners(rec), FAST.model_copy(update={"max_parallel": 2})).run(
        plan_of(*(task(i) for i in range(1, 8)), task(8, list(range(1, 8)))))
    assert report.status == "ok" and rec.peak == 2


def test_hanging_node_times_out_is_retried_once_and_dependents_are_skipped() -> None:
    seen_tokens: list[CancelToken] = []
    release = threading.Event()

    def retrieve(t: SubTask, facts: list[TaskResult], token: CancelToken) -> TaskResult:
        if t.id == 1:
            seen_tokens.append(token)
            release.wait(10)  # not cooperative: ignores its token
        return done(t)

    events: list[tuple[str, dict]] = []
    plan = plan_of(task(1), task(2), task(3, [1, 2]), task(4, [3]))
    started = time.monotonic()
    report = DAGExecutor({"retrieve": retrieve, "reason": retrieve}, FAST,
                         on_event=lambda n, p: events.append((n, p))).run(plan)
    elapsed = time.monotonic() - started
    release.set()
    assert elapsed < 1.0  # two 0.2 s attempts, not the 10 s hang
    assert report.results[1].status == "timeout" and report.results[1].attempts == 2
    assert report.timings[1].attempts == 2 and len(report.timings[1].attempt_ms) == 2
    assert "timed out" in (report.results[1].error or "")
    assert len(seen_tokens) == 2 and all(tok.cancelled for tok in seen_tokens)
    assert report.results[2].status == "done"
    assert report.results[3].status == "skipped" and "dependency 1" in (report.results[3].error or "")
    assert report.results[4].status == "skipped" and "dependency 3" in (report.results[4].error or "")
    assert report.status == "partial" and report.sinks_done == []
    failed = [p for n, p in events if n == "TASK_FAILED" and p["id"] == 1]
    assert [p["retrying"] for p in failed] == [True, False]


def test_node_failing_once_then_succeeding_on_retry() -> None:
    calls: dict[int, int] = {}

    def flaky(t: SubTask, facts: list[TaskResult], token: CancelToken) -> TaskResult:
        calls[t.id] = calls.get(t.id, 0) + 1
        if t.id == 1 and calls[t.id] == 1:
            raise ConnectionError("reset by peer")
        return done(t)

    report = DAGExecutor(runners(flaky), FAST).run(plan_of(task(1), task(2, [1])))
    assert report.status == "ok"
    assert report.results[1].attempts == 2 and report.results[2].attempts == 1
    assert report.timings[1].attempts == 2


def test_returned_failure_is_final_and_unknown_kind_fails() -> None:
    def no_evidence(t: SubTask, facts: list[TaskResult], token: CancelToken) -> TaskResult:
        if t.id == 1:
            return TaskResult(id=1, description="", kind="retrieve", status="failed", error="no evidence", tokens=5)
        return done(t)

    report = DAGExecutor({"retrieve": no_evidence}, FAST).run(plan_of(task(1), task(2), task(3, [1, 2])))
    assert report.results[1].status == "failed" and report.results[1].attempts == 1
    assert report.results[1].error == "no evidence" and report.results[1].description == "Linden question 1"
    # task 3 is a "reason" task and there is no reason runner, but it is skipped first (task 1 failed)
    assert report.results[3].status == "skipped"
    assert report.status == "partial" and report.tokens_used == 5

    report = DAGExecutor({"retrieve": no_evidence}, FAST).run(plan_of(task(2), task(3, [2])))
    assert report.results[3].status == "failed" and "no runner" in (report.results[3].error or "")
    assert report.status == "partial"

    report = DAGExecutor({}, FAST).run(plan_of(task(1)))
    assert report.status == "failed" and "no runner" in (report.reason or "")


def test_invalid_plan_is_a_failed_report() -> None:
    report = DAGExecutor(runners(Recorder()), FAST).run(Plan.model_construct(sub_tasks=[
        SubTask(id=1, description="a", dependencies=[2]), SubTask(id=2, description="b", dependencies=[1])]))
    assert report.status == "failed" and "cycle" in (report.reason or "") and report.results == {}


def test_cancellation_mid_plan_returns_promptly() -> None:
    tokens: list[CancelToken] = []

    def slow(t: SubTask, facts: list[TaskResult], token: CancelToken) -> TaskResult:
        tokens.append(token)
        token.wait(5)  # cooperative
        return done(t)

    cancel = CancelToken()
    threading.Timer(0.1, cancel.cancel, args=("user left",)).start()
    started = time.monotonic()
    report = DAGExecutor(runners(slow), ControlBudget(node_timeout_s=5, max_wall_s=10)).run(
        plan_of(task(1), task(2), task(3, [1, 2])), cancel)
    assert time.monotonic() - started < 0.5
    assert report.status == "cancelled" and report.reason == "user left"
    assert {r.status for r in report.results.values()} == {"cancelled"}
    assert "not started" in (report.results[3].error or "")
    assert len(tokens) == 2 and all(t.cancelled for t in tokens)


def test_token_budget_stops_new_nodes() -> None:
    rec = Recorder(tokens=80)
    report = DAGExecutor(runners(rec), FAST.model_copy(update={"max_total_tokens": 100})).run(
        plan_of(task(1), task(2, [1]), task(3, [2])))
    assert rec.calls == [1, 2]  # 80 tokens after task 1 (< 100), 160 after task 2: task 3 never starts
    assert report.status == "budget_exceeded" and "token budget" in (report.reason or "")
    assert report.tokens_used == 160
    assert report.results[3].status == "skipped" and "token budget" in (report.results[3].error or "")
    assert [r.id for r in report.done_results()] == [1, 2]


def test_wall_budget_abandons_running_nodes() -> None:
    def hang(t: SubTask, facts: list[TaskResult], token: CancelToken) -> TaskResult:
        token.wait(5)
        return done(t)

    started = time.monotonic()
    report = DAGExecutor(runners(hang), ControlBudget(node_timeout_s=5, max_wall_s=0.2)).run(
        plan_of(task(1), task(2, [1])))
    assert time.monotonic() - started < 0.6
    assert report.status == "budget_exceeded" and "wall budget" in (report.reason or "")
    assert report.results[1].status == "timeout" and report.results[2].status == "skipped"


def test_broken_event_listener_does_not_break_the_run() -> None:
    def listener(name: str, payload: dict) -> None:
        raise RuntimeError("listener bug")

    report = DAGExecutor(runners(Recorder()), FAST, on_event=listener).run(plan_of(task(1), task(2, [1])))
    assert isinstance(report, ExecutionReport) and report.status == "ok"


def test_merge_evidence_deduplicates_by_chunk() -> None:
    def cite(i: str, chunk: str) -> Citation:
        return Citation(id=i, doc_id="d", chunk_id=chunk, quote=f"quote {chunk}", source="s.md", score=0.5)

    t1 = TaskResult(id=1, description="a", kind="retrieve", status="done", citations=[cite("1", "c1"), cite("2", "c2")])
    t2 = TaskResult(id=2, description="b", kind="retrieve", status="done", citations=[cite("1", "c2"), cite("2", "c3")])
    merged = merge_evidence([t1, t2])
    assert [c.chunk_id for c in merged] == ["c1", "c2", "c3"]
    assert [c.id for c in merged] == ["1", "2", "3"]
    assert merge_evidence([]) == []


def test_planner_rejects_a_plan_about_something_else_and_repairs_it() -> None:
    """Small models copy the prompt's example or drift off topic: a look-up task must name something
    of the request (or of the known facts)."""
    copied = plan_json(task(1, description="What were Tesla's total sales in Q1 2023?"),
                       task(2, description="What were Tesla's total sales in Q2 2023?"), task(3, [1, 2]))
    good = plan_json(task(1, description="Who designed the Linden Bridge?"),
                     task(2, description="When was the Rhine Bridge opened?"), task(3, [1, 2]))
    llm = ScriptedLLM([copied, good])
    out = Planner(llm, BUDGET, timeout_s=10).plan("Was the designer of the Linden Bridge born before the Rhine "
                                                  "Bridge opened?", [])
    assert out.plan is not None and out.attempts == 2
    assert "is not about the request" in out.errors[0]
    assert "is not about the request" in llm.calls[1].messages[-1].content
    with pytest.raises(PlanError) as exc:
        check_grounded(validate_plan(copied, BUDGET), "银雾是哪一年育成的？")
    assert exc.value.kind == "ungrounded"
    # a known fact's terms count as the request's own
    check_grounded(validate_plan(copied, BUDGET), "How did sales develop?", ["Tesla sold cars in Q1 2023."])


def test_planner_grammar_caps_the_number_of_tasks_and_duplicates_are_rejected() -> None:
    json_schema_to_gbnf = pytest.importorskip(
        "llama_cpp.llama_grammar", reason="needs llama-cpp-python: pip install 'cograg[llm]'").json_schema_to_gbnf

    planner = Planner(ScriptedLLM([]), ControlBudget(max_nodes=5), timeout_s=10)
    grammar = json_schema_to_gbnf(json.dumps(planner.schema.model_json_schema()))
    # at most 5 items (nested optionals): a small model cannot go on adding tasks forever
    rule = next(line for line in grammar.splitlines() if line.startswith("sub-tasks ::="))
    assert rule.count("sub-tasks-item") == 5
    twice = plan_json(task(1, description="Who designed the Linden Bridge?"),
                      task(2, description="who designed  the Linden Bridge?"), task(3, [1, 2]))
    with pytest.raises(PlanError) as exc:
        validate_plan(twice, BUDGET)
    assert exc.value.kind == "duplicate_task"
    # a combining task may restate a look-up's question: different work over different inputs
    restated = plan_json(task(1, description="Who designed the Linden Bridge?"), task(2),
                         task(3, [1, 2], description="Who designed the Linden Bridge?"))
    assert len(validate_plan(restated, BUDGET).sub_tasks) == 3
