"""One turn's context: its options, the evidence it has seen, and the wiring of its three
observers, each with one job — the trace records what happened, the state machine decides where
the turn is and what it does next, the event bus tells subscribers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, Field, field_validator

from cograg.trace import Trace, TraceEvent
from cograg.config import AnswerConfig, ControlBudget, Settings
from cograg.control.models import CancelToken, mode_name
from cograg.orchestrator.events import BusEvent, EventBus
from cograg.orchestrator.state_machine import State, TurnStateMachine
from cograg.retrieval.hops import is_hop_query
from cograg.retrieval.models import SearchHit, SearchResult

T = TypeVar("T")


class TurnOptions(BaseModel):
    """Per-turn settings: the answer contract (C) and the control budgets (D)."""

    answer: AnswerConfig = Field(default_factory=AnswerConfig)
    budget: ControlBudget = Field(default_factory=ControlBudget)
    force_mode: str | None = Field(None, description="skip the router's choice (benchmarks, --mode): R0…R5")
    use_llm_router: bool = Field(False, description="ask the model for routing scores too (routing.router_llm)")

    @field_validator("force_mode")
    @classmethod
    def _full_mode_name(cls, v: str | None) -> str | None:
        return None if v is None else mode_name(v)

    @classmethod
    def from_settings(cls, settings: Settings) -> TurnOptions:
        return cls(answer=settings.answer, budget=settings.control, use_llm_router=settings.routing.router_llm)


class ModeFailed(Exception):
    """A mode could not produce an answer; the orchestrator falls back to the next one."""


def guard(fn: Callable[[], T], mode: str) -> T:
    """Run one stage; a model, store, timeout or connection error makes the mode fail (→ fallback).
    OSError covers a pluggable backend's own network failure (ConnectionError, socket errors) that
    it did not wrap in ModelError: the turn falls back instead of raising out of Engine.ask."""
    from cograg.errors import CogragError
    from cograg.models import ModelError

    try:
        return fn()
    except (ModelError, CogragError, TimeoutError, OSError) as exc:
        raise ModeFailed(f"{mode}: {type(exc).__name__}: {exc}") from exc


class CheckedLLM:
    """A model handle that calls `before()` ahead of every new call; `before` raises (a ModelError)
    to refuse it, which the caller handles as any failed call. A call already running is not
    stopped: no backend can be interrupted mid-call. Everything else is the wrapped model's. One
    wrapper for the turn's budget (`BudgetedLLM`) and a plan node's cancel tokens
    (`task_guard.GuardedLLM`)."""

    def __init__(self, llm: Any, before: Callable[[], None]) -> None:
        self.llm = llm
        self.before = before

    def chat(self, messages: list[Any], **kw: Any) -> Any:
        self.before()
        return self.llm.chat(messages, **kw)

    def chat_json(self, messages: list[Any], schema: Any, **kw: Any) -> Any:
        self.before()
        return self.llm.chat_json(messages, schema, **kw)

    def for_role(self, role: str) -> CheckedLLM:
        """The same model in another role, still checked (the wrapped one's for_role would not be)."""
        from cograg.trace import with_role

        return CheckedLLM(with_role(self.llm, role), self.before)

    def __getattr__(self, name: str) -> Any:  # name, count_tokens, prompt …: the wrapped model's
        if name.startswith("__") or name in ("llm", "before"):
            raise AttributeError(name)  # not half-built (copy, pickle): no recursion into self.llm
        return getattr(self.llm, name)


class BudgetedLLM(CheckedLLM):
    """A model handle that makes no call once its turn's token account or wall budget is spent:
    ModelError instead (the planner skips its repair, the synthesizer falls back to the task
    statements)."""

    def __init__(self, llm: Any, turn: Turn) -> None:
        def within_budget() -> None:
            from cograg.models import ModelError

            spent = turn.budget_spent()
            if spent is not None:
                raise ModelError(f"no model call: {spent}")
        super().__init__(llm, within_budget)


class TurnEvidence:
    """Every hit one turn has seen (reason tasks cite their inputs' chunks) and the turn's best
    calibrated evidence score (R2 keeps the refusal floor over all its searches). A follow-up hop's
    search is kept but not scored: its query holds a passage's text, so its cosine (0.95 where the
    question's own search had 0.83) is that passage's likeness to itself and would open the floor."""

    def __init__(self) -> None:
        self.hits: dict[str, SearchHit] = {}
        self.best: tuple[float | None, str | None] = (None, None)
        self.searches: list[dict[str, Any]] = []

    def recording(self, search: Callable[[str, int], SearchResult], k: int) -> Callable[[str], SearchResult]:
        """`search` with k fixed, keeping every hit and the best calibrated score it returns."""
        def recorded(query: str) -> SearchResult:
            result = search(query, k)
            self.searches.append({"query": query, "chunk_ids": [h.chunk_id for h in result.hits],
                                  "evidence": result.evidence_score,
                                  "fusion": result.fusion.model_dump() if result.fusion else None})
            hop = is_hop_query(query, self.hits.values())
            for h in result.hits:
                self.hits.setdefault(h.chunk_id, h)
            best, _ = self.best
            if not hop and result.evidence_score is not None and (best is None or result.evidence_score > best):
                self.best = (result.evidence_score, result.evidence_source)
            return result
        return recorded


class Turn:
    """The context of one turn. Stages report events into `trace` (`trace.event(...)`); each one
    moves `machine` and goes onto `bus` with the state it led to."""

    def __init__(self, question: str, options: TurnOptions, bus: EventBus, cancel: CancelToken,
                 evidence: TurnEvidence | None = None) -> None:
        self.question = question
        self.options = options
        self.cancel = cancel
        self.bus = bus
        self.evidence = evidence or TurnEvidence()
        self.trace = Trace(question=question)
        self.machine = TurnStateMachine()
        self.started = time.perf_counter()
        # the turn's one wall budget, on the clock the executor and the corrective loop use: every
        # mode and fallback gets what is left of it, never a fresh max_wall_s
        self.deadline = time.monotonic() + options.budget.max_wall_s
        self.modes_tried: list[dict[str, Any]] = []
        self.failure = ""  # why the last mode failed (the fallback step reports it)
        self.session: Any = None  # the conversation memory's SessionTurn, when the turn is in a session
        self.cache_hit = False
        self.cached: Any = None  # the answer cache's reply, served by the mode step
        self._lock = threading.Lock()  # plan tasks report from several threads
        self.trace.states.append(State.IDLE.value)
        self.trace.subscribe(self._on_event)

    def _on_event(self, ev: TraceEvent) -> None:
        with self._lock:
            state = self.machine.handle(ev.name, ev.data)
            if self.trace.states[-1] != state.value:
                self.trace.states.append(state.value)
        self.bus.publish(BusEvent(trace_id=self.trace.trace_id, name=ev.name, at_ms=ev.at_ms, state=state.value,
                                  data=ev.data))

    def event(self, name: str, **data: Any) -> None:
        self.trace.event(name, **data)

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    @property
    def wall_left_s(self) -> float:
        return self.deadline - time.monotonic()

    @property
    def tokens_used(self) -> int:
        """Model tokens the turn has spent so far: every call recorded in its trace (routing,
        planner, plan tasks once merged, synthesis, every fallback mode), one account (SPEC D4)."""
        return sum(c.prompt_tokens + c.completion_tokens for c in list(self.trace.model_calls))

    @property
    def tokens_left(self) -> int:
        return self.options.budget.max_total_tokens - self.tokens_used

    def budget_spent(self) -> str | None:
        """Why no further model call fits the turn's budgets (tokens, wall time), or None."""
        budget = self.options.budget
        if self.tokens_left <= 0:
            return f"the turn's token budget ({budget.max_total_tokens}) is used up ({self.tokens_used} used)"
        if self.wall_left_s <= 0:
            return f"the turn's time budget ({budget.max_wall_s:g} s) is used up"
        return None

    def timeout_s(self, llm_timeout_s: float) -> float:
        """A model call's timeout: the configured one, or less when the turn's wall budget ends sooner."""
        return max(min(llm_timeout_s, self.wall_left_s), 0.001)

    @property
    def lang(self) -> str:
        from cograg.text import language_of

        return language_of(self.question)


__all__ = ["BudgetedLLM", "CheckedLLM", "ModeFailed", "Turn", "TurnEvidence", "TurnOptions", "guard"]
