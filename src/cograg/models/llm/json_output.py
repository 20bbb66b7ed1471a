"""Schema-checked JSON from chat models: the instruction shown to the model, parsing and repair of
its answer, and the message asking for a corrected answer (the `chat_json` retry loop itself is in
`base.ChatModelBase`, shared by every backend).

Model output is never trusted raw: JSON is constrained where the backend can (llama.cpp grammars,
OpenAI `response_format`) and always validated and, if needed, repaired with json_repair (`parse_json_output`); an
answer that still does not fit the schema is retried once with the validation error shown to the
model, then LLMOutputError.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import json_repair
from pydantic import BaseModel, ValidationError

from cograg.models.llm.types import ChatMessage, LLMOutputError, T, check_schema, summarise_validation

_STRICT = json.JSONDecoder(strict=False)  # control characters inside strings are fine
# What a decoder raises on text a model may write besides a syntax error: an integer of more than
# 4300 digits is a ValueError (Python's int conversion limit), nesting deeper than the interpreter's
# recursion limit a RecursionError. Either is an answer that is not usable JSON, never a crash.
_UNREADABLE = (ValueError, RecursionError)


def _embedded_json(text: str) -> list[Any]:
    """Well-formed JSON values in `text`: the one starting at its first `{` and at its first `[`.

    Catches the common case of valid JSON wrapped in prose or code fences without any repair, so
    a schema mismatch in it is reported as such rather than as a syntax problem.
    """
    values = []
    for opener in "{[":
        pos = text.find(opener)
        if pos != -1:
            with contextlib.suppress(*_UNREADABLE):
                values.append(_STRICT.raw_decode(text, pos)[0])
    return values


def _repaired_json(text: str) -> list[Any]:
    """The JSON json_repair recovers from `text`, as candidate values, objects first.

    json_repair skips prose and code fences and fixes near-JSON (trailing commas, single quotes,
    Python literals, missing closing brackets); when the text holds several JSON values it returns
    them as a list, and each object in it is a candidate too.
    """
    try:
        value = json_repair.loads(text)
    except _UNREADABLE:
        return []
    if value == "":  # json_repair's answer for "no JSON in there"
        return []
    if isinstance(value, list):
        return [*(v for v in value if isinstance(v, dict)), value]
    return [value]


def _syntax_error(text: str) -> str:
    """Why `text` (from its first bracket on) is not plain JSON, for the error shown to the model."""
    starts = [p for p in (text.find("{"), text.find("[")) if p != -1]
    try:
        _STRICT.raw_decode(text, min(starts, default=0))
    except json.JSONDecodeError as exc:
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except ValueError:
        return "a number too long to read"
    except RecursionError:
        return "nested too deeply"
    return "no JSON value could be read"  # pragma: no cover - the caller found none well-formed


def parse_json_output(text: str, schema: type[T]) -> T:
    """The JSON object in a model answer, validated as `schema`.

    Accepts a bare object, one inside ``` fences, or one with prose around it; near-JSON is
    repaired by json_repair. Raises LLMOutputError (with `.raw` and `.error`) when nothing in the
    text is a valid `schema`.
    """
    check_schema(schema)
    raw = text if isinstance(text, str) else ""
    if not raw.strip():
        raise LLMOutputError("the model returned an empty answer, expected a JSON object", raw=raw,
                             error="the answer was empty; a JSON object was expected")
    name = schema.__name__
    if "{" not in raw:
        detail = "the answer contains no JSON object"
        raise LLMOutputError(f"the model's answer is not a JSON object for {name}: {detail}", raw=raw, error=detail)
    well_formed = _embedded_json(raw)
    validation: ValidationError | None = None
    for value in [*well_formed, *_repaired_json(raw)]:
        try:
            return schema.model_validate(value)
        except ValidationError as exc:
            validation = validation or exc
    if well_formed and validation is not None:
        detail = summarise_validation(validation)
        raise LLMOutputError(f"the model's JSON does not match {name}: {detail}", raw=raw, error=detail)
    detail = f"the answer is not valid JSON ({_syntax_error(raw)})"
    if validation is not None:
        detail += f" and, repaired, does not match the schema: {summarise_validation(validation)}"
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
