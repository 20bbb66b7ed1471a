"""Chat LLMs behind one Protocol: messages in, text or schema-checked JSON out (SPEC: LLM layer).

Every backend offers `chat` (text + token counts), `stream` (text deltas), `chat_json` (a validated
pydantic object) and `count_tokens`, with per-call timeouts. JSON is constrained where the backend
can (llama.cpp grammars, OpenAI `response_format`) and always validated and, if needed, repaired
(`parse_json_output`); an answer that still does not fit the schema is retried once with the
validation error shown to the model, then LLMOutputError. Model output is never trusted raw.

| spec | class | model |
|---|---|---|
| `default` (None) | `LlamaCppLLM` | embedded Qwen2.5-Coder-1.5B-Instruct Q4_K_M (`model_files`) |
| `fast` | `LlamaCppLLM` | embedded Qwen2.5-Coder-0.5B-Instruct Q4_K_M |
| `gguf:/path/model.gguf[#sha256=HEX]` | `LlamaCppLLM` | any local GGUF (hash checked if given) |
| `openai:http://host:port/v1[#model]` | `OpenAICompatLLM` | vLLM, Ollama, llama.cpp server, hosted APIs |

`ScriptedLLM` is a deterministic fake for unit tests. Errors (all `ModelError`): `LLMTimeout`
(deadline passed; carries partial token counts), `LLMUnavailable` (refused, unreachable, HTTP 5xx,
model missing), `LLMRequestRejected` (HTTP 4xx other than auth/not-found), `LLMOutputError`
(output unusable after repair and one retry; carries the raw text).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from cograg.models import ModelError
from cograg.models._local import openai_http_client

T = TypeVar("T", bound=BaseModel)

LLM_SPECS: tuple[str, ...] = (
    "default",
    "fast",
    "gguf:/path/to/model.gguf",
    "gguf:/path/to/model.gguf#sha256=<hex>",
    "openai:http://host:port/v1",
    "openai:http://host:port/v1#model-name",
)

# Env var read by get_llm() for "openai:" specs (never OPENAI_API_KEY: a key meant for one
# provider is not sent to whatever URL a spec names).
OPENAI_KEY_ENV = "COGRAG_LLM_API_KEY"


# --------------------------------------------------------------------------- data types


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
            raise ModelError(f"message #{i} is not a valid chat message: {_summarise(exc)}") from None
    if not out:
        raise ModelError("no messages to send to the model")
    return out


def _check_args(max_tokens: int, temperature: float, timeout_s: float | None) -> None:
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ModelError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        raise ModelError(f"temperature must be between 0 and 2, got {temperature!r}")
    if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ModelError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")


def _check_schema(schema: Any) -> None:
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise ModelError(f"schema must be a pydantic model class, got {schema!r}")


def _summarise(exc: ValidationError, limit: int = 5) -> str:
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


def _now() -> float:
    return time.monotonic()


def _ms_since(start: float) -> float:
    return round((time.monotonic() - start) * 1000.0, 3)


# --------------------------------------------------------------------------- JSON handling

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
    _check_schema(schema)
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
        detail = _summarise(validation)
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
    return None if deadline is None else deadline - _now()


class _JSONMixin:
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
        _check_schema(schema)
        _check_args(max_tokens, 0.0, timeout_s)
        msgs = with_json_instruction(coerce_messages(messages), schema)
        deadline = None if timeout_s is None else _now() + timeout_s
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


# --------------------------------------------------------------------------- scripted fake


@dataclass
class LLMCall:
    """One call recorded by ScriptedLLM."""

    method: str  # "chat" | "stream" | "chat_json"
    messages: list[ChatMessage]
    kwargs: dict[str, Any] = field(default_factory=dict)


ScriptedResponse = str | BaseException | Callable[[list[ChatMessage]], str]


class ScriptedLLM(_JSONMixin):
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
        start = _now()
        text, prompt_tokens = self._answer(method, messages, kwargs)
        finish = "stop"
        for s in stop or []:
            if s and s in text:
                text = text[: text.index(s)]
        return LLMResponse(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=self.count_tokens(text),
            duration_ms=_ms_since(start),
            model=self.name,
            finish_reason=finish,
        )

    def chat(
        self,
        messages: Messages,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        timeout_s: float | None = None,
        stop: list[str] | None = None,
    ) -> LLMResponse:
        _check_args(max_tokens, temperature, timeout_s)
        msgs = coerce_messages(messages)
        kwargs = {"max_tokens": max_tokens, "temperature": temperature, "timeout_s": timeout_s, "stop": stop}
        return self._respond("chat", msgs, kwargs, stop)

    def stream(
        self,
        messages: Messages,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        timeout_s: float | None = None,
    ) -> Iterator[str]:
        _check_args(max_tokens, temperature, timeout_s)
        msgs = coerce_messages(messages)
        kwargs = {"max_tokens": max_tokens, "temperature": temperature, "timeout_s": timeout_s}
        text, _ = self._answer("stream", msgs, kwargs)
        return iter(re.findall(r"\s*\S+|\s+", text))

    def _json_attempt(
        self, messages: list[ChatMessage], schema: type[BaseModel], max_tokens: int, timeout_s: float | None
    ) -> LLMResponse:
        kwargs = {"schema": schema, "max_tokens": max_tokens, "timeout_s": timeout_s}
        return self._respond("chat_json", messages, kwargs, None)

    def __repr__(self) -> str:
        return f"ScriptedLLM(name={self.name!r}, calls={len(self.calls)}, remaining={self.remaining})"


# --------------------------------------------------------------------------- llama.cpp in-process

# Used when a GGUF file carries no chat template.
_CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
        import llama_cpp.llama_chat_format  # noqa: F401
        import llama_cpp.llama_grammar  # noqa: F401
    except Exception as exc:  # ImportError, or OSError when the shared library cannot load
        raise ModelError(
            f"llama-cpp-python is not usable ({exc}); install it with `make setup` "
            "(or `bash scripts/install_llm.sh .venv`)"
        ) from exc
    return llama_cpp


THREADS_ENV = "COGRAG_LLM_THREADS"


def _default_threads() -> int:
    """$COGRAG_LLM_THREADS, else half the usable CPUs (at least 1).

    llama.cpp's worker threads spin at barriers: with as many threads as cores, any other busy
    process (the embedder's OpenMP pool, a test run next door) makes generation collapse (measured
    on 2 shared cores: 0.4 tok/s with 2 threads vs ~22 tok/s with 1 for the 0.5B model).
    """
    env = os.environ.get(THREADS_ENV, "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ModelError(f"${THREADS_ENV} must be a positive integer, got {env!r}") from None
        if n < 1:
            raise ModelError(f"${THREADS_ENV} must be a positive integer, got {env!r}")
        return n
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // 2)


class _Deadline:
    """A llama.cpp stopping criterion that ends generation once the deadline has passed."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.hit = False

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.hit = True
        return self.hit


class LlamaCppLLM(_JSONMixin):
    """A GGUF model run in-process by llama.cpp (llama-cpp-python), CPU only.

    The prompt is built with the chat template stored in the GGUF file. `chat_json` constrains
    sampling with a grammar generated from the pydantic JSON schema, then validates the result.
    Timeouts are enforced between tokens (prompt processing itself cannot be interrupted, so a
    very long prompt, or the first call after loading while the weights are paged in, may overrun
    a tiny timeout by its prompt-eval time). Calls are serialised with a lock; a `stream` holds the
    lock until it is exhausted or closed. `n_threads=None` means $COGRAG_LLM_THREADS or half the
    CPUs (see `_default_threads`).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        *,
        name: str | None = None,
        n_batch: int = 512,
    ) -> None:
        path = Path(model_path).expanduser()
        if not path.is_file():
            raise LLMUnavailable(f"model file not found: {path}")
        if not isinstance(n_ctx, int) or n_ctx < 64:
            raise ModelError(f"n_ctx must be an integer >= 64, got {n_ctx!r}")
        llama_cpp = _import_llama_cpp()
        threads = n_threads or _default_threads()
        try:
            self._llama = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_batch=min(n_batch, n_ctx),
                n_threads=threads,
                n_threads_batch=threads,
                seed=seed,
                verbose=False,
            )
        except Exception as exc:  # ValueError("Failed to load model from file") and friends
            raise ModelError(f"cannot load the GGUF model {path}: {exc}") from exc
        self.path = path
        self.n_threads = threads
        self.n_ctx = int(self._llama.n_ctx())
        self.seed = seed
        self.name = name or f"llama.cpp:{path.stem}"
        self._lock = threading.Lock()
        self._grammar_cls = llama_cpp.llama_grammar.LlamaGrammar
        self._formatter = self._make_formatter(llama_cpp)

    def _make_formatter(self, llama_cpp: Any) -> Any:
        llama = self._llama
        template = llama.metadata.get("tokenizer.chat_template") or _CHATML_TEMPLATE
        eos_id = llama.token_eos()
        bos_id = llama.token_bos()

        def text_of(tok: int) -> str:
            if tok < 0:
                return ""
            return llama.detokenize([tok], special=True).decode("utf-8", errors="ignore")

        return llama_cpp.llama_chat_format.Jinja2ChatFormatter(
            template=template,
            eos_token=text_of(eos_id),
            bos_token=text_of(bos_id),
            stop_token_ids=[eos_id] if eos_id >= 0 else None,
        )

    # -- helpers ---------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(self._llama.tokenize(str(text).encode("utf-8"), add_bos=False, special=False))

    def _prompt(self, messages: list[ChatMessage], max_tokens: int) -> tuple[list[int], list[str], int]:
        try:
            fmt = self._formatter(messages=[m.model_dump() for m in messages])
        except Exception as exc:
            raise ModelError(f"{self.name}: cannot apply the chat template: {exc}") from exc
        tokens = self._llama.tokenize(fmt.prompt.encode("utf-8"), add_bos=not fmt.added_special, special=True)
        room = self.n_ctx - len(tokens)
        if room < 1:
            raise ModelError(
                f"{self.name}: the prompt is {len(tokens)} tokens, the context window is {self.n_ctx}"
            )
        stop = fmt.stop if isinstance(fmt.stop, list) else [fmt.stop] if fmt.stop else []
        return tokens, [s for s in stop if s], min(max_tokens, room)

    def _acquire(self, deadline: float | None) -> None:
        timeout = -1 if deadline is None else max(0.0, deadline - _now())
        if not self._lock.acquire(timeout=timeout):
            raise LLMTimeout(f"{self.name}: the model was busy with another request until the deadline passed")

    def _criteria(self, deadline: float | None) -> tuple[Any, _Deadline]:
        import llama_cpp

        # End-of-generation tokens are handled by llama-cpp-python itself; only the deadline here.
        dl = _Deadline(deadline)
        return llama_cpp.StoppingCriteriaList([dl]), dl

    def _complete(
        self,
        messages: list[ChatMessage],
        *,
        max_tokens: int,
        temperature: float,
        timeout_s: float | None,
        stop: list[str] | None,
        grammar: Any = None,
    ) -> LLMResponse:
        start = _now()
        deadline = None if timeout_s is None else start + timeout_s
        self._acquire(deadline)
        try:
            tokens, tmpl_stop, max_new = self._prompt(messages, max_tokens)
            criteria, dl = self._criteria(deadline)
            try:
                out = self._llama.create_completion(
                    prompt=tokens,
                    max_tokens=max_new,
                    temperature=float(temperature),
                    repeat_penalty=1.0,
                    stop=[*tmpl_stop, *(stop or [])],
                    seed=self.seed,
                    stopping_criteria=criteria,
                    grammar=grammar,
                    stream=False,
                )
            except ModelError:
                raise
            except Exception as exc:
                raise ModelError(f"{self.name}: generation failed: {exc}") from exc
        finally:
            self._lock.release()
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        text = choice.get("text") or ""
        prompt_tokens = int(usage.get("prompt_tokens", len(tokens)))
        completion_tokens = int(usage.get("completion_tokens", 0))
        if dl.hit:
            raise LLMTimeout(
                f"{self.name} did not finish within {timeout_s:g} s "
                f"({prompt_tokens} prompt tokens, {completion_tokens} tokens generated)",
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                partial_text=text,
            )
        return LLMResponse(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            duration_ms=_ms_since(start),
            model=self.name,
            finish_reason=str(choice.get("finish_reason") or "stop"),
        )

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
        _check_args(max_tokens, temperature, timeout_s)
        return self._complete(
            coerce_messages(messages), max_tokens=max_tokens, temperature=temperature,
            timeout_s=timeout_s, stop=stop,
        )

    def stream(
        self,
        messages: Messages,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        timeout_s: float | None = None,
    ) -> Iterator[str]:
        _check_args(max_tokens, temperature, timeout_s)
        msgs = coerce_messages(messages)
        return self._stream(msgs, max_tokens, temperature, timeout_s)

    def _stream(self, msgs: list[ChatMessage], max_tokens: int, temperature: float, timeout_s: float | None) -> Iterator[str]:
        start = _now()
        deadline = None if timeout_s is None else start + timeout_s
        self._acquire(deadline)
        parts: list[str] = []
        try:
            tokens, tmpl_stop, max_new = self._prompt(msgs, max_tokens)
            criteria, dl = self._criteria(deadline)
            chunks: Any = None
            try:
                chunks = self._llama.create_completion(
                    prompt=tokens,
                    max_tokens=max_new,
                    temperature=float(temperature),
                    repeat_penalty=1.0,
                    stop=tmpl_stop,
                    seed=self.seed,
                    stopping_criteria=criteria,
                    stream=True,
                )
                for chunk in chunks:
                    delta = chunk["choices"][0].get("text") or ""
                    if delta:
                        parts.append(delta)
                        yield delta
            except (ModelError, GeneratorExit):
                raise
            except Exception as exc:
                raise ModelError(f"{self.name}: generation failed: {exc}") from exc
            finally:
                if chunks is not None:  # stop llama.cpp's generator before the lock is released
                    with contextlib.suppress(Exception):
                        chunks.close()
            if dl.hit:
                text = "".join(parts)
                raise LLMTimeout(
                    f"{self.name} did not finish streaming within {timeout_s:g} s",
                    prompt_tokens=len(tokens),
                    completion_tokens=self.count_tokens(text) if text else 0,
                    partial_text=text,
                )
        finally:
            self._lock.release()

    def _json_attempt(
        self, messages: list[ChatMessage], schema: type[BaseModel], max_tokens: int, timeout_s: float | None
    ) -> LLMResponse:
        return self._complete(
            messages, max_tokens=max_tokens, temperature=0.0, timeout_s=timeout_s, stop=None,
            grammar=self._grammar(schema),
        )

    @functools.lru_cache(maxsize=64)  # noqa: B019 - one instance per model, bounded
    def _grammar_text(self, schema_json: str) -> str:
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        return json_schema_to_gbnf(schema_json)

    def _grammar(self, schema: type[BaseModel]) -> Any:
        try:
            gbnf = self._grammar_text(json.dumps(schema.model_json_schema(), sort_keys=True))
            return self._grammar_cls.from_string(gbnf, verbose=False)
        except Exception:
            # Schema features the converter does not support: fall back to "any JSON value";
            # the result is still validated against the schema.
            from llama_cpp.llama_grammar import JSON_GBNF

            return self._grammar_cls.from_string(JSON_GBNF, verbose=False)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._llama.close()

    def __repr__(self) -> str:
        return f"LlamaCppLLM(name={self.name!r}, path={str(self.path)!r}, n_ctx={self.n_ctx})"


# --------------------------------------------------------------------------- OpenAI-compatible

# response_format variants, most constrained first. The first that the endpoint accepts is kept.
_JSON_MODES = ("json_schema", "json_object_schema", "json_object", "prompt")
_FORMAT_WORDS = ("response_format", "response format", "json_schema", "json_object", "guided_json")


class OpenAICompatLLM(_JSONMixin):
    """Any OpenAI-compatible `POST {base_url}/chat/completions` endpoint.

    vLLM, Ollama, llama.cpp server, llama-cpp-python's server, hosted APIs. `model=None` uses the
    first model listed by `GET {base_url}/models`. `chat_json` asks for
    `response_format={"type": "json_schema", ...}`; when the endpoint rejects that (HTTP 400/422
    naming the response format) it falls back to `{"type": "json_object", "schema": ...}`
    (llama-cpp-python, Anyscale), then plain JSON mode, then the schema in the prompt only, and
    remembers what worked. The output is validated either way. `stream` reads server-sent events.
    Token counts come from the server's `usage`, or are estimated when it sends none.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60,
    ) -> None:
        import httpx

        base = (base_url or "").strip().rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ModelError(f"the LLM endpoint must be an http(s) URL, got {base_url!r}")
        if timeout_s is None or not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ModelError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.base_url = base
        self.timeout_s = float(timeout_s)
        self._model = (model or "").strip() or None
        self._json_mode: int = 0
        self._lock = threading.Lock()
        self._httpx = httpx
        self._client = openai_http_client(self.timeout_s, api_key)

    # -- identity --------------------------------------------------------------------
    @property
    def model(self) -> str:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._discover_model()
        return self._model

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"openai:{self._model or self.base_url}"

    def count_tokens(self, text: str) -> int:
        """An estimate (the OpenAI API has no tokenizer endpoint)."""
        return simple_token_count(text)

    # -- HTTP ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _request(self, method: str, path: str, body: Any, timeout_s: float) -> Iterator[Any]:
        httpx = self._httpx
        url = f"{self.base_url}{path}"
        try:
            with self._client.stream(method, url, json=body, timeout=httpx.Timeout(timeout_s)) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise self._status_error(url, resp)
                yield resp
        except httpx.ConnectTimeout as exc:
            raise LLMUnavailable(f"cannot reach the LLM endpoint {url} (no connection within {timeout_s:g} s)") from exc
        except httpx.TimeoutException as exc:
            raise LLMTimeout(f"the LLM endpoint {url} did not answer within {timeout_s:g} s") from exc
        except httpx.ConnectError as exc:
            raise LLMUnavailable(f"cannot connect to the LLM endpoint {url} ({exc}); is the server running?") from exc
        except httpx.HTTPError as exc:
            raise LLMUnavailable(f"request to the LLM endpoint {url} failed: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def _detail(resp: Any) -> str:
        """The server's error message, on one line, at most 300 characters."""
        detail = resp.text
        try:
            payload = resp.json()
        except Exception:
            payload = None
        if isinstance(payload, dict):
            err = payload.get("error")
            if isinstance(err, dict) and err.get("message"):
                detail = str(err["message"])
            elif isinstance(err, str):
                detail = err
            elif "detail" in payload:  # FastAPI validation errors
                detail = json.dumps(payload["detail"], ensure_ascii=False)
        return " ".join(str(detail).split())[:300]

    def _status_error(self, url: str, resp: Any) -> ModelError:
        status = resp.status_code
        detail = self._detail(resp)
        kw = {"status": status, "detail": detail}
        if status >= 500:
            return LLMUnavailable(f"the LLM endpoint {url} failed with HTTP {status}: {detail}", **kw)
        if status in (401, 403):
            return LLMUnavailable(
                f"the LLM endpoint {url} refused access (HTTP {status}; check the API key): {detail}", **kw
            )
        if status == 404:
            return LLMUnavailable(
                f"the LLM endpoint {url} answered HTTP 404 (wrong base URL or model name?): {detail}", **kw
            )
        if status == 429:
            return LLMUnavailable(f"the LLM endpoint {url} is rate-limiting requests (HTTP 429): {detail}", **kw)
        return LLMRequestRejected(
            f"the LLM endpoint {url} rejected the request with HTTP {status}: {detail}", status=status, detail=detail
        )

    def _read_json(self, method: str, path: str, body: Any, timeout_s: float) -> Any:
        deadline = _now() + timeout_s
        url = f"{self.base_url}{path}"
        with self._request(method, path, body, timeout_s) as resp:
            buf = bytearray()
            for chunk in resp.iter_bytes():
                buf.extend(chunk)
                if _now() > deadline:
                    raise LLMTimeout(f"the LLM endpoint {url} did not finish answering within {timeout_s:g} s")
        try:
            return json.loads(bytes(buf))
        except ValueError:
            snippet = bytes(buf[:120]).decode("utf-8", errors="replace")
            raise LLMUnavailable(
                f"the LLM endpoint {url} did not return JSON (is it an OpenAI-compatible API?): {snippet!r}"
            ) from None

    def _discover_model(self) -> str:
        url = f"{self.base_url}/models"
        payload = self._read_json("GET", "/models", None, min(self.timeout_s, 30.0))
        try:
            models = [m["id"] for m in payload["data"] if isinstance(m.get("id"), str)]
        except (TypeError, KeyError, AttributeError):
            raise LLMUnavailable(f"{url} returned an unexpected payload; give the model as #name") from None
        if not models:
            raise LLMUnavailable(f"{url} lists no model; give the model as #name")
        return models[0]

    def _body(self, messages: list[ChatMessage], max_tokens: int, temperature: float, stop: list[str] | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.model_dump() for m in messages],
            "max_tokens": max_tokens,
            "temperature": float(temperature),
        }
        if stop:
            body["stop"] = list(stop)
        return body

    def _parse(self, payload: Any, messages: list[ChatMessage], start: float) -> LLMResponse:
        url = f"{self.base_url}/chat/completions"
        try:
            choice = payload["choices"][0]
            message = choice.get("message") or {}
            text = message.get("content")
            if text is None:
                text = ""
            if not isinstance(text, str):
                raise TypeError("content is not a string")
        except (TypeError, KeyError, IndexError, AttributeError) as exc:
            raise LLMUnavailable(f"the LLM endpoint {url} returned an unexpected payload (no choices[0].message): {exc}") from None
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        try:
            prompt_tokens = int(usage.get("prompt_tokens"))
        except (TypeError, ValueError):
            prompt_tokens = sum(self.count_tokens(m.content) for m in messages)
        try:
            completion_tokens = int(usage.get("completion_tokens"))
        except (TypeError, ValueError):
            completion_tokens = self.count_tokens(text)
        return LLMResponse(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            duration_ms=_ms_since(start),
            model=str(payload.get("model") or self.model),
            finish_reason=str(choice.get("finish_reason") or "stop"),
        )

    def _post_chat(self, messages: list[ChatMessage], body: dict[str, Any], timeout_s: float | None) -> LLMResponse:
        start = _now()
        payload = self._read_json("POST", "/chat/completions", body, timeout_s or self.timeout_s)
        return self._parse(payload, messages, start)

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
        _check_args(max_tokens, temperature, timeout_s)
        msgs = coerce_messages(messages)
        return self._post_chat(msgs, self._body(msgs, max_tokens, temperature, stop), timeout_s)

    def stream(
        self,
        messages: Messages,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        timeout_s: float | None = None,
    ) -> Iterator[str]:
        _check_args(max_tokens, temperature, timeout_s)
        msgs = coerce_messages(messages)
        body = self._body(msgs, max_tokens, temperature, None)
        body["stream"] = True
        return self._stream(body, timeout_s or self.timeout_s)

    def _stream(self, body: dict[str, Any], timeout_s: float) -> Iterator[str]:
        url = f"{self.base_url}/chat/completions"
        deadline = _now() + timeout_s
        with self._request("POST", "/chat/completions", body, timeout_s) as resp:
            ctype = resp.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                # Some servers ignore "stream": true and answer with one JSON body.
                resp.read()
                try:
                    payload = resp.json()
                except ValueError:
                    raise LLMUnavailable(
                        f"the LLM endpoint {url} did not return an event stream or JSON: {resp.text[:120]!r}"
                    ) from None
                text = self._parse(payload, [], _now()).text
                if text:
                    yield text
                return
            for line in resp.iter_lines():
                if _now() > deadline:
                    raise LLMTimeout(f"the LLM endpoint {url} did not finish streaming within {timeout_s:g} s")
                line = line.strip()
                if not line.startswith("data:"):
                    continue  # blank separators, comments (":"), "event:", "id:"
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError:
                    raise LLMUnavailable(f"the LLM endpoint {url} sent a malformed stream event: {data[:120]!r}") from None
                if isinstance(event, dict) and event.get("error"):
                    err = event["error"]
                    msg = err.get("message") if isinstance(err, dict) else err
                    raise LLMUnavailable(f"the LLM endpoint {url} reported an error while streaming: {msg}")
                try:
                    choices = event.get("choices") or []
                    delta = (choices[0].get("delta") or {}).get("content") if choices else None
                except (AttributeError, IndexError, TypeError):
                    raise LLMUnavailable(f"the LLM endpoint {url} sent an unexpected stream event: {data[:120]!r}") from None
                if isinstance(delta, str) and delta:
                    yield delta

    def _response_format(self, mode: str, schema: type[BaseModel]) -> dict[str, Any] | None:
        js = schema.model_json_schema()
        if mode == "json_schema":
            name = re.sub(r"[^A-Za-z0-9_-]", "_", schema.__name__)[:64] or "answer"
            return {"type": "json_schema", "json_schema": {"name": name, "schema": js, "strict": False}}
        if mode == "json_object_schema":
            return {"type": "json_object", "schema": js}
        if mode == "json_object":
            return {"type": "json_object"}
        return None

    @property
    def json_mode(self) -> str:
        """The response_format variant this endpoint accepts (learnt on the first chat_json)."""
        return _JSON_MODES[self._json_mode]

    @staticmethod
    def _rejects_format(exc: LLMRequestRejected | LLMUnavailable) -> bool:
        """Whether an HTTP error says the response_format is not supported.

        Usually HTTP 400/422; llama-cpp-python's server reports its request validation errors
        as HTTP 500, so a 500 that names `response_format` counts too.
        """
        detail = (exc.detail or "").lower()
        if exc.status in (400, 422):
            return any(w in detail for w in _FORMAT_WORDS)
        return exc.status == 500 and "response_format" in detail

    def _json_attempt(
        self, messages: list[ChatMessage], schema: type[BaseModel], max_tokens: int, timeout_s: float | None
    ) -> LLMResponse:
        mode = self._json_mode
        while True:
            body = self._body(messages, max_tokens, 0.0, None)
            fmt = self._response_format(_JSON_MODES[mode], schema)
            if fmt is not None:
                body["response_format"] = fmt
            try:
                resp = self._post_chat(messages, body, timeout_s)
            except (LLMRequestRejected, LLMUnavailable) as exc:
                if fmt is None or not self._rejects_format(exc):
                    raise
                mode += 1
                continue
            self._json_mode = mode
            return resp

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"OpenAICompatLLM(base_url={self.base_url!r}, model={self._model!r})"


# --------------------------------------------------------------------------- factory


def _unknown(spec: Any) -> ModelError:
    return ModelError(f"unknown LLM {spec!r}; valid forms: " + ", ".join(LLM_SPECS))


@functools.lru_cache(maxsize=None)
def _cached_llm(spec: str, cache_dir: str) -> LLM:
    from cograg.models.model_files import PROFILES, ensure_model, verify_file

    if spec in PROFILES:
        path = ensure_model(spec, Path(cache_dir))
        return LlamaCppLLM(path, name=f"llama.cpp:{path.stem}")
    if spec.startswith("gguf:"):
        rest = spec[len("gguf:") :]
        path_text, _, frag = rest.partition("#")
        if not path_text.strip():
            raise _unknown(spec)
        path = Path(path_text.strip()).expanduser()
        if frag:
            key, _, value = frag.partition("=")
            if key.strip().lower() != "sha256" or not value.strip():
                raise ModelError(f"unknown fragment {frag!r} in {spec!r}; use #sha256=<hex>")
            verify_file(path, value.strip())
        elif not path.is_file():
            raise LLMUnavailable(f"model file not found: {path}")
        return LlamaCppLLM(path)
    if spec.startswith("openai:"):
        url, _, model = spec[len("openai:") :].partition("#")
        return OpenAICompatLLM(url.strip(), model.strip() or None, api_key=os.environ.get(OPENAI_KEY_ENV))
    raise _unknown(spec)


def get_llm(spec: str | None = None, *, cache_dir: str | os.PathLike[str]) -> LLM:
    """The LLM for a spec string (see LLM_SPECS); None means "default".

    `cache_dir` is where embedded models are assembled (the store's model cache). One instance
    per (spec, cache_dir) per process, so a model is loaded once. For "openai:" specs the API
    key, if any, is read from $COGRAG_LLM_API_KEY.
    """
    if spec is None:
        spec = "default"
    if not isinstance(spec, str):
        raise ModelError(f"LLM spec must be a string, got {type(spec).__name__}")
    key = spec.strip()
    if not key:
        raise _unknown(spec)
    head, sep, rest = key.partition(":")
    if sep and head.lower() in ("gguf", "openai"):
        key = f"{head.lower()}:{rest.strip()}"
    else:
        key = key.lower()
    cache = str(Path(cache_dir).expanduser().resolve())
    return _cached_llm(key, cache)


get_llm.cache_clear = _cached_llm.cache_clear  # type: ignore[attr-defined]


__all__ = [
    "LLM",
    "LLM_SPECS",
    "ChatMessage",
    "LLMCall",
    "LLMOutputError",
    "LLMRequestRejected",
    "LLMResponse",
    "LLMTimeout",
    "LLMUnavailable",
    "LlamaCppLLM",
    "OpenAICompatLLM",
    "ScriptedLLM",
    "coerce_messages",
    "get_llm",
    "json_instruction",
    "parse_json_output",
    "repair_json",
    "retry_message",
    "simple_token_count",
]
