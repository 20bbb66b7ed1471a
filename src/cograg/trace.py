"""Per-answer trace (SPEC F5): route, prompt versions, retrieved ids, model calls with tokens and
durations, verdicts and events. Saved in the store; `cograg trace ID` prints it."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr


class ModelCall(BaseModel):
    purpose: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration_ms: float = 0.0
    ok: bool = True
    error: str | None = None
    cached_tokens: int | None = None  # prompt tokens the backend reused from its KV cache
    prompt_eval_ms: float | None = None
    eval_ms: float | None = None
    threads: int | None = None


class TraceEvent(BaseModel):
    name: str
    at_ms: float
    data: dict[str, Any] = Field(default_factory=dict)


class Trace(BaseModel):
    trace_id: str = Field(default_factory=lambda: "tr_" + uuid.uuid4().hex[:16])
    question: str = ""
    route: str = ""
    prompt_versions: dict[str, str] = Field(default_factory=dict)
    retrieved: list[dict[str, Any]] = Field(default_factory=list)
    searches: list[dict[str, Any]] = Field(default_factory=list, description="every search of the turn, in order")
    context_blocks: list[dict[str, Any]] = Field(default_factory=list)
    model_calls: list[ModelCall] = Field(default_factory=list)
    drafts: list[dict[str, Any]] = Field(default_factory=list, description="the answer model's drafts, validated or "
                                         "rejected (C2); never streamed as events: they are unverified")
    verdicts: list[dict[str, Any]] = Field(default_factory=list)
    injection_flags: list[dict[str, Any]] = Field(default_factory=list)
    events: list[TraceEvent] = Field(default_factory=list)
    outcome: dict[str, Any] = Field(default_factory=dict)
    mode: str = ""
    decision: dict[str, Any] = Field(default_factory=dict, description="router decision (D1)")
    loop: dict[str, Any] = Field(default_factory=dict, description="self-corrective loop state (D2)")
    plan: dict[str, Any] = Field(default_factory=dict, description="plan, its validation and execution (D3, D4)")
    states: list[str] = Field(default_factory=list, description="orchestrator states in order (D6)")
    started: float = Field(default_factory=time.perf_counter, exclude=True)
    _listeners: list[Callable[[TraceEvent], None]] = PrivateAttr(default_factory=list)

    def subscribe(self, listener: Callable[[TraceEvent], None]) -> None:
        """Called with every later event (the orchestrator's state machine and event bus)."""
        self._listeners.append(listener)

    def event(self, name: str, **data: Any) -> None:
        ev = TraceEvent(name=name, at_ms=round((time.perf_counter() - self.started) * 1000, 1), data=data)
        self.events.append(ev)
        for listener in list(self._listeners):
            listener(ev)


def with_role(llm: Any, role: str) -> Any:
    """The same model with a prompt cache of its own for `role` where the backend keeps one
    (`for_role`: llama.cpp reuses a cached prompt prefix only while no other prompt ran in between);
    otherwise `llm` itself."""
    for_role = getattr(llm, "for_role", None)
    return for_role(role) if callable(for_role) else llm


class RecordingLLM:
    """Wraps an LLM so every call lands in the trace, with its purpose, tokens and duration."""

    def __init__(self, llm: Any, trace: Trace, purpose: str = "generate", *, role: str | None = None) -> None:
        self.llm = with_role(llm, role) if role else llm
        self.trace = trace
        self.name = getattr(llm, "name", "llm")
        self.purpose = purpose

    def _record(self, started: float, resp: Any = None, error: Exception | None = None) -> None:
        source = resp if resp is not None else error  # a timeout carries its partial token counts
        self.trace.model_calls.append(ModelCall(
            purpose=self.purpose, model=self.name,
            prompt_tokens=getattr(source, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(source, "completion_tokens", 0) or 0,
            duration_ms=round(getattr(resp, "duration_ms", 0.0) or (time.perf_counter() - started) * 1000, 1),
            ok=error is None, error=None if error is None else f"{type(error).__name__}: {error}"[:300],
            **{k: getattr(resp, k, None) for k in ("cached_tokens", "prompt_eval_ms", "eval_ms", "threads")}))

    def chat(self, messages: list[Any], **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            resp = self.llm.chat(messages, **kw)
        except Exception as exc:
            self._record(t, error=exc)
            raise
        self._record(t, resp)
        return resp

    def chat_json(self, messages: list[Any], schema: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            obj, resp = self.llm.chat_json(messages, schema, **kw)
        except Exception as exc:
            self._record(t, error=exc)
            raise
        self._record(t, resp)
        return obj, resp

    def for_role(self, role: str) -> RecordingLLM:
        """The same recording for the wrapped model's handle for `role` (see `with_role`)."""
        clone = copy.copy(self)
        clone.llm = with_role(self.llm, role)
        return clone

    def count_tokens(self, text: str) -> int:
        return int(self.llm.count_tokens(text))
