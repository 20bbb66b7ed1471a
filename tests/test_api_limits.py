"""What the HTTP API bounds before it does any work: body sizes (declared, streamed, per uploaded
file), metric labels, key guessing; and what it says about itself: /healthz over a broken corpus
policy, `Allow` on a 405, the question limit in the OpenAPI document, an empty document scope."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")
pytest.importorskip("uvicorn", reason="the HTTP API needs the server extra: pip install -e '.[server]'")

from fastapi.testclient import TestClient  # noqa: E402

from cograg.api import create_app  # noqa: E402
from cograg.api.body_limit import DEFAULT_BODY_LIMIT, PartSizes  # noqa: E402
from cograg.models.judge import LexicalJudge  # noqa: E402
from cograg.testing import ScriptedLLM  # noqa: E402
from tests.api_support import ingest_corpus, scripted_app, scripted_settings  # noqa: E402
from tests.fakes import HashingEmbedder  # noqa: E402
from tests.test_api_keys import BOB_KEY, CAROL_KEY, bearer, keyed_app  # noqa: E402
from tests.test_control_flow import Brain  # noqa: E402

QUESTION = "When did the Linden Bridge open?"
UPLOAD_MB = 0.01  # a 10 KiB file limit: 200 KiB for an upload of the most files
BOUNDARY = "cograg-test-boundary"
BLOCK = 4096


def multipart_head(name: str = "big.txt") -> bytes:
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode()


class Feed:
    """An ASGI `receive` handing out the body in blocks, counting what the app pulled."""

    def __init__(self, first: bytes, blocks: int, block: bytes = b"word " * (BLOCK // 5)) -> None:
        self.chunks = [first] + [block] * blocks
        self.pulled = 0

    async def __call__(self) -> dict[str, Any]:
        if self.pulled >= len(self.chunks):
            await anyio.sleep(3600)  # the client waits for the answer
        self.pulled += 1
        return {"type": "http.request", "body": self.chunks[self.pulled - 1],
                "more_body": self.pulled < len(self.chunks)}

    def bytes_pulled(self) -> int:
        return sum(len(c) for c in self.chunks[:self.pulled])


def call_asgi(app: Any, method: str, path: str, headers: dict[str, str], feed: Feed) -> tuple[int, dict, bytes]:
    """One request straight into the app (no transport buffering the body first): status, headers, body."""
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "root_path": "", "scheme": "http", "query_string": b"",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
             "client": ("127.0.0.1", 5000), "server": ("testserver", 80)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def run() -> None:
        with anyio.fail_after(60):
            await app(scope, feed, send)
    anyio.run(run)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


@pytest.fixture()
def small_upload_app(tmp_path: Path) -> Any:
    app, _ = scripted_app(tmp_path, max_upload_mb=UPLOAD_MB)
    return app


def test_a_declared_length_over_the_cap_is_refused_unread(small_upload_app: Any):
    upload_cap = int(UPLOAD_MB * (1 << 20)) * 20
    for path, length, headers in (
            ("/api/documents", upload_cap + 1, {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}),
            ("/api/agent/qa/v2", DEFAULT_BODY_LIMIT + 1, {"content-type": "application/json"}),
            ("/api/agent/qa/v2/", 1_100_000_000, {"content-type": "application/json"})):
        feed = Feed(b"{", 10)
        status, _, body = call_asgi(small_upload_app, "POST", path, {**headers, "content-length": str(length)}, feed)
        assert status == 413 and feed.pulled == 0, (path, status, feed.pulled)
        assert body.startswith(b'{"error":"too_large","detail":') and b"\n" not in body and str(length).encode() in body


def test_a_chunked_json_body_stops_at_the_cap(small_upload_app: Any):
    feed = Feed(b'{"question": "', 1000)  # 4 MB, no declared length
    status, _, body = call_asgi(small_upload_app, "POST", "/api/agent/qa/v2", {"content-type": "application/json"},
                                feed)
    assert status == 413 and b"too_large" in body
    assert feed.bytes_pulled() <= DEFAULT_BODY_LIMIT + BLOCK


def test_an_uploaded_file_over_the_limit_is_refused_while_it_streams_in(small_upload_app: Any, tmp_path: Path):
    feed = Feed(multipart_head(), 1000)  # one 4 MB file against a 10 KiB limit
    status, _, body = call_asgi(small_upload_app, "POST", "/api/documents",
                                {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}, feed)
    assert status == 413 and b"larger than the upload limit of 0.01 MB" in body, body
    assert feed.bytes_pulled() < 64 << 10  # the file limit and its part headers, not the whole file
    assert not [p for p in (tmp_path / "store" / "uploads").rglob("*") if p.is_file()]


def test_an_upload_is_refused_401_or_429_before_its_body_is_read(tmp_path: Path):
    app = keyed_app(tmp_path, anonymous="refuse")  # carol may make 2 requests a minute
    multipart = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
    for headers, status in (({}, 401), (bearer("not-a-key"), 401)):
        feed = Feed(multipart_head(), 100)
        assert call_asgi(app, "POST", "/api/documents", {**multipart, **headers}, feed)[0] == status
        assert feed.pulled == 0
    carol = {"x-api-key": CAROL_KEY}
    with TestClient(app, raise_server_exceptions=False) as c:  # admitted once per upload, not twice
        note = {"files": ("note.md", b"# Note\n\nThe ferry leaves at nine.\n", "text/markdown")}
        assert [c.post("/api/documents", files=note, headers=carol).status_code for _ in range(2)] == [200, 200]
    feed = Feed(multipart_head(), 100)
    status, headers, _ = call_asgi(app, "POST", "/api/documents", {**multipart, **carol}, feed)
    assert status == 429 and feed.pulled == 0 and 1 <= int(headers["retry-after"]) <= 60


def test_uploads_within_the_limits_still_go_through(small_upload_app: Any):
    with TestClient(small_upload_app, raise_server_exceptions=False) as c:
        files = [("files", (f"n{i}.md", f"# Note {i}\n\nThe ferry leaves at {i} am.\n".encode() + b"x" * 9000,
                            "text/markdown")) for i in range(3)]
        r = c.post("/api/documents", files=files)
        assert r.status_code == 200 and r.json()["added"] == 3, r.text


def test_part_sizes_find_a_boundary_split_between_chunks():
    body = b"\r\n".join([b"--b", b"head", b"", b"x" * 10, b"--b", b"head", b"", b"y" * 30, b"--b--", b""])
    for cut in range(1, len(body)):
        parts = PartSizes(b"b")
        parts.feed(body[:cut])
        assert parts.feed(body[cut:]) == len(b"\r\nhead\r\n\r\n") + 30, cut


@contextlib.contextmanager
def serving(app: Any) -> Iterator[int]:
    """`app` under a real uvicorn on a free port of 8800-8899, in a thread; stopped on exit."""
    import uvicorn

    for port in range(8800, 8900):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        break
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(20)


def test_a_real_server_answers_413_while_a_chunked_upload_is_still_coming(small_upload_app: Any):
    answer = bytearray()
    with serving(small_upload_app) as port, socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        def read() -> None:
            with contextlib.suppress(OSError):
                while chunk := s.recv(4096):
                    answer.extend(chunk)
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        s.sendall(f"POST /api/documents HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n\r\n".encode())
        block, sent = b"word " * 4000, 0
        with contextlib.suppress(OSError):  # the server may close the connection on the rest
            s.sendall(b"%x\r\n%s\r\n" % (len(multipart_head()), multipart_head()))
            while sent < 50 << 20 and not answer:  # 50 MB against a 10 KiB file limit
                s.sendall(b"%x\r\n%s\r\n" % (len(block), block))
                sent += len(block)
        deadline = time.monotonic() + 10
        while b"}" not in answer and time.monotonic() < deadline:  # the one-line JSON error, whole
            time.sleep(0.02)
    assert bytes(answer).startswith(b"HTTP/1.1 413"), bytes(answer[:200])
    assert b'"error":"too_large"' in answer
    # Refused long before the 50 MB ended. The slack is the two sockets' buffers (Linux lets loopback
    # buffers grow to several MB) and a busy machine's delay before the reader thread sees the answer.
    assert sent < 16 << 20


def test_made_up_methods_and_unknown_paths_add_no_metric_series(tmp_path: Path):
    app, _ = scripted_app(tmp_path)
    with TestClient(app, raise_server_exceptions=False) as c:
        for i in range(5):
            c.request(f"BREW{i}", "/api/agent/qa/v2")
            c.get(f"/no/such/page/{i}")
            c.request(f"BREW{i}", f"/api/x{i}")
        metrics = c.get("/metrics").text
    assert "BREW" not in metrics and "/no/such" not in metrics and "/api/x" not in metrics
    assert 'cograg_http_requests_total{method="other",route="/api/agent/qa/v2",status="405"} 5.0' in metrics
    assert 'cograg_http_requests_total{method="GET",route="unmatched",status="404"} 5.0' in metrics
    assert 'cograg_http_requests_total{method="other",route="unmatched",status="404"} 5.0' in metrics


def test_guessing_keys_runs_into_the_anonymous_rate_limit(tmp_path: Path):
    with TestClient(keyed_app(tmp_path, anonymous_rate_per_minute=3), raise_server_exceptions=False) as c:
        codes = [c.get("/api/documents", headers=bearer(f"guess-{i}")).status_code for i in range(5)]
        assert codes == [401, 401, 401, 429, 429]
        r = c.get("/api/documents", headers=bearer("guess-9"))
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
        assert r.json()["error"] == "too_many_requests"
        assert c.get("/api/documents").status_code == 429  # the same address's anonymous allowance
        assert c.get("/api/documents", headers=bearer(BOB_KEY)).status_code == 200  # a real key has its own


BROKEN_POLICY = "allow_sources: [\n"


def test_healthz_is_503_while_the_corpus_policy_is_broken(tmp_path: Path):
    app, _ = scripted_app(tmp_path, policy=BROKEN_POLICY)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/healthz")
        assert r.status_code == 503, r.text
        assert r.json()["error"] == "server_config" and "corpus_policy.yaml is not valid YAML" in r.json()["detail"]
        assert "\n" not in r.json()["detail"] and str(tmp_path) not in r.text
        assert c.post("/api/agent/qa/v2", json={"question": QUESTION}).json()["error"] == "server_config"
        (tmp_path / "store" / "corpus_policy.yaml").write_text("snippet_visible: true\n", encoding="utf-8")
        r = c.get("/healthz")
        assert r.status_code == 200 and r.json()["status"] == "ok"


def test_method_not_allowed_names_the_allowed_methods(tmp_path: Path):
    app, _ = scripted_app(tmp_path)
    with TestClient(app, raise_server_exceptions=False) as c:
        for method, path, allowed in (("DELETE", "/api/agent/qa/v2", "POST"), ("PUT", "/healthz", "GET"),
                                      ("PATCH", "/api/sessions/", "GET")):
            r = c.request(method, path)
            assert r.status_code == 405 and r.json()["error"] == "method_not_allowed", (path, r.text)
            assert r.headers.get("allow") == allowed, (path, r.headers)


def test_the_openapi_question_limit_is_the_one_the_server_applies(tmp_path: Path):
    settings = scripted_settings(tmp_path / "store")
    ingest_corpus(settings, tmp_path / "corpus")
    for limit in (settings.answer.max_question_chars, 40):
        configured = settings.model_copy(update={"answer": settings.answer.model_copy(
            update={"max_question_chars": limit})})
        app = create_app(configured, llm=ScriptedLLM([Brain()] * 100), embedder=HashingEmbedder(),
                         judge=LexicalJudge())
        with TestClient(app, raise_server_exceptions=False) as c:
            schemas = c.get("/openapi.json").json()["components"]["schemas"]
            assert schemas["QARequest"]["properties"]["question"]["maxLength"] == limit
            assert schemas["SelfCorrectiveRequest"]["properties"]["query"]["maxLength"] == limit
            over = c.post("/api/agent/qa/v2", json={"question": "Linden " + "x" * limit})
            assert over.status_code == 400 and f"the limit is {limit}" in over.json()["detail"], over.text
            assert c.post("/api/agent/qa/v2", json={"question": QUESTION}).status_code == 200  # 32 characters


def test_an_empty_document_scope_is_a_422_naming_the_fix(tmp_path: Path):
    app, _ = scripted_app(tmp_path)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/api/agent/qa/v2", json={"question": QUESTION, "doc_ids": []})
        assert r.status_code == 422 and r.json()["error"] == "invalid_request"
        assert r.json()["detail"].endswith("doc_ids is empty: leave it out to search every document")


def test_uploads_waiting_on_a_busy_folder_are_bounded_and_every_other_endpoint_still_answers(tmp_path: Path):
    import httpx
    from concurrent.futures import ThreadPoolExecutor

    from cograg.api.auth import ANONYMOUS, Caller
    from cograg.api.documents import caller_folder
    from cograg.locks import directory_lock
    from cograg.retrieval.models import Principal

    app, _ = scripted_app(tmp_path)
    folder = tmp_path / "store" / "uploads" / caller_folder(Caller(ANONYMOUS, Principal(), True, "x", 1))
    folder.mkdir(parents=True)
    with serving(app) as port, ThreadPoolExecutor(45) as pool:
        base = f"http://127.0.0.1:{port}"

        def upload(i: int) -> httpx.Response:
            note = {"files": (f"n{i}.md", f"# N{i}\n\nThe ferry leaves at {i}.\n".encode(), "text/markdown")}
            return httpx.post(base + "/api/documents", files=note, timeout=60)

        with directory_lock(folder):  # stands for one long ingest in the anonymous callers' folder
            uploads = [pool.submit(upload, i) for i in range(45)]  # more than the server has worker threads
            deadline = time.monotonic() + 20
            while sum(f.done() for f in uploads) < 30 and time.monotonic() < deadline:
                time.sleep(0.05)
            try:  # the uploads beyond the queue were refused at once; every other endpoint still answers
                assert httpx.get(base + "/healthz", timeout=5).status_code == 200
                assert httpx.get(base + "/api/documents", timeout=5).status_code == 200
            finally:
                refused = [f.result() for f in uploads if f.done()]
        codes = [f.result().status_code for f in uploads]
    queue = app.state.cograg.upload_admission
    assert 1 <= codes.count(200) <= queue.max_running + queue.max_waiting, codes
    assert codes.count(200) + codes.count(429) == len(codes), codes
    assert refused and all(r.status_code == 429 for r in refused)
    assert all(r.json()["error"] == "too_many_requests" and 1 <= int(r.headers["retry-after"]) <= 5
               for r in refused)
    assert queue.admitted == 0


def holding_brain() -> tuple[Brain, threading.Event, threading.Event]:
    """A scripted model whose first call holds its turn (and so a running slot) until `release`;
    `entered` is set once a turn holds one."""
    entered, release = threading.Event(), threading.Event()

    def hold(text: str) -> None:
        entered.set()
        release.wait(20)
    return Brain(on_call=hold), entered, release


def test_a_full_answer_queue_refuses_a_stream_with_429_never_an_error_event(tmp_path: Path):
    import httpx
    from concurrent.futures import ThreadPoolExecutor

    brain, entered, release = holding_brain()
    app, _ = scripted_app(tmp_path, brain=brain, max_running=1, max_waiting=1)
    with serving(app) as port, ThreadPoolExecutor(9) as pool:
        url = f"http://127.0.0.1:{port}/api/agent/qa/v2/stream"

        def stream(_: int) -> tuple[int, str, str]:
            with httpx.stream("POST", url, json={"question": QUESTION}, timeout=60) as r:
                return r.status_code, r.headers.get("retry-after", ""), "".join(r.iter_text())
        first = pool.submit(stream, 0)
        assert entered.wait(20)  # one turn runs: one more may wait, every other is refused
        others = [pool.submit(stream, i) for i in range(1, 9)]
        deadline = time.monotonic() + 20
        while sum(f.done() for f in others) < 7 and time.monotonic() < deadline:
            time.sleep(0.05)
        release.set()
        results = [first.result()] + [f.result() for f in others]
    for status, retry_after, body in results:
        assert "too_many_requests" not in body or status == 429, body[-300:]  # never inside a 200 stream
        if status == 200:
            assert "event: answer" in body, body[-300:]
        else:
            assert status == 429 and 1 <= int(retry_after) <= 5, (status, retry_after, body)
    assert [s for s, _, _ in results].count(200) == 2  # the one running and the one waiting
    assert app.state.cograg.admission.admitted == 0
    with TestClient(app, raise_server_exceptions=False) as c:
        for _ in range(3):  # a stream refused before it starts (a scope that matches nothing) gives its place back
            r = c.post("/api/agent/qa/v2/stream", json={"question": QUESTION, "doc_ids": ["no-such-doc"]})
            assert r.status_code == 404, r.text
        assert app.state.cograg.admission.admitted == 0
        r = c.post("/api/agent/qa/v2/stream", json={"question": QUESTION})
        assert r.status_code == 200 and "event: answer" in r.text
    assert app.state.cograg.admission.admitted == 0


def test_a_reserved_place_is_held_until_its_turn_takes_it_or_it_is_given_back():
    from cograg.api.admission import Busy, TurnAdmission

    queue = TurnAdmission(1, 1)
    first, second = queue.reserve(), queue.reserve()
    with pytest.raises(Busy) as busy:
        queue.reserve()
    assert 1 <= busy.value.retry_after <= 5 and queue.admitted == 2
    with queue.turn(first):  # the turn takes the ticket's place over: no second count
        assert queue.admitted == 2
        first.release()  # too late to give back: the turn holds it
        assert queue.admitted == 2
    assert queue.admitted == 1
    second.release()
    second.release()
    assert queue.admitted == 0
    with queue.turn(second):  # a ticket given back is as none: the turn takes a place of its own
        assert queue.admitted == 1
    assert queue.admitted == 0


def test_a_busy_answer_carries_retry_after(tmp_path: Path):
    brain, entered, release = holding_brain()
    app, _ = scripted_app(tmp_path, brain=brain, max_running=1, max_waiting=0)
    with TestClient(app, raise_server_exceptions=False) as c:
        worker = threading.Thread(target=lambda: c.post("/api/agent/qa/v2", json={"question": QUESTION}))
        worker.start()
        try:
            assert entered.wait(20)
            r = c.post("/api/agent/qa/v2", json={"question": QUESTION})
            assert r.status_code == 429 and 1 <= int(r.headers.get("retry-after", "0")) <= 5, (r.text, r.headers)
        finally:
            release.set()
            worker.join(20)


def test_part_sizes_count_a_delimiter_only_where_the_parser_sees_one():
    from cograg.api.body_limit import multipart_boundary
    from starlette.datastructures import Headers

    # all data of one part to python-multipart; the delimiter after it is followed by transport padding
    fake = b"x" * 20 + b"\r\n--bX" + b"y" * 20 + b"\r\n--b-z" + b"\r\n--b\rq"
    body = b"--b\r\nhead\r\n\r\n" + fake + b"\r\n--b \r\nhead\r\n\r\n" + b"z" * 5 + b"\r\n--b--\r\n"
    whole = len(b"\r\nhead\r\n\r\n" + fake)
    for cut in range(1, len(body)):
        parts = PartSizes(b"b")
        parts.feed(body[:cut])
        assert parts.feed(body[cut:]) == whole, cut
    for content_type, boundary in ((f'multipart/form-data; x="boundary=z"; boundary={BOUNDARY}', BOUNDARY),
                                   ('multipart/form-data; boundary="a;b=c"', "a;b=c"),
                                   ("Multipart/Form-Data; BOUNDARY=q", "q"), ("text/plain; boundary=q", None)):
        found = multipart_boundary(Headers({"content-type": content_type}))
        assert found == (boundary.encode() if boundary else None), content_type


@pytest.mark.parametrize(("content_type", "fake"), [
    # the real delimiter's text followed by a byte that makes it data to the parser
    (f"multipart/form-data; boundary={BOUNDARY}", f"\r\n--{BOUNDARY}X"),
    # a whole delimiter of a "boundary=" inside another parameter, which is not the boundary
    (f'multipart/form-data; x="boundary=z"; boundary={BOUNDARY}', "\r\n--z\r\n")])
def test_a_file_holding_a_delimiters_text_is_still_refused_while_it_streams_in(small_upload_app: Any,
                                                                                 content_type: str, fake: str):
    feed = Feed(multipart_head(), 0)  # the fake delimiter every 4 KB of one 180 KB file
    feed.chunks = ([multipart_head()] + [b"word " * 800 + fake.encode()] * 45
                   + [f"\r\n--{BOUNDARY}--\r\n".encode()])
    status, _, body = call_asgi(small_upload_app, "POST", "/api/documents", {"content-type": content_type}, feed)
    assert feed.bytes_pulled() < 64 << 10, body  # refused at about the file limit, not after the whole upload
    assert status == 413 and b"a file in the upload is larger than the upload limit of 0.01 MB" in body, body


def test_an_upload_refused_after_it_arrived_names_a_fractional_limit_as_it_is(small_upload_app: Any):
    with TestClient(small_upload_app, raise_server_exceptions=False) as c:
        # over the file limit by less than the part headers' allowance: refused when the file is stored
        note = {"files": ("n.md", b"# Note\n\n" + b"x" * (int(UPLOAD_MB * (1 << 20)) + 100), "text/markdown")}
        r = c.post("/api/documents", files=note)
    assert r.status_code == 413 and r.json()["detail"] == "n.md is larger than the upload limit of 0.01 MB", r.text


def test_a_json_body_is_not_read_for_a_caller_refused_401_or_429(tmp_path: Path):
    # the key check ran as a route dependency, after FastAPI had read and parsed up to 1 MiB of JSON
    app = keyed_app(tmp_path, anonymous="refuse")  # carol may make 2 requests a minute
    json_type = {"content-type": "application/json"}
    for headers in ({}, bearer("not-a-key")):
        feed = Feed(b'{"question": "', 50)
        assert call_asgi(app, "POST", "/api/agent/qa/v2", {**json_type, **headers}, feed)[0] == 401
        assert feed.pulled == 0
    carol = {"x-api-key": CAROL_KEY}
    with TestClient(app, raise_server_exceptions=False) as c:  # admitted once per request, not twice
        assert [c.post("/api/agent/qa/v2", json={"question": QUESTION}, headers=carol).status_code
                for _ in range(2)] == [200, 200]
    feed = Feed(b'{"question": "', 50)
    status, headers, _ = call_asgi(app, "POST", "/api/agent/qa/v2", {**json_type, **carol}, feed)
    assert status == 429 and feed.pulled == 0 and 1 <= int(headers["retry-after"]) <= 60
