"""Schema-checked JSON from chat models: the instruction shown to the model, parsing and repair of
its answer, and `chat_json` with one corrective retry, shared by every backend (`JSONChatMixin`).

Model output is never trusted raw: JSON is constrained where the backend can (llama.cpp grammars,
OpenAI `response_format`) and always validated and, if needed, repaired (`parse_json_output`); an
answer that still does not fit the schema is retried once with the validation error shown to the
model, then LLMOutputError.
"""

from __future__ import annotations

import json
import re
import time

from pydantic import BaseModel, ValidationError

from cograg.models.llm.types import (
    ChatMessage,
    LLMOutputError,
    LLMResponse,
    LLMTimeout,
    Messages,
    T,
    check_chat_args,
    check_schema,
    coerce_messages,
    summarise_validation,
)

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n?(.*?)```", re.S)


def _balanced(text: str, start: int) -> str | None:
    """The balanced {...} / [...] starting at text[start], honouring quoted strings."""
    open_ch = text[start]
    close_ch = "}" if open_ch == "{" else "]"
    depth = 0
    quote: str | None = None
    last = ""  # last non-blank character outside strings
    i = start
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
                last = c
        elif c == '"' or (c == "'" and last in ("{", "[", ",", ":")):
            # a single quote only opens a string where a key or value can start
            quote = c
        elif c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
        if not quote and not c.isspace():
            last = c
        i += 1
    return None


def _candidates(text: str) -> list[str]:
    """Substrings of a model answer that may hold the JSON object, most likely first."""
    t = text.strip()
    out = [t]
    for m in _FENCE_RE.finditer(t):
        out.append(m.group(2).strip())
    if t.startswith("```"):  # an unterminated fence: drop the opening line
        out.append(t.split("\n", 1)[1].strip() if "\n" in t else "")
    for opener in "{[":
        pos = t.find(opener)
        tried = 0
        while pos != -1 and tried < 3:
            obj = _balanced(t, pos)
            if obj is not None:
                out.append(obj)
                break
            pos = t.find(opener, pos + 1)
            tried += 1
    seen: set[str] = set()
    return [c for c in out if c and not (c in seen or seen.add(c))]


def repair_json(text: str) -> str:
    """Fix common near-JSON: trailing commas, single-quoted strings, Python True/False/None.

    Only touches text outside double-quoted strings, so string contents are never changed.
    """
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif c == "'":
            j = i + 1
            buf: list[str] = []
            while j < n and text[j] != "'":
                if text[j] == "\\" and j + 1 < n:
                    nxt = text[j + 1]
                    buf.append("'" if nxt == "'" else "\\" + nxt)
                    j += 2
                    continue
                buf.append('\\"' if text[j] == '"' else text[j])
                j += 1
            if j >= n:  # unterminated: leave as is
                out.append(text[i:])
                break
            out.append('"' + "".join(buf) + '"')
            i = j + 1
        elif c == ",":
            j = i + 1
            while j < n and text[j] in " \t\r\n":
                j += 1
            if j < n and text[j] in "}]":
                i += 1  # trailing comma
                continue
            out.append(c)
            i += 1
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            out.append({"True": "true", "False": "false", "None": "null"}.get(word, word))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_json_output(text: str, schema: type[T]) -> T:
    """The first JSON object in a model answer, validated as `schema`.

    Accepts a bare object, one inside ``` fences, or one with prose around it; repairs trailing
    commas, single quotes and Python literals. Raises LLMOutputError (with `.raw` and `.error`)
    when nothing in the text is a valid `schema`.
    """
    check_schema(schema)
    raw = text if isinstance(text, str) else ""
    if not raw.strip():
        raise LLMOutputError("the model returned an empty answer, expected a JSON object", raw=raw,
                             error="the answer was empty; a JSON object was expected")
    validation: ValidationError | None = None
    parse_error: str | None = None
    tried: set[str] = set()
    for cand in _candidates(raw):
        for variant in (cand, repair_json(cand)):
            if variant in tried:
                continue
            tried.add(variant)
            try:
                obj = json.loads(variant, strict=False)
            except json.JSONDecodeError as exc:
                parse_error = parse_error or f"{exc.msg} at line {exc.lineno} column {exc.colno}"
                continue
            try:
                return schema.model_validate(obj)
            except ValidationError as exc:
                validation = validation or exc
    name = schema.__name__
    if validation is not None:
        detail = summarise_validation(validation)
        raise LLMOutputError(f"the model's JSON does not match {name}: {detail}", raw=raw, error=detail)
    if "{" not in raw:
        detail = "the answer contains no JSON object"
    else:
        detail = f"the answer is not valid JSON ({parse_error})"
    raise LLMOutputError(f"the model's answer is not a JSON object for {name}: {detail}", raw=raw, error=detail)


def json_instruction(schema: type[BaseModel]) -> str:
    schema_text = json.dumps(schema.model_json_schema(), ensure_ascii=False)
    return (
        "Reply with one JSON object only (no code fences, no explanations) that conforms to this "
        f"JSON schema:\n{schema_text}"
    )


def with_json_instruction(messages: list[ChatMessage], schema: type[BaseModel]) -> list[ChatMessage]:
    """`messages` with the schema instruction added to the system message (or a new one first)."""
    instr = json_instruction(schema)
    if messages and messages[0].role == "system":
        first = ChatMessage(role="system", content=f"{messages[0].content}\n\n{instr}".strip())
        return [first, *messages[1:]]
    return [ChatMessage(role="system", content=instr), *messages]


def retry_message(error: LLMOutputError) -> str:
    return (
        f"Your previous answer could not be used: {error.error}\n"
        "Reply again with only one JSON object that conforms to the schema, and nothing else."
    )


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


class JSONChatMixin:
    """`chat_json` for every backend, on top of a backend hook `_json_attempt`."""

    name: str

    def _json_attempt(
        self, messages: list[ChatMessage], schema: type[BaseModel], max_tokens: int, timeout_s: float | None
    ) -> LLMResponse:  # pragma: no cover - overridden
        raise NotImplementedError

    def chat_json(
        self,
        messages: Messages,
        schema: type[T],
        *,
        max_tokens: int = 512,
        timeout_s: float | None = None,
    ) -> tuple[T, LLMResponse]:
        """A validated `schema` instance and the response (token counts summed over attempts).

        The schema is shown to the model (and enforced where the backend can); the answer is
        parsed with `parse_json_output`. If that fails, the model is asked once more with the
        validation error appended; then LLMOutputError. `timeout_s` bounds both attempts together.
        """
        check_schema(schema)
        check_chat_args(max_tokens, 0.0, timeout_s)
        msgs = with_json_instruction(coerce_messages(messages), schema)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        first = self._json_attempt(msgs, schema, max_tokens, timeout_s)
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
        second = self._json_attempt(retry, schema, max_tokens, left)
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
