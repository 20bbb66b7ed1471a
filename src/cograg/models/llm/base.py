"""`ChatModelBase`: the public `LLM` methods written once for every backend (and the test double).

`chat`, `stream` and `chat_json` check their arguments and coerce the messages here, then call the
backend's hooks with plain `ChatMessage` lists: `_chat` (one completion), `_stream` (text deltas)
and `_json_attempt` (one completion meant to be a `schema` object). `chat_json` adds the schema
instruction, parses and repairs the answer and retries once (`json_output`). The `LLM` Protocol
in `types` stays the documented interface; this class is one way to meet it.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import BaseModel

from cograg.models.llm.json_output import parse_json_output, retry_message, with_json_instruction
from cograg.models.llm.types import (
    ChatMessage,
    LLMOutputError,
    LLMResponse,
    LLMTimeout,
    Messages,
    T,
    check_chat_args,
    check_enforced_schema,
    check_schema,
    coerce_messages,
)


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


# The time (time.monotonic()) by which every model call made in this context must end: a turn's
# wall budget. A call's own timeout_s is cut to what is left of it, so a call that starts near the
# end of the budget stops there (llama.cpp's deadline stopping criterion, the HTTP client's
# timeout) instead of running its full configured timeout past the turn's end.
_CALLS_END_BY: contextvars.ContextVar[float | None] = contextvars.ContextVar("cograg_calls_end_by", default=None)
MIN_CALL_TIMEOUT_S = 0.001  # a call started with no time left still gets a valid (and at once spent) timeout


@contextmanager
def calls_end_by(deadline: float | None) -> Iterator[None]:
    """Every model call in this context (and in threads started with a copy of it) ends by
    `deadline`, or an earlier one an enclosing scope set; None adds no limit."""
    outer = _CALLS_END_BY.get()
    token = _CALLS_END_BY.set(deadline if outer is None else outer if deadline is None else min(outer, deadline))
    try:
        yield
    finally:
        _CALLS_END_BY.reset(token)


def bounded_timeout(timeout_s: float | None) -> float | None:
    """`timeout_s` cut to the time left before the context's `calls_end_by` deadline."""
    deadline = _CALLS_END_BY.get()
    if deadline is None:
        return timeout_s
    left = max(deadline - time.monotonic(), MIN_CALL_TIMEOUT_S)
    return left if timeout_s is None else min(timeout_s, left)


class ChatModelBase:
    """`chat`, `stream` and `chat_json` on top of the backend hooks `_chat`, `_stream`, `_json_attempt`."""

    name: str

    # -- backend hooks (messages already coerced, arguments already checked) ----------
    def _chat(self, messages: list[ChatMessage], max_tokens: int, temperature: float, timeout_s: float | None,
              stop: list[str] | None) -> LLMResponse:  # pragma: no cover - overridden
        raise NotImplementedError

    def _stream(self, messages: list[ChatMessage], max_tokens: int, temperature: float,
                timeout_s: float | None) -> Iterator[str]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _json_attempt(
        self, messages: list[ChatMessage], schema: type[BaseModel], max_tokens: int, timeout_s: float | None
    ) -> LLMResponse:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- LLM protocol ----------------------------------------------------------------
    def chat(
        self,
        messages: Messages,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        timeout_s: float | None = None,
        stop: list[str] | None = None,
    ) -> LLMResponse:
        check_chat_args(max_tokens, temperature, timeout_s)
        return self._chat(coerce_messages(messages), max_tokens, temperature, bounded_timeout(timeout_s), stop)

    def stream(
        self,
        messages: Messages,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        timeout_s: float | None = None,
    ) -> Iterator[str]:
        """Text deltas. Arguments are checked now; when generation starts is up to the backend."""
        check_chat_args(max_tokens, temperature, timeout_s)
        return self._stream(coerce_messages(messages), max_tokens, temperature, bounded_timeout(timeout_s))

    def chat_json(
        self,
        messages: Messages,
        schema: type[T],
        *,
        max_tokens: int = 512,
        timeout_s: float | None = None,
        enforced_schema: type[BaseModel] | None = None,
    ) -> tuple[T, LLMResponse]:
        """A validated `schema` instance and the response (token counts summed over attempts).

        The schema is shown to the model (and enforced where the backend can); the answer is
        parsed with `parse_json_output`. If that fails, the model is asked once more with the
        validation error appended; then LLMOutputError. `timeout_s` bounds both attempts together.

        `enforced_schema`, when given, is what the backend enforces instead: the leading fields of
        `schema` only, so a constrained model stops once it has written them (the judge's verdict
        without its reason; the fields after take their defaults), or `schema` with narrower field
        types (`narrowed_schema`: the answer's quotes limited to the context's text). The prompt
        shows `schema` either way, and the reply is parsed with it.
        """
        check_schema(schema)
        if enforced_schema is not None:
            check_enforced_schema(schema, enforced_schema)
        check_chat_args(max_tokens, 0.0, timeout_s)
        timeout_s = bounded_timeout(timeout_s)
        msgs = with_json_instruction(coerce_messages(messages), schema)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        enforced = enforced_schema or schema
        first = self._json_attempt(msgs, enforced, max_tokens, timeout_s)
        try:
            return parse_json_output(first.text, schema), first
        except LLMOutputError as err:
            first_error = err
        left = _remaining(deadline)
        if left is not None and left <= 0:
            raise LLMTimeout(
                f"{self.name}: no time left to retry after an unusable answer ({first_error.error})",
                prompt_tokens=first.prompt_tokens,
                completion_tokens=first.completion_tokens,
                partial_text=first.text,
            )
        retry = [
            *msgs,
            ChatMessage(role="assistant", content=first.text),
            ChatMessage(role="user", content=retry_message(first_error)),
        ]
        second = self._json_attempt(retry, enforced, max_tokens, left)
        total = second.model_copy(
            update={
                "prompt_tokens": first.prompt_tokens + second.prompt_tokens,
                "completion_tokens": first.completion_tokens + second.completion_tokens,
                "duration_ms": round(first.duration_ms + second.duration_ms, 3),
            }
        )
        try:
            return parse_json_output(second.text, schema), total
        except LLMOutputError as err:
            raise LLMOutputError(
                f"{self.name} did not return a valid {schema.__name__} after one retry: {err.error}",
                raw=second.text,
                error=err.error,
                attempts=[first.text, second.text],
            ) from None
