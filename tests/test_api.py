"""The HTTP service (SPEC F3) with FastAPI's TestClient and a scripted model: the seeds' request and
response shapes, the document scope, the event stream, documents, traces, health, metrics, the
snippet policy and one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")
pytest.importorskip("prometheus_client", reason="metrics need the server extra: pip install -e '.[server]'")

from fastapi.testclient import TestClient  # noqa: E402

from tests.api_support import scripted_app  # noqa: E402
from tests.test_control_flow import Brain  # noqa: E402

QUESTION = "When did the Linden Bridge open?"
SEED_003_FIELDS = {"success", "answer", "query", "rewriteHistory", "retrieval", "graderResult", "workflow"}
HIDDEN = "snippet_visible: false\n"


@pytest.fixture()
def client(tmp_path: Path):
    app, _ = scripted_app(tmp_path)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def doc_id_of(client: TestClient, name: str) -> str:
    return next(d["doc_id"] for d in client.get("/api/documents").json() if d["source"] == name)


def sse_events(text: str) -> list[tuple[str, dict]]:
    """(event, data) pairs of a text/event-stream body."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            out.append((fields["event"], json.loads(fields["data"])))
    return out


def test_qa_v2_has_the_seed_004_shape_with_verified_citations(client: TestClient):
    r = client.post("/api/agent/qa/v2", json={"question": QUESTION, "session": "s1"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert {"answer", "citations", "confidence", "grounded", "route", "trace_id", "mode", "claims",
            "fallback"} <= set(body)
    assert "1811" in body["answer"] and body["grounded"] and not body["fallback"]
    assert body["route"] == "DOC_GROUNDED" and body["trace_id"].startswith("tr_")
    (c,) = body["citations"]
    assert set(c) >= {"citation_id", "doc_id", "source", "chunk_id", "snippet", "score"}
    assert c["source"] == "linden.md" and "1811" in c["snippet"] and c["citation_id"] == "1"
    assert all(cl["verdict"] == "SUPPORTED" for cl in body["claims"])
    # the citation opens its passage
    passage = client.get(f"/api/chunks/{c['chunk_id']}").json()
    assert c["snippet"] in passage["text"] and passage["source"] == "linden.md"


def test_a_wrapped_passage_comes_reflowed_too_at_the_same_offsets(tmp_path: Path):
    from tests.api_support import DOCS

    wrapped = ("# Trams\n\nThe city bought the company in 1901 and electrified the whole network. The first\n"
               "electric tram ran on 14 May 1903, crossing the River Vell on the Linden Bridge, which\n"
               "had been widened and strengthened for the purpose.\n")
    from cograg.index.sqlite_store import SQLiteStore

    app, _ = scripted_app(tmp_path, docs={**DOCS, "trams.md": wrapped})
    with SQLiteStore(tmp_path / "store", create=False) as store:
        (doc,) = store.find_documents_named("trams.md")
        chunk_id = next(c.chunk_id for c in store.iter_chunks(doc.doc_id) if "The first" in c.text)
    with TestClient(app) as c:
        chunk = c.get(f"/api/chunks/{chunk_id}").json()
    assert "The first\nelectric tram" in chunk["text"]
    assert len(chunk["reflowed"]) == len(chunk["text"])
    assert "The first electric tram ran on 14 May 1903, crossing the River Vell on the Linden Bridge, which had " \
           "been" in chunk["reflowed"]
    assert chunk["reflowed"].startswith("# Trams\n\n")  # a heading keeps its line


def test_qa_v2_doc_ids_scope_retrieval_to_those_documents(client: TestClient):
    rhine = doc_id_of(client, "rhine.md")
    body = client.post("/api/agent/qa/v2", json={"question": QUESTION, "doc_ids": [rhine[:8]]}).json()
    # the Linden document is out of scope: no citation can come from it
    assert all(c["doc_id"] == rhine for c in body["citations"])
    assert "1811" not in body["answer"]
    trace = client.get(f"/api/traces/{body['trace_id']}").json()
    searched = {cid for s in trace["searches"] for cid in s["chunk_ids"]}
    assert searched and all(client.get(f"/api/chunks/{cid}").json()["doc_id"] == rhine for cid in searched)


def test_qa_v2_mode_and_unknown_scope_and_model(client: TestClient):
    body = client.post("/api/agent/qa/v2", json={"question": QUESTION, "mode": "R2"}).json()
    assert body["mode"] == "R2_MULTI_RETRIEVE" and "1811" in body["answer"]
    r = client.post("/api/agent/qa/v2", json={"question": QUESTION, "doc_ids": ["nosuchdoc"]})
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = client.post("/api/agent/qa/v2", json={"question": QUESTION, "model": "gguf:/etc/passwd"})
    assert r.status_code == 400 and "not offered" in r.json()["detail"]


def test_simple_path_returns_the_contract_object(client: TestClient):
    body = client.post("/api/agent/qa", json={"question": QUESTION}).json()
    assert {"answer", "citations", "fallback", "confidence", "grounded", "route", "trace_id"} <= set(body)
    assert body["citations"][0]["quote"] and "1811" in body["answer"]


def test_self_corrective_rag_has_seed_003_request_and_response(tmp_path: Path):
    # the first search finds the twelve-span bridge, which the grader fails; the rewrite finds 1811
    question = "Which bridge has twelve spans?"
    brain = Brain(grade=lambda q, doc: {"is_relevant": "1811" in doc, "confidence": 0.9, "reasoning": "r"},
                  rewrite=lambda n: {"rewritten_query": "Linden Bridge opened 1811 Tobias Marrick",
                                     "rewrite_reason": "name the bridge", "keywords": ["Linden"]})
    app, _ = scripted_app(tmp_path, brain=brain)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/api/self-corrective-rag", json={
            "query": question, "topK": 1, "similarityThreshold": -1.0, "maxRewriteAttempts": 2,
            "gradePassThreshold": 0.6, "milvusConfig": {"address": "localhost:19530"}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert SEED_003_FIELDS <= set(body) and body["success"] is True
    assert set(body["query"]) == {"original", "final", "wasRewritten", "rewriteCount"}
    assert body["query"] == {"original": question, "final": "Linden Bridge opened 1811 Tobias Marrick",
                             "wasRewritten": True, "rewriteCount": 1}
    assert body["rewriteHistory"][0]["rewrittenQuery"] == body["query"]["final"]
    assert set(body["retrieval"]) == {"totalDocuments", "filteredDocuments", "documents"}
    assert body["retrieval"]["totalDocuments"] == 2 and body["retrieval"]["filteredDocuments"] == 1
    assert [d["passed"] for d in body["retrieval"]["documents"]] == [False, True]
    assert [d["source"] for d in body["retrieval"]["documents"]] == ["rhine.md", "linden.md"]
    assert set(body["graderResult"]) == {"passRate", "passCount", "totalCount", "shouldRewrite", "reasoning"}
    assert body["graderResult"]["passRate"] == 1.0 and not body["graderResult"]["shouldRewrite"]
    wf = body["workflow"]
    assert {"nodeExecutions", "decisionPath", "totalDuration"} <= set(wf)
    assert [n["node"] for n in wf["nodeExecutions"]] == ["retrieve", "grade", "rewrite", "retrieve", "grade",
                                                         "generate"]
    assert wf["decisionPath"][0] == "retrieve" and wf["totalDuration"] > 0
    assert "1811" in body["answer"] and body["citations"]


def test_self_corrective_rag_validates_its_knobs(client: TestClient):
    r = client.post("/api/self-corrective-rag", json={"query": QUESTION, "topK": 0})
    assert r.status_code == 422 and r.json()["detail"].startswith("body.topK:")
    r = client.post("/api/self-corrective-rag", json={"query": QUESTION, "gradePassThreshold": 2})
    assert r.status_code == 422 and "\n" not in r.json()["detail"]


def test_similarity_threshold_drops_documents_below_the_cosine_floor(client: TestClient):
    body = client.post("/api/self-corrective-rag", json={"query": QUESTION, "similarityThreshold": 0.999}).json()
    # every chunk of the tiny corpus has a vector score, all below 0.999: nothing is graded
    assert body["retrieval"] == {"totalDocuments": 0, "filteredDocuments": 0, "documents": []}
    assert body["fallback"] and body["citations"] == []


def test_stream_sends_the_workflow_then_the_verified_answer(client: TestClient):
    with client.stream("POST", "/api/agent/qa/v2/stream", json={"question": QUESTION}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    events = sse_events(text)
    names = [n for n, _ in events]
    assert names[0] == "USER_INPUT_RECEIVED" and "ROUTE_DECIDED" in names and "SENTENCE_VERIFIED" in names
    assert names.index("ROUTE_DECIDED") < names.index("RETRIEVED") < names.index("SENTENCE_VERIFIED")
    assert names[-1] == "answer"
    final = events[-1][1]
    verified = next(d for n, d in events if n == "SENTENCE_VERIFIED")
    assert verified["data"]["citations"][0]["chunk_id"] == final["citations"][0]["chunk_id"]
    # events name the document by file name, never by the server's path to it
    assert verified["data"]["citations"][0]["source"] == "linden.md"
    sources = re.findall(r'"source(?:_path)?": "([^"]*)"', text)
    assert sources and not [s for s in sources if "/" in s]
    assert "1811" in final["answer"] and final["citations"][0]["snippet"]
    assert all(d["trace_id"] == final["trace_id"] for n, d in events[:-1])


def test_stream_rejects_a_bad_request_before_streaming(client: TestClient):
    r = client.post("/api/agent/qa/v2/stream", json={"question": QUESTION, "mode": "R9"})
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    r = client.post("/api/agent/qa/v2/stream", json={"question": ""})
    assert r.status_code == 422
    for question in ("why " * 600, "?!"):  # over answer.max_question_chars; no words
        r = client.post("/api/agent/qa/v2/stream", json={"question": question})
        assert r.status_code == 400 and r.headers["content-type"].startswith("application/json"), r.text[:200]


def test_snippet_visible_false_hides_source_text_everywhere(tmp_path: Path):
    app, _ = scripted_app(tmp_path, policy=HIDDEN)
    with TestClient(app, raise_server_exceptions=False) as c:
        body = c.post("/api/agent/qa/v2", json={"question": QUESTION}).json()
        assert body["citations"] and all(cit["snippet"] == "" for cit in body["citations"])
        assert body["claims"] and all(cl["reason"] == "" for cl in body["claims"])
        simple = c.post("/api/agent/qa", json={"question": QUESTION}).json()
        assert all(cit["quote"] == "" for cit in simple["citations"])
        with c.stream("POST", "/api/agent/qa/v2/stream", json={"question": QUESTION}) as r:
            events = sse_events("".join(r.iter_text()))
        chunk_id = body["citations"][0]["chunk_id"]
        assert c.get(f"/api/chunks/{chunk_id}").json()["text"] == ""
        trace = c.get(f"/api/traces/{body['trace_id']}").json()
        # the model's drafts are its words about the hidden passages: kept, but without their text
        assert trace["drafts"] and all(d["text"] == "" and d["cited"] for d in trace["drafts"])
        scr = c.post("/api/self-corrective-rag", json={"query": QUESTION}).json()
    source_sentence = "It was designed by Tobias Marrick"
    for shown in (body, simple, [d for _, d in events], trace, scr):
        dumped = json.dumps(shown, ensure_ascii=False)
        assert source_sentence not in dumped
        assert '"quote": "The' not in dumped and '"snippet": "The' not in dumped


@pytest.mark.parametrize("policy", ["allow_sources: ['*/rhine.md']\n", "deny_tags: [secret]\n"])
def test_a_passage_the_corpus_policy_keeps_out_is_not_served_by_its_id(tmp_path: Path, policy: str):
    # a passage outside allow_sources, or tagged as the policy denies: search never gives it, and
    # asking for it by id (copied from an old answer, or guessed) must not give it either
    from cograg.index.sqlite_store import SQLiteStore

    app, _ = scripted_app(tmp_path, policy=policy)  # the server's policy, read when it is first used
    with TestClient(app, raise_server_exceptions=False) as c:
        files = {"files": ("plans.md", b"# Plans\n\nThe new bridge will be built by Harbor Works.\n", "text/markdown")}
        assert c.post("/api/documents", files=files, data={"tags": "secret"}).status_code == 200
        with SQLiteStore(tmp_path / "store", create=False) as store:
            chunk_of = {name: next(iter(store.iter_chunks(doc.doc_id))).chunk_id
                        for name in ("plans.md", "rhine.md") for doc in store.find_documents_named(name)}
        denied = c.get(f"/api/chunks/{chunk_of['plans.md']}")
        assert denied.status_code == 404 and "Harbor Works" not in denied.text
        assert c.get(f"/api/chunks/{chunk_of['rhine.md']}").json()["text"].startswith("# Rhine Bridge")


def test_the_document_list_says_which_documents_the_corpus_policy_keeps_out_of_answers(tmp_path: Path):
    # they were listed like any other, so nothing told the user why they were never cited
    app, _ = scripted_app(tmp_path, policy="deny_tags: [secret]\n")
    with TestClient(app, raise_server_exceptions=False) as c:
        files = {"files": ("plans.md", b"# Plans\n\nThe new bridge will be built by Harbor Works.\n", "text/markdown")}
        up = c.post("/api/documents", files=files, data={"tags": "secret"})
        assert up.status_code == 200 and up.json()["documents"][0]["in_answers"] is False
        listed = {d["source"]: d["in_answers"] for d in c.get("/api/documents").json()}
    assert listed == {"plans.md": False, "linden.md": True, "rhine.md": True, "tea.md": True}


def test_a_ref_no_file_system_takes_is_a_short_404(client: TestClient):
    long = "d" * 60_000
    for r in (client.delete(f"/api/documents/{'d' * 256}"), client.delete(f"/api/documents/{long}"),
              client.get(f"/api/chunks/{long}"), client.get(f"/api/traces/{long}")):
        assert r.status_code == 404, r.text
        assert len(r.json()["detail"]) < 200


def test_a_trailing_slash_reaches_the_same_endpoint_never_a_redirect(client: TestClient):
    # Starlette sent every "/api/x/" on with a 307 to "/api/x", for DELETE to a URL that takes only GET.
    assert client.get("/api/documents/", follow_redirects=False).json() == client.get("/api/documents").json()
    for method, path in (("DELETE", "/api/documents/"), ("DELETE", "/api/sessions/")):
        r = client.request(method, path, follow_redirects=False)
        assert r.status_code == 405 and r.json()["error"] == "method_not_allowed", (path, r.status_code)


def test_documents_upload_list_delete(client: TestClient, tmp_path: Path):
    files = {"files": ("notes.md", b"# Notes\n\nThe ferry leaves at 9 am from pier four.\n", "text/markdown")}
    r = client.post("/api/documents", files=files, data={"tags": "ferry"})
    assert r.status_code == 200, r.text
    up = r.json()
    assert up["added"] == 1 and up["documents"][0]["source"] == "notes.md" and up["documents"][0]["tags"] == ["ferry"]
    doc_id = up["documents"][0]["doc_id"]
    assert "notes.md" in [d["source"] for d in client.get("/api/documents").json()]
    # the API takes ids (or paths), not file names: one name can stand for documents of other callers
    assert client.delete("/api/documents/notes.md").status_code == 404
    r = client.delete(f"/api/documents/{doc_id}")
    assert r.status_code == 200 and r.json()["doc_id"] == doc_id
    assert "notes.md" not in [d["source"] for d in client.get("/api/documents").json()]
    assert not list((tmp_path / "store" / "uploads").rglob("notes.md"))  # or a re-sync would bring it back
    assert client.delete(f"/api/documents/{doc_id}").status_code == 404


@pytest.mark.parametrize("name, content, status, words", [
    ("../../etc/passwd", b"x", 400, "the file 'passwd' was sent with a directory in its name (no paths allowed)"),
    ("/etc/evil.txt", b"x", 400, "the file 'evil.txt' was sent with a directory in its name"),
    ("..", b"x", 400, "file name '..' is not a plain file name"),
    ("image.bin", bytes(range(256)) * 8, 400, "image.bin"),
    ("empty.txt", b"", 400, "empty.txt"),
])
def test_bad_uploads_get_a_clear_error(client: TestClient, name: str, content: bytes, status: int, words: str):
    r = client.post("/api/documents", files={"files": (name, content, "application/octet-stream")})
    assert r.status_code == status and words in r.json()["detail"], r.text
    assert "Traceback" not in r.text


def test_upload_over_the_size_limit_is_refused(tmp_path: Path):
    app, _ = scripted_app(tmp_path, max_upload_mb=0.001)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/api/documents", files={"files": ("big.txt", b"word " * 1000, "text/plain")})
        assert r.status_code == 413 and r.json()["error"] == "too_large"
        assert not any((tmp_path / "store" / "uploads").rglob("big.txt"))


def test_malformed_requests_are_one_line_errors(client: TestClient):
    cases = [client.post("/api/agent/qa/v2", content=b"{not json", headers={"content-type": "application/json"}),
             client.post("/api/agent/qa/v2", json={"question": 3}),
             client.post("/api/agent/qa/v2", json={"question": "x" * 9000}),
             client.post("/api/agent/qa/v2", json={"question": QUESTION, "doc_ids": [""]}),
             client.get("/api/traces/tr_missing"),
             client.get("/no/such/page")]
    for r in cases:
        assert r.status_code in (400, 404, 422), r.text
        body = r.json()
        assert set(body) == {"error", "detail"} and "\n" not in body["detail"] and "Traceback" not in r.text


def test_trace_health_metrics_and_openapi(client: TestClient):
    body = client.post("/api/agent/qa/v2", json={"question": QUESTION}).json()
    trace = client.get(f"/api/traces/{body['trace_id']}").json()
    assert trace["trace_id"] == body["trace_id"] and trace["events"]
    assert client.get("/healthz").json()["status"] == "ok"
    client.post("/api/agent/qa/v2", json={"question": "What is the capital of Atlantis?", "mode": "R4"})
    metrics = client.get("/metrics").text
    assert 'cograg_http_requests_total{method="POST",route="/api/agent/qa/v2",status="200"}' in metrics
    assert 'cograg_http_request_duration_seconds_bucket{le="0.5",method="POST",route="/api/agent/qa/v2"}' in metrics
    assert 'cograg_model_tokens_total{kind="prompt",purpose="generate"}' in metrics
    assert 'cograg_refusals_total{route="CLARIFY"} 1.0' in metrics
    spec = client.get("/openapi.json").json()
    assert {"/api/agent/qa/v2", "/api/self-corrective-rag", "/api/agent/qa", "/api/documents",
            "/api/traces/{trace_id}", "/api/agent/qa/v2/stream", "/healthz", "/metrics"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 200


def test_web_page_and_messages_are_served(client: TestClient):
    page = client.get("/")
    assert page.status_code == 200 and "<script" in page.text
    assert client.get("/static/app.js").status_code == 200
    messages = client.get("/api/messages").json()
    assert messages["web.ask"]["zh"] and messages["web.ask"]["en"]


def test_a_full_queue_answers_429_and_never_builds_a_backlog(tmp_path: Path):
    import threading

    release = threading.Event()
    entered = threading.Event()

    def hold(text: str) -> None:
        entered.set()
        release.wait(20)
    app, _ = scripted_app(tmp_path, brain=Brain(on_call=hold), max_running=1, max_waiting=0)
    with TestClient(app, raise_server_exceptions=False) as c:
        first: dict = {}
        worker = threading.Thread(target=lambda: first.update(r=c.post("/api/agent/qa/v2", json={"question": QUESTION})))
        worker.start()
        assert entered.wait(20)  # the first turn is running (waiting in its model call)
        busy = c.post("/api/agent/qa/v2", json={"question": QUESTION})
        assert busy.status_code == 429 and busy.json()["error"] == "too_many_requests"
        assert c.post("/api/agent/qa/v2/stream", json={"question": QUESTION}).status_code == 429
        assert c.post("/api/self-corrective-rag", json={"query": QUESTION}).status_code == 429
        assert c.get("/healthz").status_code == 200  # only answers queue
        release.set()
        worker.join(20)
        assert first["r"].status_code == 200
        assert c.post("/api/agent/qa/v2", json={"question": QUESTION}).status_code == 200


def test_each_request_gets_its_own_engine_and_connection_over_shared_models(tmp_path: Path):
    from cograg.api.engines import EngineFactory
    from tests.api_support import scripted_settings

    settings = scripted_settings(tmp_path / "store").model_copy(
        update={"models": scripted_settings(tmp_path).models.model_copy(update={"embedder": "none"})})
    factory = EngineFactory(settings)  # every model from the settings: none may load to open an engine
    with factory.engine() as one, factory.engine() as two:
        assert one is not two and one.store.conn is not two.store.conn
        assert one.components.llm is two.components.llm and not one.components.llm.built
        assert one.components.judge is two.components.judge
        assert one.store.vector_index is two.store.vector_index
    with pytest.raises(TypeError):
        EngineFactory(settings, store=object())


def test_two_files_of_one_name_in_one_upload_are_refused_and_leave_nothing(client: TestClient, tmp_path: Path):
    files = [("files", ("dup.md", b"# One\n\nThe first file.\n", "text/markdown")),
             ("files", ("dup.md", b"# Two\n\nThe second file.\n", "text/markdown"))]
    r = client.post("/api/documents", files=files)
    assert r.status_code == 400 and "'dup.md' is sent twice" in r.json()["detail"], r.text
    assert "dup.md" not in [d["source"] for d in client.get("/api/documents").json()]
    assert not [p for p in (tmp_path / "store" / "uploads").rglob("*") if p.is_file()]


def test_concurrent_uploads_of_one_name_store_one_whole_upload(client: TestClient, tmp_path: Path):
    from concurrent.futures import ThreadPoolExecutor

    # each client's file is unlike every other's in every block: a mix of two would match none
    bodies = [f"# Same\n\nClient {i} wrote this.\n\n".encode() + f"line {i} of client {i}.\n".encode() * 6000
              for i in range(6)]
    with ThreadPoolExecutor(len(bodies)) as pool:
        codes = list(pool.map(lambda b: client.post("/api/documents", files={"files": ("same.md", b)}).status_code,
                              bodies))
    assert codes == [200] * len(bodies)
    uploads = tmp_path / "store" / "uploads"
    (stored,) = [p for p in uploads.rglob("*") if p.is_file()]  # nothing else: no staged file left
    assert stored.name == "same.md" and stored.read_bytes() in bodies
    (doc,) = [d for d in client.get("/api/documents").json() if d["source"] == "same.md"]
    assert doc["size_bytes"] == stored.stat().st_size


def test_a_running_server_follows_an_edited_corpus_policy(tmp_path: Path):
    # the policy was read once per process: a document the operator had just denied stayed
    # citable until a restart, and an invalid edit went unnoticed
    app, _ = scripted_app(tmp_path)
    policy = tmp_path / "store" / "corpus_policy.yaml"
    with TestClient(app, raise_server_exceptions=False) as c:

        def ask() -> dict:
            r = c.post("/api/agent/qa/v2", json={"question": QUESTION, "mode": "R1_ONE_SHOT_RETRIEVE"})
            assert r.status_code == 200, r.text
            return r.json()

        assert "1811" in ask()["answer"]
        policy.write_text("allow_sources: ['*/rhine.md', '*/tea.md']\n", encoding="utf-8")
        denied = ask()
        assert "1811" not in denied["answer"] and not any("linden" in str(x).lower() for x in denied["citations"])
        listed = {d["source"]: d["in_answers"] for d in c.get("/api/documents").json()}
        assert listed["linden.md"] is False and listed["rhine.md"] is True
        policy.write_text("allow_sources: [\n", encoding="utf-8")  # broken: no fallback to the old one
        broken = c.post("/api/agent/qa/v2", json={"question": QUESTION})
        assert broken.status_code >= 400 and "corpus_policy.yaml" in broken.text and "1811" not in broken.text
        health = c.get("/healthz")
        assert health.status_code == 503 and "corpus_policy.yaml" in health.text
        policy.unlink()  # gone: no policy, as at start-up
        assert "1811" in ask()["answer"]
