"""The DAG executor (SPEC D4, seed 000 component 3 "Executor", seed 004 §7.2 and §13.4).

Pure orchestration: it runs the sub-tasks of a validated plan in dependency order, independent ones
in parallel, and knows nothing of retrieval or models — what a task does is the job of the runner
registered for its kind (`SubTask.kind`). A runner gets the task, the results of its dependencies
(`established_facts`, in dependency order) and a cancel token for that attempt, and returns a
TaskResult.

Rules (the model proposed the plan; these decide how much of it runs):

- at most `max_parallel` attempts at once; a task starts when all its dependencies are done;
- per-node timeout `node_timeout_s`: the attempt is abandoned (its token is cancelled so a
  cooperative runner stops; threads cannot be killed) and retried up to `node_retries` times;
- a runner that *raises* is retried the same way (transient: model timeout, connection reset); a
  runner that *returns* a non-done result has judged the task (e.g. no evidence) and is not retried;
- a task whose dependency did not finish is `skipped`, with the reason;
- the caller's cancel token stops everything: no new attempt, running attempts' tokens cancelled,
  the run returns at once (status `cancelled`);
- token budget (sum of TaskResult.tokens) and wall budget (`max_wall_s`), each capped by what the
  caller's turn has left (`tokens_left`, `deadline`): once exceeded no new attempt starts (status
  `budget_exceeded`); attempts running when the wall budget ends are abandoned, attempts running
  when the token budget ends may finish.

Attempts run on daemon threads, one per attempt: an abandoned, hung runner keeps its thread but
never blocks the run's return or interpreter exit (ThreadPoolExecutor joins its workers on both).

Run status, for the caller's fallback decision (R3 → R2 → R1 → R4):

- `ok`: every task is done — synthesize from the sink results;
- `partial`: some tasks are done, others failed/timed out/were skipped. `sinks_done` says which
  final tasks finished; `done_results()` is what can still be synthesized from (a partial answer
  that names what is missing, seed 004 §13.4), or the caller degrades to R2;
- `failed`: no task finished — fall back;
- `cancelled`: the caller's token was cancelled before the plan finished;
- `budget_exceeded`: the token or wall budget stopped the plan before it finished (`reason` says
  which); done results are still in the report.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

from cograg.answer.contract import Citation
from cograg.control.models import CancelToken, ControlBudget, Plan, SubTask, TaskResult, TaskStatus
from cograg.control.planner import PlanError, sink_ids, topological_order, validate_plan

log = logging.getLogger(__name__)

Runner = Callable[[SubTask, list[TaskResult], CancelToken], TaskResult]
EventSink = Callable[[str, dict[str, Any]], None]
RunStatus = Literal["ok", "partial", "failed", "cancelled", "budget_exceeded"]

TASK_STARTED = "TASK_STARTED"
TASK_DONE = "TASK_DONE"
TASK_FAILED = "TASK_FAILED"

# how often the scheduler looks at the caller's cancel token while waiting for attempts
_POLL_S = 0.02


class NodeTiming(BaseModel):
    """One task's run: offsets in ms from the start of the run, one duration per attempt."""

    id: int
    kind: str
    status: TaskStatus
    attempts: int = 0
    started_ms: float | None = None
    finished_ms: float | None = None
    attempt_ms: list[float] = Field(default_factory=list)
    error: str | None = None


class ExecutionReport(BaseModel):
    status: RunStatus
    reason: str | None = None
    # every task of the plan has an entry, whatever its status
    results: dict[int, TaskResult] = Field(default_factory=dict)
    # ids in the order their final status was decided (done or not)
    completion_order: list[int] = Field(default_factory=list)
    sink_ids: list[int] = Field(default_factory=list)
    tokens_used: int = 0
    duration_ms: float = 0.0
    timings: dict[int, NodeTiming] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sinks_done(self) -> list[int]:
        """Final tasks that finished: with all of them the plan's answer exists."""
        return [i for i in self.sink_ids if i in self.results and self.results[i].status == "done"]

    def done_results(self) -> list[TaskResult]:
        """Done results in completion order: what a synthesizer can work from."""
        return [self.results[i] for i in self.completion_order if self.results[i].status == "done"]


@dataclass
class _Attempt:
    number: int
    token: CancelToken
    started: float
    deadline: float


@dataclass
class _Node:
    task: SubTask
    status: TaskStatus | None = None  # None until final
    attempts: int = 0
    attempt_ms: list[float] = field(default_factory=list)
    started: float | None = None
    finished: float | None = None
    result: TaskResult | None = None
    error: str | None = None


def _run_attempt(runner: Runner, task: SubTask, facts: list[TaskResult], token: CancelToken,
                 key: tuple[int, int], outbox: queue.Queue[tuple[tuple[int, int], Any, BaseException | None]]) -> None:
    try:
        outbox.put((key, runner(task, facts, token), None))
    except BaseException as exc:  # noqa: BLE001 - whatever the runner raised is the scheduler's to judge
        outbox.put((key, None, exc))


class DAGExecutor:
    """Runs a plan with the runners registered per task kind (`retrieve`, `reason`, `rewrite`,
    `evidence_merge`, `conflict_resolve`). `on_event(name, payload)` is called from the thread
    that called `run` for every start and end of a task (TASK_STARTED / TASK_DONE / TASK_FAILED);
    an exception in it is logged, never propagated."""

    def __init__(self, runners: dict[str, Runner], budget: ControlBudget, on_event: EventSink | None = None) -> None:
        self.runners = dict(runners)
        self.budget = budget
        self.on_event = on_event

    # ------------------------------------------------------------------ helpers

    def _emit(self, name: str, payload: dict[str, Any]) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(name, payload)
        except Exception:  # a broken progress listener must not break the plan
            log.exception("executor event listener failed on %s", name)

    def run(self, plan: Plan, cancel: CancelToken | None = None, *, tokens_left: int | None = None,
            deadline: float | None = None) -> ExecutionReport:
        """Run `plan`. A turn that spent tokens or time before the plan (routing, planning) passes
        what is left: `tokens_left` caps `max_total_tokens`, `deadline` (time.monotonic) the
        wall budget, whichever is smaller — the plan never gets a fresh budget of its own."""
        start = time.monotonic()
        try:
            plan = validate_plan(plan, self.budget)
        except PlanError as exc:
            return ExecutionReport(status="failed", reason=f"invalid plan: {exc.reason}",
                                   duration_ms=round((time.monotonic() - start) * 1000.0, 3))
        limits = _Limits.of(self.budget, start, tokens_left, deadline)
        return _Run(self, plan, cancel, start, limits).execute()


@dataclass(frozen=True)
class _Limits:
    """The token and wall limits of one run, with the words its stop reason uses."""

    tokens: int
    deadline: float
    wall_s: float

    @staticmethod
    def of(budget: ControlBudget, start: float, tokens_left: int | None, deadline: float | None) -> _Limits:
        tokens = budget.max_total_tokens if tokens_left is None else max(min(budget.max_total_tokens, tokens_left), 0)
        end = start + budget.max_wall_s if deadline is None else min(start + budget.max_wall_s, deadline)
        return _Limits(tokens=tokens, deadline=end, wall_s=max(end - start, 0.0))


class _Run:
    """The state of one `DAGExecutor.run`; all of it is touched by the scheduling thread only."""

    def __init__(self, executor: DAGExecutor, plan: Plan, cancel: CancelToken | None, start: float,
                 limits: _Limits) -> None:
        self.ex = executor
        self.budget = executor.budget
        self.cancel = cancel
        self.start = start
        self.limits = limits
        self.wall_deadline = limits.deadline
        self.order = topological_order(plan)
        self.sinks = sink_ids(plan)
        self.nodes = {t.id: _Node(t) for t in plan.sub_tasks}
        self.running: dict[int, _Attempt] = {}
        self.outbox: queue.Queue[tuple[tuple[int, int], Any, BaseException | None]] = queue.Queue()
        self.completion_order: list[int] = []
        self.tokens = 0
        self.stop_reason: str | None = None  # set when a budget forbids new attempts

    def _ms(self, t: float | None) -> float | None:
        return None if t is None else round((t - self.start) * 1000.0, 3)

    # ------------------------------------------------------------------ state changes

    def _finish(self, node: _Node, status: TaskStatus, error: str | None = None,
                result: TaskResult | None = None) -> None:
        node.status = status
        node.error = error
        node.finished = time.monotonic()
        task = node.task
        node.result = (result or TaskResult(id=task.id, description=task.description, kind=task.kind,
                                            status=status)).model_copy(update={
            "id": task.id, "description": task.description, "kind": task.kind, "status": status,
            "error": error if status != "done" else None, "attempts": node.attempts,
            "duration_ms": round(sum(node.attempt_ms), 3)})
        self.completion_order.append(task.id)
        payload: dict[str, Any] = {"id": task.id, "kind": task.kind, "status": status, "attempt": node.attempts,
                                   "duration_ms": node.result.duration_ms, "tokens": node.result.tokens}
        if status == "done":
            self.ex._emit(TASK_DONE, payload)
        else:
            self.ex._emit(TASK_FAILED, {**payload, "error": error, "retrying": False})

    def _start(self, node: _Node, runner: Runner) -> None:
        task = node.task
        node.attempts += 1
        now = time.monotonic()
        node.started = node.started or now
        token = CancelToken()
        self.running[task.id] = _Attempt(node.attempts, token, now, now + self.budget.node_timeout_s)
        facts = [self.nodes[d].result for d in task.dependencies]
        self.ex._emit(TASK_STARTED, {"id": task.id, "kind": task.kind, "description": task.description,
                                     "dependencies": list(task.dependencies), "attempt": node.attempts})
        # in a copy of this context: the turn's deadline for model calls (models.llm.base.calls_end_by)
        # holds in the task's thread too
        context = contextvars.copy_context()
        threading.Thread(target=context.run, name=f"cograg-task-{task.id}-{node.attempts}", daemon=True,
                         args=(_run_attempt, runner, task, facts, token, (task.id, node.attempts),
                               self.outbox)).start()

    def _attempt_failed(self, node: _Node, status: TaskStatus, error: str) -> None:
        """An attempt raised or timed out: retry while attempts are left, else the node fails."""
        if node.attempts <= self.budget.node_retries:
            self.ex._emit(TASK_FAILED, {"id": node.task.id, "kind": node.task.kind, "status": status,
                                        "attempt": node.attempts, "error": error, "retrying": True})
            return  # stays pending; it restarts through the normal ready check (parallel and budget limits)
        self._finish(node, status, error)

    def _collect(self, key: tuple[int, int], out: Any, exc: BaseException | None) -> None:
        node_id, number = key
        attempt = self.running.get(node_id)
        if isinstance(out, TaskResult):
            self.tokens += out.tokens  # spent even when the attempt was abandoned meanwhile
        if attempt is None or attempt.number != number:
            return  # a late answer from an abandoned attempt
        del self.running[node_id]
        node = self.nodes[node_id]
        node.attempt_ms.append(round((time.monotonic() - attempt.started) * 1000.0, 3))
        if exc is not None:
            self._attempt_failed(node, "failed", f"runner raised {type(exc).__name__}: {exc}")
        elif not isinstance(out, TaskResult):
            self._finish(node, "failed", f"runner returned {type(out).__name__}, not a TaskResult")
        elif out.status == "done":
            self._finish(node, "done", result=out)
        else:
            status: TaskStatus = out.status if out.status in ("failed", "timeout") else "failed"
            self._finish(node, status, out.error or f"runner reported {out.status}", result=out)

    def _check_timeouts(self, now: float) -> None:
        for node_id, attempt in list(self.running.items()):
            if now >= attempt.deadline:
                attempt.token.cancel("node timeout")
                del self.running[node_id]
                node = self.nodes[node_id]
                node.attempt_ms.append(round((now - attempt.started) * 1000.0, 3))
                self._attempt_failed(node, "timeout", f"attempt {attempt.number} timed out after "
                                                      f"{self.budget.node_timeout_s:g} s")

    def _skip_blocked(self) -> None:
        # topological order: a skip propagates to all descendants in one pass
        for node_id in self.order:
            node = self.nodes[node_id]
            if node.status is not None or node_id in self.running:
                continue
            blocked = [d for d in node.task.dependencies
                       if self.nodes[d].status is not None and self.nodes[d].status != "done"]
            if blocked:
                d = blocked[0]
                self._finish(node, "skipped", f"dependency {d} did not finish ({self.nodes[d].status}: "
                                              f"{self.nodes[d].error})")

    def _start_ready(self) -> None:
        for node_id in self.order:
            if len(self.running) >= self.budget.max_parallel:
                return
            node = self.nodes[node_id]
            if node.status is not None or node_id in self.running:
                continue
            if not all(self.nodes[d].status == "done" for d in node.task.dependencies):
                continue
            runner = self.ex.runners.get(node.task.kind)
            if runner is None:
                self._finish(node, "failed", f"no runner for task kind {node.task.kind!r}")
                continue
            self._start(node, runner)

    def _abandon_all(self, running_status: TaskStatus, pending_status: TaskStatus, why: str) -> None:
        for node_id, attempt in list(self.running.items()):
            attempt.token.cancel(why)
            del self.running[node_id]
            node = self.nodes[node_id]
            node.attempt_ms.append(round((time.monotonic() - attempt.started) * 1000.0, 3))
            self._finish(node, running_status, why)
        for node_id in self.order:
            if self.nodes[node_id].status is None:
                self._finish(self.nodes[node_id], pending_status, f"not started: {why}")

    # ------------------------------------------------------------------ the loop

    def execute(self) -> ExecutionReport:
        cancelled = False
        while True:
            now = time.monotonic()
            if self.cancel is not None and self.cancel.cancelled:
                cancelled = True
                self._abandon_all("cancelled", "cancelled", f"run cancelled ({self.cancel.reason})")
                break
            if now >= self.wall_deadline:
                self.stop_reason = f"wall budget of {self.limits.wall_s:.3g} s exceeded"
                self._abandon_all("timeout", "skipped", self.stop_reason)
                break
            self._check_timeouts(now)
            self._skip_blocked()
            if self.stop_reason is None and self.tokens >= self.limits.tokens:
                self.stop_reason = f"token budget of {self.limits.tokens} exceeded ({self.tokens} used)"
                if self.limits.tokens < self.budget.max_total_tokens:  # the caller's turn spent the rest
                    self.stop_reason += f"; the turn had {self.limits.tokens} of {self.budget.max_total_tokens} left"
            if self.stop_reason is None:
                self._start_ready()
                self._skip_blocked()  # a node failed for want of a runner blocks its dependents now
            if not self.running:
                if self.stop_reason is not None:
                    self._abandon_all("skipped", "skipped", self.stop_reason)
                if all(n.status is not None for n in self.nodes.values()):
                    break
                # unreachable for a validated DAG (the first pending task in topological order can
                # always start or be skipped); kept so a bug can never spin this loop forever
                self._abandon_all("skipped", "skipped", "scheduler found no runnable task")
                break
            wait = min(_POLL_S, self.wall_deadline - now, *(a.deadline - now for a in self.running.values()))
            try:
                item = self.outbox.get(timeout=max(wait, 0.0))
            except queue.Empty:
                continue
            self._collect(*item)
            while True:  # everything else that arrived meanwhile, before deciding what to start
                try:
                    item = self.outbox.get_nowait()
                except queue.Empty:
                    break
                self._collect(*item)
        return self._report(cancelled)

    def _report(self, cancelled: bool) -> ExecutionReport:
        results = {i: n.result for i, n in self.nodes.items() if n.result is not None}
        done = [i for i, r in results.items() if r.status == "done"]
        reason: str | None = None
        status: RunStatus
        if len(done) == len(self.nodes):
            status = "ok"
        elif cancelled:
            status, reason = "cancelled", self.cancel.reason if self.cancel else "cancelled"
        elif self.stop_reason is not None:
            status, reason = "budget_exceeded", self.stop_reason
        elif done:
            missing = [i for i in self.order if i not in done]
            status, reason = "partial", f"task(s) {missing} did not finish"
        else:
            first = next((self.nodes[i] for i in self.completion_order if self.nodes[i].status != "skipped"), None)
            status, reason = "failed", f"no task finished ({first.error if first else 'nothing ran'})"
        timings = {i: NodeTiming(id=i, kind=n.task.kind, status=n.status or "skipped", attempts=n.attempts,
                                 started_ms=self._ms(n.started), finished_ms=self._ms(n.finished),
                                 attempt_ms=n.attempt_ms, error=n.error)
                   for i, n in self.nodes.items()}
        return ExecutionReport(status=status, reason=reason, results=results, completion_order=self.completion_order,
                               sink_ids=self.sinks, tokens_used=self.tokens,
                               duration_ms=round((time.monotonic() - self.start) * 1000.0, 3), timings=timings)


def merge_evidence(results: list[TaskResult]) -> list[Citation]:
    """The citations of `results` with each chunk once (first occurrence wins, order kept) and ids
    renumbered "1", "2", … — the per-task ids collide across tasks, so the merged list gets its own."""
    from cograg.control.synthesizer import CitationNumbering

    numbering = CitationNumbering()
    for result in results:
        for citation in result.citations:
            numbering.number(citation)
    return numbering.citations
