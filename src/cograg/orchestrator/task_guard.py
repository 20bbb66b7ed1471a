"""A plan node's models and search, stopped by its attempt's cancel token (SPEC D4).

The executor abandons an attempt (node timeout, the turn stopped) by cancelling its token and moves
on; the attempt's thread cannot be killed. A runner that never looked at the token went on
drafting, regenerating and judging after `Engine.ask` had returned, spending model time nobody
waits for. A call already running finishes (no backend can be interrupted mid-call), but no new one
starts: every model call and search of a node goes through the guards here, which raise
`Cancelled` once a token they watch is cancelled: the attempt's, and the turn's where the runners
have it (the executor passes a stop on to the attempts' tokens only at its next look, tens of
milliseconds later, in which an attempt could start another call). `Cancelled` is a `ModelError`, so the answerer's own
handling ends its drafts ("model failed") and the verifier fails the claim closed; a search raises
it out of the runner, which reports the attempt cancelled (`stops_when_cancelled`).
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable
from typing import Any

from cograg.control.models import CancelToken, SubTask, TaskResult
from cograg.models import ModelError
from cograg.orchestrator.turn import CheckedLLM


class Cancelled(ModelError):
    """A model call or search not made: the attempt's token was cancelled."""


Tokens = tuple[CancelToken, ...]


def check(*tokens: CancelToken | None) -> None:
    """Raise `Cancelled` when any of `tokens` (None: none given) is cancelled."""
    for token in tokens:
        if token is not None and token.cancelled:
            raise Cancelled(f"not made: the attempt was cancelled ({token.reason or 'cancelled'})")


class GuardedLLM(CheckedLLM):
    """`llm`, refusing a new call once one of `tokens` is cancelled; anything else is the model's own."""

    def __init__(self, llm: Any, tokens: Tokens) -> None:
        super().__init__(llm, functools.partial(check, *tokens))


class _GuardedJudge:
    """A judge without a model handle of its own (NLI, lexical), refusing once one of `tokens` is
    cancelled."""

    def __init__(self, judge: Any, tokens: Tokens) -> None:
        self.judge_ = judge
        self.tokens = tokens

    def judge(self, claim: str, passage: str, question: str | None = None) -> Any:
        check(*self.tokens)
        return self.judge_.judge(claim, passage, question)

    def __getattr__(self, name: str) -> Any:
        if name in ("judge_", "tokens"):
            raise AttributeError(name)
        found = getattr(self.judge_, name)
        if name == "judge_many":  # only where the judge has one: the verifier asks for it by name
            def judge_many(*args: Any, **kw: Any) -> Any:
                check(*self.tokens)
                return found(*args, **kw)
            return judge_many
        return found


def guarded_judge(judge: Any, tokens: Tokens) -> Any:
    """`judge` whose calls stop with any of `tokens`. A judge with a model handle keeps its own type, its
    handle guarded (as `recording_verifier` swaps it for a recording one)."""
    if judge is None:
        return None
    if getattr(judge, "llm", None) is not None:
        clone = copy.copy(judge)
        clone.llm = GuardedLLM(judge.llm, tokens)
        return clone
    return _GuardedJudge(judge, tokens)


def guarded_answerer(answerer: Any, tokens: Tokens) -> Any:
    """A copy of `answerer` (a copy: the turn's own serves other nodes) whose model, judge and
    search stop with any of `tokens`."""
    search = answerer.search

    def guarded_search(query: str) -> Any:
        check(*tokens)
        return search(query)

    clone = copy.copy(answerer)
    clone.llm = GuardedLLM(answerer.llm, tokens)
    clone.search = guarded_search
    clone.verifier = copy.copy(answerer.verifier)
    clone.verifier.judge = guarded_judge(answerer.verifier.judge, tokens)
    return clone


def watching(runners: Any, token: CancelToken) -> Any:
    """`runners` (a `plan_tasks.PlanTaskRunners`) with their answerer, model and judge stopped by
    `token` or the turn's `cancel`: a copy, since other attempts have tokens of their own (node
    traces and the lock are shared, the copy being shallow)."""
    if runners._token is token:  # a task kind run by another (a check's reasoning step)
        return runners
    tokens = (token,) if runners.cancel is None else (token, runners.cancel)
    clone = copy.copy(runners)
    clone.answerer = guarded_answerer(runners.answerer, tokens)
    clone.llm = GuardedLLM(runners.llm, tokens)
    clone.judge = guarded_judge(runners.judge, tokens)
    clone._token = token
    return clone


def stops_when_cancelled(run: Callable[..., TaskResult]) -> Callable[..., TaskResult]:
    """A plan task kind (a method of `plan_tasks.PlanTaskRunners`) that makes no model call or
    search once its attempt's token (or the turn's, `cancel`) is cancelled: it runs on the runners
    as `watching` gives them, their models guarded, and a cancelled token ends it as
    `cancelled`."""
    @functools.wraps(run)
    def guarded(self: Any, task: SubTask, deps: list[TaskResult], token: CancelToken, *args: Any,
                **kw: Any) -> TaskResult:
        started = time.perf_counter()
        try:
            check(token, self.cancel)
            return run(watching(self, token), task, deps, token, *args, **kw)
        except Cancelled as exc:
            return TaskResult(id=task.id, description=task.description, kind=task.kind, status="cancelled",
                              error=str(exc), duration_ms=round((time.perf_counter() - started) * 1000, 1))
    return guarded


__all__ = ["Cancelled", "GuardedLLM", "check", "guarded_answerer", "guarded_judge", "stops_when_cancelled", "watching"]
