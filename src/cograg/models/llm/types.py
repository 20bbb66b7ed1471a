"""The chat-model contract: messages, responses, errors and the `LLM` Protocol every backend meets.

Errors (all `ModelError`): `LLMTimeout` (deadline passed; carries partial token counts),
`LLMUnavailable` (refused, unreachable, HTTP 5xx, model missing), `LLMRequestRejected` (HTTP 4xx
other than auth/not-found), `LLMOutputError` (output unusable after repair and one retry; carries
the raw text). The argument checks and token estimate here are shared by every backend and by the
test double in `cograg.testing`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from cograg.models import ModelError

T = TypeVar("T", bound=BaseModel)


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class LLMResponse(BaseModel):
    text: str
    prompt_tokens: int
    completion_tokens: int
    duration_ms: float
    model: str
    finish_reason: str  # "stop" | "length" | whatever the server reports
    # what the backend measured itself (llama.cpp): prompt tokens served from its KV cache, time
    # spent on prompt and on generated tokens, threads used; None where a backend cannot tell
    cached_tokens: int | None = None
    prompt_eval_ms: float | None = None
    eval_ms: float | None = None
    threads: int | None = None


class LLMTimeout(ModelError):
    """The model did not finish within the deadline. Carries what was done until then."""

    def __init__(
        self,
        message: str,
        *,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        partial_text: str = "",
    ) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.partial_text = partial_text


class LLMUnavailable(ModelError):
    """The model cannot be used: connection refused, unreachable, HTTP 5xx, model missing.

    `status` is the HTTP status when the endpoint answered with one (else None).
    """

    def __init__(self, message: str, *, status: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class LLMRequestRejected(ModelError):
    """The endpoint rejected the request (HTTP 4xx other than auth / not found / rate limit)."""

    def __init__(self, message: str, *, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class LLMOutputError(ModelError):
    """The model's output is not usable for the requested schema (after repair and one retry)."""

    def __init__(self, message: str, *, raw: str = "", error: str = "", attempts: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.raw = raw
        self.error = error or message
        self.attempts = list(attempts)


Messages = Sequence[ChatMessage | dict[str, Any]]


@runtime_checkable
class LLM(Protocol):
    """A chat model. All methods raise ModelError subclasses, never backend exceptions."""

    name: str

    def chat(
        self,
        messages: Messages,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        timeout_s: float | None = None,
        stop: list[str] | None = None,
    ) -> LLMResponse: ...

    def stream(
        self,
        messages: Messages,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        timeout_s: float | None = None,
    ) -> Iterator[str]: ...

    def chat_json(
        self,
        messages: Messages,
        schema: type[T],
        *,
        max_tokens: int = 512,
        timeout_s: float | None = None,
        enforced_schema: type[BaseModel] | None = None,
    ) -> tuple[T, LLMResponse]: ...

    def count_tokens(self, text: str) -> int: ...


# --------------------------------------------------------------------------- shared helpers


def coerce_messages(messages: Messages) -> list[ChatMessage]:
    """`messages` as ChatMessage objects (dicts with role/content are accepted); ModelError if bad."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable):
        raise ModelError("messages must be a list of {role, content} chat messages")
    out: list[ChatMessage] = []
    for i, m in enumerate(messages):
        if isinstance(m, ChatMessage):
            out.append(m)
            continue
        try:
            out.append(ChatMessage.model_validate(m))
        except ValidationError as exc:
            raise ModelError(f"message #{i} is not a valid chat message: {summarise_validation(exc)}") from None
    if not out:
        raise ModelError("no messages to send to the model")
    return out


def check_chat_args(max_tokens: int, temperature: float, timeout_s: float | None) -> None:
    """ModelError unless the generation arguments are in range."""
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ModelError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        raise ModelError(f"temperature must be between 0 and 2, got {temperature!r}")
    if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ModelError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")


def check_schema(schema: Any) -> None:
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise ModelError(f"schema must be a pydantic model class, got {schema!r}")


_NARROWS = "__cograg_narrows__"


def narrowed_schema(schema: type[BaseModel], name: str, **narrower: Any) -> type[BaseModel]:
    """`schema` with the same fields in the same order, some of a narrower type (`narrower`:
    field name → annotation, e.g. a `Literal` of allowed strings; a narrowed field is required),
    for `enforced_schema`: the backend constrains the reply to it while the prompt shows `schema`,
    and the reply is parsed with `schema`, so every value the narrow type admits must be valid there."""
    from pydantic import create_model

    unknown = set(narrower) - set(schema.model_fields)
    if unknown:
        raise ModelError(f"{schema.__name__} has no field {', '.join(sorted(unknown))}")
    fields: dict[str, Any] = {n: (narrower[n], ...) if n in narrower else (f.annotation, f)
                              for n, f in schema.model_fields.items()}
    model = create_model(name, **fields)
    setattr(model, _NARROWS, schema)
    return model


def generation_order(schema: type[BaseModel]) -> tuple[str, ...]:
    """The order a grammar must generate `schema`'s top-level fields in: its declared order where
    the schema (or the schema it narrows) sets `generate_in_field_order = True` (what is written
    first conditions what follows, e.g. quotes before the answer), else () for no preference."""
    base = getattr(schema, _NARROWS, schema)
    if getattr(base, "generate_in_field_order", False):
        return tuple(schema.model_fields)
    return ()


def check_enforced_schema(schema: type[BaseModel], enforced: Any) -> None:
    """ModelError unless `enforced` is `schema`'s leading fields (the same names, types and order)
    and every field after them has a default, so a reply that stops after them still validates;
    or `schema` narrowed by `narrowed_schema` (all of its fields, some of them narrower)."""
    check_schema(enforced)
    fields, head = list(schema.model_fields.items()), list(enforced.model_fields.items())
    if getattr(enforced, _NARROWS, None) is schema:
        if [n for n, _ in fields] == [n for n, _ in head]:
            return
        raise ModelError(f"{enforced.__name__} must have the fields of {schema.__name__}, in order")
    same = [(n, f.annotation) for n, f in fields[:len(head)]] == [(n, f.annotation) for n, f in head]
    if not same or any(f.is_required() for _, f in fields[len(head):]):
        raise ModelError(f"{enforced.__name__} must be the leading fields of {schema.__name__}, "
                         "and the fields after them must have defaults")


def summarise_validation(exc: ValidationError, limit: int = 5) -> str:
    """A pydantic validation error on one line: `loc: msg; ...` (shown to users and to the model)."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    more = exc.error_count() - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_SIMPLE_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\s{_CJK}]+")


def simple_token_count(text: str) -> int:
    """Whitespace-separated words plus one per CJK character (for fakes and servers without usage)."""
    return len(_SIMPLE_TOKEN_RE.findall(text or ""))


def elapsed_ms(start: float) -> float:
    """Milliseconds since `start` (a `time.monotonic()` reading), rounded to microseconds."""
    return round((time.monotonic() - start) * 1000.0, 3)
