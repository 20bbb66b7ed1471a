"""`OpenAICompatLLM`: any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server, hosted APIs),
through the official openai SDK (`base_url` pointed at the endpoint)."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from cograg.models import ModelError
from cograg.models._local import DiscoveredModel, endpoint_base, openai_client, positive_seconds
from cograg.models.llm.base import ChatModelBase
from cograg.models.llm.types import (
    ChatMessage,
    LLMRequestRejected,
    LLMResponse,
    LLMTimeout,
    LLMUnavailable,
    elapsed_ms,
    simple_token_count,
)

# response_format variants, most constrained first. The first that the endpoint accepts is kept.
_JSON_MODES = ("json_schema", "json_object_schema", "json_object", "prompt")
_FORMAT_WORDS = ("response_format", "response format", "json_schema", "json_object", "guided_json")
_CHAT_PATH = "/chat/completions"


def _cause_name(exc: BaseException) -> str:
    """The class name of the transport error behind an SDK error (httpx's ConnectError, ...)."""
    return type(exc.__cause__).__name__ if exc.__cause__ is not None else ""


def _count(value: Any) -> int | None:
    """A token count from the server's `usage`, None when it sent none (or nonsense)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class OpenAICompatLLM(DiscoveredModel, ChatModelBase):
    """Any OpenAI-compatible `POST {base_url}/chat/completions` endpoint, through the openai SDK.

    vLLM, Ollama, llama.cpp server, llama-cpp-python's server, hosted APIs. `model=None` uses the
    first model listed by `GET {base_url}/models`. `chat_json` asks for
    `response_format={"type": "json_schema", ...}`; when the endpoint rejects that (HTTP 400/422
    naming the response format) it falls back to `{"type": "json_object", "schema": ...}`
    (llama-cpp-python, Anyscale), then plain JSON mode, then the schema in the prompt only, and
    remembers what worked. The output is validated either way. `stream` reads server-sent events.
    Token counts come from the server's `usage`, or are estimated when it sends none. SDK and
    transport errors become LLMUnavailable / LLMRequestRejected / LLMTimeout (`_errors`).
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60,
    ) -> None:
        base = endpoint_base(base_url, "LLM")
        self.base_url = base
        self.timeout_s = positive_seconds(timeout_s, "timeout_s")
        self._model = (model or "").strip() or None
        self._json_mode: int = 0
        self._lock = threading.Lock()
        self._client, self._headers = openai_client(base, api_key, self.timeout_s)

    # -- identity --------------------------------------------------------------------
    @property
    def name(self) -> str:  # type: ignore[override]
        return f"openai:{self._model or self.base_url}"

    def count_tokens(self, text: str) -> int:
        """An estimate (the OpenAI API has no tokenizer endpoint)."""
        return simple_token_count(text)

    # -- errors ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _errors(self, path: str, timeout_s: float, *, streaming: bool = False) -> Iterator[None]:
        """The SDK's exceptions as cograg errors, on one line, naming the URL."""
        import openai

        url = f"{self.base_url}{path}"
        try:
            yield
        except openai.APITimeoutError as exc:
            if _cause_name(exc) == "ConnectTimeout":
                raise LLMUnavailable(
                    f"cannot reach the LLM endpoint {url} (no connection within {timeout_s:g} s)"
                ) from exc
            raise LLMTimeout(f"the LLM endpoint {url} did not answer within {timeout_s:g} s") from exc
        except openai.APIConnectionError as exc:
            if _cause_name(exc) == "ConnectError":
                raise LLMUnavailable(
                    f"cannot connect to the LLM endpoint {url} ({exc.__cause__}); is the server running?"
                ) from exc
            cause = exc.__cause__ or exc
            raise LLMUnavailable(
                f"request to the LLM endpoint {url} failed: {type(cause).__name__}: {cause}"
            ) from exc
        except openai.APIStatusError as exc:
            raise self._status_error(url, exc.response) from None
        except openai.APIError as exc:  # an error event inside a stream
            raise LLMUnavailable(f"the LLM endpoint {url} reported an error while streaming: {exc.message}") from None
        except json.JSONDecodeError as exc:
            what = ("sent a malformed stream event" if streaming
                    else "did not return JSON (is it an OpenAI-compatible API?)")
            raise LLMUnavailable(f"the LLM endpoint {url} {what}: {exc}") from None

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

    # -- requests --------------------------------------------------------------------
    def _discover_model(self) -> str:
        url = f"{self.base_url}/models"
        timeout = min(self.timeout_s, 30.0)
        with self._errors("/models", timeout):
            page = self._client.models.list(timeout=timeout, extra_headers=self._headers)
        try:
            models = [m.id for m in page.data if isinstance(getattr(m, "id", None), str)]
        except (TypeError, AttributeError):  # not a model list (the SDK hands back non-JSON as text)
            raise LLMUnavailable(f"{url} returned an unexpected payload; give the model as #name") from None
        if not models:
            raise LLMUnavailable(f"{url} lists no model; give the model as #name")
        return models[0]

    def _create(self, messages: list[ChatMessage], timeout_s: float, *, streaming: bool = False,
                **params: Any) -> Any:
        """`chat.completions.create` for `messages` (the model is discovered first if needed)."""
        model = self.model
        with self._errors(_CHAT_PATH, timeout_s, streaming=streaming):
            return self._client.chat.completions.create(
                model=model,
                messages=[m.model_dump() for m in messages],
                timeout=timeout_s,
                extra_headers=self._headers,
                **params,
            )

    @staticmethod
    def _params(max_tokens: int, temperature: float, stop: list[str] | None) -> dict[str, Any]:
        params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": float(temperature)}
        if stop:
            params["stop"] = list(stop)
        return params

    def _response(self, completion: Any, messages: list[ChatMessage], start: float) -> LLMResponse:
        """An LLMResponse from a parsed completion (the SDK builds it without validating it)."""
        url = f"{self.base_url}{_CHAT_PATH}"
        if isinstance(completion, str):  # the SDK hands back a body that is not JSON as text
            raise LLMUnavailable(
                f"the LLM endpoint {url} did not return JSON (is it an OpenAI-compatible API?): {completion[:120]!r}"
            )
        try:
            choice = completion.choices[0]
            text = choice.message.content
            if text is None:
                text = ""
            if not isinstance(text, str):
                raise TypeError("content is not a string")
        except (TypeError, KeyError, IndexError, AttributeError) as exc:
            raise LLMUnavailable(
                f"the LLM endpoint {url} returned an unexpected payload (no choices[0].message): {exc}"
            ) from None
        usage = getattr(completion, "usage", None)
        prompt_tokens = _count(getattr(usage, "prompt_tokens", None))
        if prompt_tokens is None:
            prompt_tokens = sum(self.count_tokens(m.content) for m in messages)
        completion_tokens = _count(getattr(usage, "completion_tokens", None))
        if completion_tokens is None:
            completion_tokens = self.count_tokens(text)
        return LLMResponse(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            duration_ms=elapsed_ms(start),
            model=str(getattr(completion, "model", None) or self.model),
            finish_reason=str(getattr(choice, "finish_reason", None) or "stop"),
        )

    def _post_chat(self, messages: list[ChatMessage], params: dict[str, Any], timeout_s: float | None) -> LLMResponse:
        start = time.monotonic()
        completion = self._create(messages, timeout_s or self.timeout_s, **params)
        return self._response(completion, messages, start)

    # -- ChatModelBase hooks -----------------------------------------------------------
    def _chat(self, messages: list[ChatMessage], max_tokens: int, temperature: float, timeout_s: float | None,
              stop: list[str] | None) -> LLMResponse:
        return self._post_chat(messages, self._params(max_tokens, temperature, stop), timeout_s)

    def _stream(self, messages: list[ChatMessage], max_tokens: int, temperature: float,
                timeout_s: float | None) -> Iterator[str]:
        timeout_s = timeout_s or self.timeout_s
        params = self._params(max_tokens, temperature, None)
        url = f"{self.base_url}{_CHAT_PATH}"
        deadline = time.monotonic() + timeout_s
        stream = self._create(messages, timeout_s, streaming=True, stream=True, **params)
        with contextlib.closing(stream):
            if "text/event-stream" not in stream.response.headers.get("content-type", ""):
                # Some servers ignore "stream": true and answer with one JSON body.
                text = self._unstreamed_text(stream.response, url)
                if text:
                    yield text
                return
            with self._errors(_CHAT_PATH, timeout_s, streaming=True):
                for chunk in stream:
                    if time.monotonic() > deadline:
                        raise LLMTimeout(f"the LLM endpoint {url} did not finish streaming within {timeout_s:g} s")
                    try:
                        choices = chunk.choices or []
                        delta = choices[0].delta.content if choices else None
                    except (AttributeError, IndexError, TypeError):
                        raise LLMUnavailable(
                            f"the LLM endpoint {url} sent an unexpected stream event: {str(chunk)[:120]!r}"
                        ) from None
                    if isinstance(delta, str) and delta:
                        yield delta

    def _unstreamed_text(self, response: Any, url: str) -> str:
        from openai.types.chat import ChatCompletion

        response.read()
        try:
            payload = response.json()
        except ValueError:
            raise LLMUnavailable(
                f"the LLM endpoint {url} did not return an event stream or JSON: {response.text[:120]!r}"
            ) from None
        completion = ChatCompletion.construct(**payload) if isinstance(payload, dict) else payload
        return self._response(completion, [], time.monotonic()).text

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
            params = self._params(max_tokens, 0.0, None)
            fmt = self._response_format(_JSON_MODES[mode], schema)
            if fmt is not None:
                params["response_format"] = fmt
            try:
                resp = self._post_chat(messages, params, timeout_s)
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
