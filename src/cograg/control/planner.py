"""The R3 planner (SPEC D3, seed 000 Prompt 2, seed 004 §7.1): a complex question into a dependency
plan of sub-tasks.

The model proposes a plan; `validate_plan` decides whether it can run: schema, unique ids, known
dependencies, no cycles, and the hard budgets `max_nodes` / `max_depth`. A rejected plan is sent
back to the model once with the reason; if the repair is rejected too the planner returns no plan
and the caller degrades (R3 → R2 → R1 → R4, SPEC D4). Nothing here raises on model output.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from graphlib import CycleError, TopologicalSorter
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, create_model

from cograg.control.models import ControlBudget, Plan, SubTask
from cograg.errors import CogragError
from cograg.models import ModelError

PlanErrorKind = Literal[
    "schema", "empty", "too_many_nodes", "empty_description", "duplicate_id", "self_dependency",
    "unknown_dependency", "missing_dependencies", "cycle", "too_deep", "ungrounded", "duplicate_task",
]

# kinds that only make sense over the results of other tasks
_NEEDS_DEPENDENCIES = ("reason", "evidence_merge", "conflict_resolve", "check")


class PlanError(CogragError):
    """A plan that must not run. `kind` names the rule it broke; the message is shown to the model
    in the repair call, so it says what is wrong in plain words."""

    def __init__(self, reason: str, *, kind: PlanErrorKind) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


def _summarise_validation(exc: ValidationError, limit: int = 4) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    if exc.error_count() > limit:
        parts.append(f"and {exc.error_count() - limit} more")
    return "; ".join(parts)


def _coerce_plan(plan_or_raw: Plan | Mapping[str, Any] | str) -> Plan:
    if isinstance(plan_or_raw, Plan):
        # re-validate: a Plan built with model_construct or mutated after creation is not trusted
        raw: Any = plan_or_raw.model_dump()
    elif isinstance(plan_or_raw, str):
        try:
            raw = json.loads(plan_or_raw)
        except json.JSONDecodeError as exc:
            raise PlanError(f"the plan is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                            kind="schema") from None
    else:
        raw = plan_or_raw
    if not isinstance(raw, Mapping) or "sub_tasks" not in raw:
        raise PlanError('the plan must be a JSON object with a "sub_tasks" list', kind="schema")
    try:
        return Plan.model_validate(raw)
    except ValidationError as exc:
        raise PlanError(f"the plan does not match the schema: {_summarise_validation(exc)}", kind="schema") from None


def _find_cycle(tasks: Sequence[SubTask]) -> list[int] | None:
    """One dependency cycle as a closed id path ([1, 2, 3, 1]: 1 depends on 2, 2 on 3, 3 on 1), or None."""
    try:
        TopologicalSorter({t.id: t.dependencies for t in tasks}).prepare()
    except CycleError as exc:
        return list(reversed(exc.args[1]))  # graphlib walks from a task to the tasks that depend on it
    return None


def plan_depths(plan: Plan) -> dict[int, int]:
    """Each task's depth: the number of tasks on the longest dependency chain ending at it
    (a task without dependencies has depth 1). The plan must be acyclic."""
    by_id = {t.id: t for t in plan.sub_tasks}
    depth: dict[int, int] = {}
    for tid in topological_order(plan):
        depth[tid] = 1 + max((depth[d] for d in by_id[tid].dependencies), default=0)
    return depth


def topological_order(plan: Plan) -> list[int]:
    """Task ids so that every task comes after its dependencies, level by level; ties in plan order."""
    position = {t.id: i for i, t in enumerate(plan.sub_tasks)}
    unknown = sorted({d for t in plan.sub_tasks for d in t.dependencies} - position.keys())
    if unknown:
        raise PlanError(f"the plan depends on unknown id(s) {unknown}", kind="unknown_dependency")
    sorter = TopologicalSorter({t.id: t.dependencies for t in plan.sub_tasks})
    try:
        sorter.prepare()
    except CycleError:
        raise PlanError("the plan has a dependency cycle", kind="cycle") from None
    order: list[int] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=position.__getitem__)
        order.extend(ready)
        sorter.done(*ready)
    return order


def sink_ids(plan: Plan) -> list[int]:
    """Tasks no other task depends on: the plan's final results."""
    used = {d for t in plan.sub_tasks for d in t.dependencies}
    return [t.id for t in plan.sub_tasks if t.id not in used]


def validate_plan(plan_or_raw: Plan | Mapping[str, Any] | str, budget: ControlBudget) -> Plan:
    """The plan if it may run, normalised (descriptions stripped, repeated dependency ids dropped);
    else PlanError naming the first rule it breaks. Pure: no I/O, no model."""
    plan = _coerce_plan(plan_or_raw)
    tasks = plan.sub_tasks
    if not tasks:
        raise PlanError("the plan has no sub-tasks", kind="empty")
    if len(tasks) > budget.max_nodes:
        raise PlanError(f"the plan has {len(tasks)} sub-tasks; at most {budget.max_nodes} are allowed",
                        kind="too_many_nodes")
    normalised: list[SubTask] = []
    seen: set[int] = set()
    for t in tasks:
        description = t.description.strip()
        if not description:
            raise PlanError(f"sub-task {t.id} has an empty description", kind="empty_description")
        if t.id in seen:
            raise PlanError(f"sub-task id {t.id} is used more than once; ids must be unique", kind="duplicate_id")
        # the same work twice (same text, kind and inputs); a combining task may restate the question
        same = next((o for o in normalised if " ".join(o.description.lower().split())
                     == " ".join(description.lower().split()) and o.kind == t.kind
                     and sorted(o.dependencies) == sorted(t.dependencies)), None)
        if same is not None:
            raise PlanError(f"sub-tasks {same.id} and {t.id} are the same task (\"{description[:80]}\"); "
                            "plan each piece of work once", kind="duplicate_task")
        seen.add(t.id)
        normalised.append(t.model_copy(update={"description": description,
                                               "dependencies": list(dict.fromkeys(t.dependencies))}))
    for t in normalised:
        if t.id in t.dependencies:
            raise PlanError(f"sub-task {t.id} depends on itself", kind="self_dependency")
        unknown = [d for d in t.dependencies if d not in seen]
        if unknown:
            raise PlanError(f"sub-task {t.id} depends on unknown id(s) {unknown}; known ids are {sorted(seen)}",
                            kind="unknown_dependency")
        if t.kind in _NEEDS_DEPENDENCIES and not t.dependencies:
            raise PlanError(f"sub-task {t.id} has type {t.kind!r} but no dependencies; it needs the results "
                            "of the tasks it works on", kind="missing_dependencies")
    cycle = _find_cycle(normalised)
    if cycle is not None:
        raise PlanError("the plan has a dependency cycle: " + " → ".join(str(i) for i in cycle), kind="cycle")
    checked = Plan(sub_tasks=normalised)
    depths = plan_depths(checked)
    deepest = max(depths, key=lambda tid: depths[tid])
    if depths[deepest] > budget.max_depth:
        raise PlanError(f"the dependency chain ending at sub-task {deepest} is {depths[deepest]} tasks long; "
                        f"at most {budget.max_depth} are allowed", kind="too_deep")
    return checked


def check_grounded(plan: Plan, question: str, facts: Sequence[str] = ()) -> None:
    """PlanError unless every look-up task (one without dependencies) shares at least one content
    word with the request or the known facts. Small models copy the prompt's example plan or drift
    to another topic; such a plan would search for the wrong things and must not run."""
    from cograg.control.router import content_terms

    allowed = content_terms(question)
    for f in facts:
        allowed |= content_terms(f)
    for t in plan.sub_tasks:
        if not t.dependencies and not (content_terms(t.description) & allowed):
            raise PlanError(f"sub-task {t.id} (\"{t.description[:80]}\") is not about the request: it names none "
                            "of the request's own people, places, things or terms", kind="ungrounded")


# --------------------------------------------------------------------------- the planner


class PlanOutcome(BaseModel):
    """What planning produced. `plan` is None when no valid plan came out of the model (the caller
    falls back); `errors` holds why each rejected attempt was rejected, `raw_outputs` what the model
    said each time (for the trace)."""

    plan: Plan | None = None
    template: str | None = None  # the template that planned the question (no model call), if one did
    attempts: int = 0
    errors: list[str] = Field(default_factory=list)
    raw_outputs: list[str] = Field(default_factory=list)
    prompt_version: str = ""
    tokens: int = 0
    duration_ms: float = 0.0


# the repair call is pointless with less time than this left
_MIN_REPAIR_S = 0.5
_MAX_FACTS = 40


def _facts_for_prompt(facts: Sequence[Mapping[str, Any] | Any]) -> list[dict[str, str]]:
    """Ledger facts as {id, statement}; dicts or objects with those attributes (a ledger model)."""
    out: list[dict[str, str]] = []
    for i, fact in enumerate(facts):
        def get(name: str, fact: Any = fact) -> Any:
            return fact.get(name) if isinstance(fact, Mapping) else getattr(fact, name, None)

        statement = str(get("statement") or get("text") or "").strip()
        if statement:
            fact_id = get("id")
            out.append({"id": str(fact_id if fact_id is not None else f"F{i + 1}"), "statement": statement})
    # the newest facts are the most likely to matter to this turn
    return out[-_MAX_FACTS:]


class Planner:
    """A template plan when the question has a known shape (control/plan_templates.py), without a
    model call; else one LLM call for a plan and, if it is unusable, one repair call that shows the
    model its plan and the reason it was rejected. `timeout_s` bounds both calls together."""

    def __init__(self, llm: Any, budget: ControlBudget, timeout_s: float = 120.0, *, max_tokens: int = 512,
                 templates: bool = True) -> None:
        from cograg.prompts import load_prompt

        self.llm = llm
        self.budget = budget
        self.templates = templates
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self.prompt = load_prompt("plan_decompose")
        # The grammar of constrained backends comes from this schema: capping the list there stops a
        # small model that starts repeating tasks. Validation stays with validate_plan, whose
        # messages the repair call shows the model.
        self.schema = create_model("PlanProposal", __base__=Plan, sub_tasks=(
            list[SubTask], Field(json_schema_extra={"maxItems": budget.max_nodes})))

    def _messages(self, question: str, facts: list[dict[str, str]], repair_error: str | None,
                  previous_plan: str) -> list[Any]:
        from cograg.models.llm import ChatMessage

        content = self.prompt.render(question=question, facts=facts, max_nodes=self.budget.max_nodes,
                                     max_depth=self.budget.max_depth, repair_error=repair_error,
                                     previous_plan=previous_plan)
        return [ChatMessage(role="user", content=content)]

    def from_template(self, question: str) -> PlanOutcome | None:
        """The outcome of the template that fits `question`, or None (the model plans it). A
        template plan is held to the same rules as a model's."""
        from cograg.control.plan_templates import template_plan

        start = time.monotonic()
        fitted = template_plan(question)
        if fitted is None:
            return None
        try:
            checked = validate_plan(fitted.plan, self.budget)
            check_grounded(checked, question)
        except PlanError:  # e.g. a budget smaller than the template: the model plans within it
            return None
        return PlanOutcome(plan=checked, template=fitted.name,
                           duration_ms=round((time.monotonic() - start) * 1000.0, 3))

    def plan(self, question: str, facts: Sequence[Mapping[str, Any] | Any] = ()) -> PlanOutcome:
        from cograg.models.llm import LLMOutputError, LLMTimeout

        if self.templates:
            templated = self.from_template(question)
            if templated is not None:
                return templated
        start = time.monotonic()
        deadline = start + self.timeout_s
        prompt_facts = _facts_for_prompt(facts)
        outcome = PlanOutcome(prompt_version=self.prompt.version)
        repair_error: str | None = None
        previous_plan = ""
        for attempt in (1, 2):
            left = deadline - time.monotonic()
            if attempt == 2 and left < _MIN_REPAIR_S:
                outcome.errors.append("no time left for a repair call")
                break
            outcome.attempts = attempt
            messages = self._messages(question, prompt_facts, repair_error, previous_plan)
            try:
                proposed, resp = self.llm.chat_json(messages, self.schema, max_tokens=self.max_tokens,
                                                    timeout_s=max(left, 0.001))
            except LLMOutputError as exc:
                outcome.raw_outputs.append(exc.raw)
                repair_error = f"the reply was not a usable plan: {exc.error}"
                previous_plan = exc.raw or "(empty reply)"
                outcome.errors.append(repair_error)
                continue
            except LLMTimeout as exc:
                outcome.tokens += exc.prompt_tokens + exc.completion_tokens
                outcome.raw_outputs.append(exc.partial_text)
                outcome.errors.append(f"the model timed out: {exc}")
                break  # the deadline covers both calls: a repair would have no time either
            except ModelError as exc:
                outcome.raw_outputs.append("")
                repair_error = f"the model call failed: {exc}"
                previous_plan = "(no reply)"
                outcome.errors.append(repair_error)
                continue
            outcome.tokens += resp.prompt_tokens + resp.completion_tokens
            outcome.raw_outputs.append(resp.text)
            try:
                checked = validate_plan(proposed, self.budget)
                check_grounded(checked, question, [f["statement"] for f in prompt_facts])
                outcome.plan = checked
                break
            except PlanError as exc:
                repair_error = exc.reason
                previous_plan = proposed.model_dump_json(exclude_none=True)
                outcome.errors.append(exc.reason)
        outcome.duration_ms = round((time.monotonic() - start) * 1000.0, 3)
        return outcome
