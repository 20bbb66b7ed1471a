"""`OpenAICompatLLM`: any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server, hosted APIs)."""

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
from cograg.models._local import openai_http_client
from cograg.models.llm.json_output import JSONChatMixin
from cograg.models.llm.types import (
    ChatMessage,
    LLMRequestRejected,
    LLMResponse,
    LLMTimeout,
    LLMUnavailable,
    Messages,
    check_chat_args,
    coerce_messages,
    elapsed_ms,
    simple_token_count,
)

# response_format variants, most constrained first. The first that the endpoint accepts is kept.
_JSON_MODES = ("json_schema", "json_object_schema", "json_object", "prompt")
_FORMAT_WORDS = ("response_format", "response format", "json_schema", "json_object", "guided_json")


class OpenAICompatLLM(JSONChatMixin):
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
        deadline = time.monotonic() + timeout_s
        url = f"{self.base_url}{path}"
        with self._request(method, path, body, timeout_s) as resp:
            buf = bytearray()
            for chunk in resp.iter_bytes():
                buf.extend(chunk)
                if time.monotonic() > deadline:
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
            duration_ms=elapsed_ms(start),
            model=str(payload.get("model") or self.model),
            finish_reason=str(choice.get("finish_reason") or "stop"),
        )

    def _post_chat(self, messages: list[ChatMessage], body: dict[str, Any], timeout_s: float | None) -> LLMResponse:
        start = time.monotonic()
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
        check_chat_args(max_tokens, temperature, timeout_s)
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
        check_chat_args(max_tokens, temperature, timeout_s)
        msgs = coerce_messages(messages)
        body = self._body(msgs, max_tokens, temperature, None)
        body["stream"] = True
        return self._stream(body, timeout_s or self.timeout_s)

    def _stream(self, body: dict[str, Any], timeout_s: float) -> Iterator[str]:
        url = f"{self.base_url}/chat/completions"
        deadline = time.monotonic() + timeout_s
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
                text = self._parse(payload, [], time.monotonic()).text
                if text:
                    yield text
                return
            for line in resp.iter_lines():
                if time.monotonic() > deadline:
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
