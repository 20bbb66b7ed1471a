"""Test doubles for code built on cograg: a scripted chat model that needs no model files.

`ScriptedLLM` meets the `cograg.models.llm.LLM` Protocol without loading or calling a model. Give
it the answers, in order, that your pipeline's LLM calls should get; it records every call, so a
test can check both what the pipeline does with the answers and what it asked::

    from pydantic import BaseModel

    from cograg.testing import ScriptedLLM

    class Verdict(BaseModel):
        supported: bool

    def test_my_checker_asks_once_and_trusts_the_model():
        llm = ScriptedLLM(['{"supported": true}'])
        verdict, _ = llm.chat_json([{"role": "user", "content": "Is the claim supported?"}], Verdict)
        assert verdict.supported
        assert len(llm.calls) == 1 and llm.calls[0].method == "chat_json"

A scripted entry is the answer text, an exception instance to raise (e.g. `LLMTimeout`, to test
how the pipeline degrades), or a callable that gets the messages and returns the answer (to
answer by prompt, when the order of calls is not fixed). `chat_json` runs the same parse, repair
and retry path as the real backends, so a malformed scripted answer exercises the retry, and
running out of entries raises ModelError naming the call. Token counts are estimated
(`simple_token_count`), so token budgets behave plausibly. Pass a `ScriptedLLM` wherever cograg
takes an `LLM`: the `llm` argument of the answer and control components, or a judge such as
`cograg.models.judge.LLMJudge(ScriptedLLM([...]))`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from cograg.models import ModelError
from cograg.models.llm.base import ChatModelBase
from cograg.models.llm.types import (
    ChatMessage,
    LLMResponse,
    elapsed_ms,
    simple_token_count,
)


@dataclass
class LLMCall:
    """One call recorded by ScriptedLLM."""

    method: str  # "chat" | "stream" | "chat_json"
    messages: list[ChatMessage]
    kwargs: dict[str, Any] = field(default_factory=dict)


ScriptedResponse = str | BaseException | Callable[[list[ChatMessage]], str]


class ScriptedLLM(ChatModelBase):
    """A deterministic fake LLM for unit tests.

    Each generation (a `chat`, a `stream`, or each attempt inside `chat_json`) takes the next
    scripted entry: a string is the answer, an exception instance is raised, a callable gets the
    messages and returns the answer. Every call is recorded in `.calls`. `chat_json` runs the same
    validation/repair/retry path as real backends, without any constraint on the output. Tokens
    are counted as whitespace-separated words plus one per CJK character.
    """

    def __init__(self, responses: Iterable[ScriptedResponse], *, name: str = "scripted") -> None:
        self.responses: list[ScriptedResponse] = list(responses)
        self.name = name
        self.calls: list[LLMCall] = []
        self._next = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        return len(self.responses) - self._next

    def count_tokens(self, text: str) -> int:
        return simple_token_count(text)

    def _answer(self, method: str, messages: list[ChatMessage], kwargs: dict[str, Any]) -> tuple[str, int]:
        with self._lock:
            self.calls.append(LLMCall(method, list(messages), dict(kwargs)))
            if self._next >= len(self.responses):
                raise ModelError(
                    f"ScriptedLLM has no scripted response left for call #{len(self.calls)} ({method})"
                )
            item = self.responses[self._next]
            self._next += 1
        prompt_tokens = sum(self.count_tokens(m.content) for m in messages)
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            item = item(list(messages))
        if not isinstance(item, str):
            raise ModelError(f"ScriptedLLM response #{self._next} is a {type(item).__name__}, not a string")
        return item, prompt_tokens

    def _respond(self, method: str, messages: list[ChatMessage], kwargs: dict[str, Any], stop: list[str] | None) -> LLMResponse:
        start = time.monotonic()
        text, prompt_tokens = self._answer(method, messages, kwargs)
        finish = "stop"
        for s in stop or []:
            if s and s in text:
                text = text[: text.index(s)]
        return LLMResponse(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=self.count_tokens(text),
            duration_ms=elapsed_ms(start),
            model=self.name,
            finish_reason=finish,
        )

    def _chat(self, messages: list[ChatMessage], max_tokens: int, temperature: float, timeout_s: float | None,
              stop: list[str] | None) -> LLMResponse:
        kwargs = {"max_tokens": max_tokens, "temperature": temperature, "timeout_s": timeout_s, "stop": stop}
        return self._respond("chat", messages, kwargs, stop)

    def _stream(self, messages: list[ChatMessage], max_tokens: int, temperature: float,
                timeout_s: float | None) -> Iterator[str]:
        # not a generator: the call is recorded (and its scripted entry taken) when `stream` is called
        kwargs = {"max_tokens": max_tokens, "temperature": temperature, "timeout_s": timeout_s}
        text, _ = self._answer("stream", messages, kwargs)
        return iter(re.findall(r"\s*\S+|\s+", text))

    def _json_attempt(
        self, messages: list[ChatMessage], schema: type[BaseModel], max_tokens: int, timeout_s: float | None
    ) -> LLMResponse:
        kwargs = {"schema": schema, "max_tokens": max_tokens, "timeout_s": timeout_s}
        return self._respond("chat_json", messages, kwargs, None)

    def __repr__(self) -> str:
        return f"ScriptedLLM(name={self.name!r}, calls={len(self.calls)}, remaining={self.remaining})"


__all__ = ["LLMCall", "ScriptedLLM", "ScriptedResponse"]
