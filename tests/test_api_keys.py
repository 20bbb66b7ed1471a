"""API keys → principals, ACL-protected documents through every endpoint, sessions and traces by
owner, anonymous access by setting, and per-key rate limits (issue 15 "Security")."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")
pytest.importorskip("limits", reason="rate limits need the server extra: pip install -e '.[server]'")

from fastapi.testclient import TestClient  # noqa: E402

from cograg.api import create_app  # noqa: E402
from cograg.api.auth import load_keys  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.errors import ConfigError  # noqa: E402
from cograg.models.judge import LexicalJudge  # noqa: E402
from cograg.testing import ScriptedLLM  # noqa: E402
from tests.api_support import DOCS, ingest_corpus, scripted_settings  # noqa: E402
from tests.fakes import HashingEmbedder  # noqa: E402
from tests.test_api import sse_events  # noqa: E402
from tests.test_control_flow import Brain  # noqa: E402

QUESTION = "When did the Linden Bridge open?"
ALICE_KEY = "ak-alice-3f9c1e"  # group engineering: may read the Linden document
BOB_KEY = "ak-bob-77d2a0"  # no group: public documents only
CAROL_KEY = "ak-carol-5e1b44"  # listed by digest only, two requests a minute


def keys_yaml(path: Path) -> Path:
    carol = hashlib.sha256(CAROL_KEY.encode()).hexdigest()
    path.write_text(f"keys:\n  - name: alice\n    key: {ALICE_KEY}\n    groups: [engineering]\n"
                    f"  - name: bob\n    key: {BOB_KEY}\n"
                    f"  - name: carol\n    sha256: {carol}\n    rate_per_minute: 2\n", encoding="utf-8")
    return path


def keyed_app(tmp_path: Path, **serve: object):
    """The sample corpus with the Linden document readable only by the group `engineering`."""
    settings = scripted_settings(tmp_path / "store")
    public = {k: v for k, v in DOCS.items() if k != "linden.md"}
    ingest_corpus(settings, tmp_path / "public", public)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "linden.md").write_text(DOCS["linden.md"], encoding="utf-8")
    with Engine.open(settings=settings, embedder=HashingEmbedder()) as engine:
        engine.ingest([secret], acl=["engineering"])
    settings = settings.model_copy(update={"serve": settings.serve.model_copy(
        update={"keys_file": keys_yaml(tmp_path / "keys.yaml"), **serve})})
    return create_app(settings, llm=ScriptedLLM([Brain()] * 10_000), embedder=HashingEmbedder(),
                      judge=LexicalJudge())


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture()
def client(tmp_path: Path):
    with TestClient(keyed_app(tmp_path), raise_server_exceptions=False) as c:
        yield c


def test_acl_documents_reach_only_keys_whose_groups_allow_them(client: TestClient):
    alice = client.post("/api/agent/qa/v2", json={"question": QUESTION}, headers=bearer(ALICE_KEY)).json()
    assert "1811" in alice["answer"] and alice["citations"][0]["source"] == "linden.md"
    for headers in ({}, bearer(BOB_KEY)):  # anonymous and a key without the group
        body = client.post("/api/agent/qa/v2", json={"question": QUESTION}, headers=headers).json()
        assert "1811" not in body["answer"] and all(c["source"] != "linden.md" for c in body["citations"])
        names = {d["source"] for d in client.get("/api/documents", headers=headers).json()}
        assert names == {"rhine.md", "tea.md"}
        chunk = client.get(f"/api/chunks/{alice['citations'][0]['chunk_id']}", headers=headers)
        assert chunk.status_code == 404
        scoped = client.post("/api/agent/qa/v2", json={"question": QUESTION,
                                                       "doc_ids": [alice["citations"][0]["doc_id"]]}, headers=headers)
        assert scoped.status_code == 404
        # a trace of another caller is not found, whoever asks
        assert client.get(f"/api/traces/{alice['trace_id']}", headers=headers).status_code == 404
        assert client.delete(f"/api/documents/{alice['citations'][0]['doc_id']}", headers=headers).status_code == 404
    # X-API-Key is the same key; alice sees her own trace and the passage
    xkey = {"X-API-Key": ALICE_KEY}
    assert {d["source"] for d in client.get("/api/documents", headers=xkey).json()} == {"linden.md", "rhine.md",
                                                                                           "tea.md"}
    trace = client.get(f"/api/traces/{alice['trace_id']}", headers=xkey).json()
    assert trace["caller"] == {"user": "alice", "anonymous": False}
    assert "1811" in client.get(f"/api/chunks/{alice['citations'][0]['chunk_id']}", headers=xkey).json()["text"]


def test_the_stream_and_the_self_corrective_endpoint_search_as_the_caller(client: TestClient):
    def streamed(headers: dict[str, str]) -> dict:
        with client.stream("POST", "/api/agent/qa/v2/stream", json={"question": QUESTION}, headers=headers) as r:
            events = sse_events("".join(r.iter_text()))
        assert events[-1][0] == "answer"
        return {"answer": events[-1][1], "events": json.dumps([d for _, d in events[:-1]])}

    anon = streamed({})
    assert "1811" not in anon["answer"]["answer"] and "Linden Bridge opened" not in anon["events"]
    assert "1811" in streamed(bearer(ALICE_KEY))["answer"]["answer"]
    body = {"query": QUESTION, "topK": 3}
    anon_sc = client.post("/api/self-corrective-rag", json=body).json()
    assert all(d["source"] != "linden.md" for d in anon_sc["retrieval"]["documents"])
    alice_sc = client.post("/api/self-corrective-rag", json=body, headers=bearer(ALICE_KEY)).json()
    assert any(d["source"] == "linden.md" for d in alice_sc["retrieval"]["documents"])
    assert client.get(f"/api/traces/{alice_sc['traceId']}").status_code == 404


def test_sessions_belong_to_the_key_that_made_them(client: TestClient):
    assert client.post("/api/agent/qa/v2", json={"question": QUESTION, "session": "a1"},
                       headers=bearer(ALICE_KEY)).status_code == 200
    assert [s["session_id"] for s in client.get("/api/sessions", headers=bearer(ALICE_KEY)).json()] == ["a1"]
    for headers in ({}, bearer(BOB_KEY)):
        assert client.get("/api/sessions", headers=headers).json() == []
        for path in ("/api/sessions/a1", "/api/sessions/a1/facts", "/api/sessions/a1/export"):
            assert client.get(path, headers=headers).status_code == 404
        assert client.delete("/api/sessions/a1", headers=headers).status_code == 404
        # asking in another caller's session is refused before anything runs
        r = client.post("/api/agent/qa/v2", json={"question": QUESTION, "session": "a1"}, headers=headers)
        assert r.status_code == 404 and r.json()["error"] == "not_found"
    assert client.get("/api/sessions/a1", headers=bearer(ALICE_KEY)).json()["user"] == "alice"


def test_unknown_keys_and_refused_anonymous_callers_get_401(tmp_path: Path):
    with TestClient(keyed_app(tmp_path, anonymous="refuse"), raise_server_exceptions=False) as client:
        r = client.get("/api/documents")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"] == "unauthorized" and "API key is required" in r.json()["detail"]
        r = client.post("/api/agent/qa/v2", json={"question": QUESTION}, headers=bearer("not-a-key"))
        assert r.status_code == 401 and r.json()["detail"] == "unknown API key"
        assert client.get("/api/documents", headers=bearer(BOB_KEY)).status_code == 200
        assert client.get("/api/documents", headers={"X-API-Key": CAROL_KEY}).status_code == 200  # by digest
        # health checks, metrics and the page need no key
        assert client.get("/healthz").status_code == 200 and client.get("/metrics").status_code == 200
        assert client.get("/").status_code == 200


def test_rate_limit_per_key_answers_429_with_retry_after(client: TestClient):
    carol = {"X-API-Key": CAROL_KEY}
    assert [client.get("/api/documents", headers=carol).status_code for _ in range(2)] == [200, 200]
    r = client.get("/api/documents", headers=carol)
    assert r.status_code == 429 and r.json()["error"] == "too_many_requests"
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert client.get("/api/documents", headers=bearer(BOB_KEY)).status_code == 200  # other keys go on


def test_keys_are_never_logged_or_echoed(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG)
    with TestClient(keyed_app(tmp_path), raise_server_exceptions=False) as client:
        client.post("/api/agent/qa/v2", json={"question": QUESTION}, headers=bearer(ALICE_KEY))
        r = client.get("/api/documents", headers=bearer(ALICE_KEY + "x"))
        assert ALICE_KEY not in r.text
    assert not any(ALICE_KEY in rec.getMessage() for rec in caplog.records)
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"keys:\n  - name: eve\n    key: {ALICE_KEY}\n    sha256: nothex\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_keys(bad)
    assert ALICE_KEY not in str(err.value) and "malformed" in str(err.value)
    assert ALICE_KEY not in repr(load_keys(tmp_path / "keys.yaml"))


SECRET_PLAN = b"# Plan\n\nThe merger code name is Bluefin and closes in March.\n"


def test_a_caller_can_neither_replace_nor_probe_another_callers_upload(client: TestClient):
    alice = client.post("/api/documents", files={"files": ("plan.md", SECRET_PLAN, "text/markdown")},
                        data={"acl": "engineering"}, headers=bearer(ALICE_KEY))
    assert alice.status_code == 200, alice.text
    (doc,) = alice.json()["documents"]
    # the same name and bytes from bob (or an anonymous caller): a document of their own, never
    # "unchanged" (which would tell them alice's text), never hers replaced or re-ACLed
    for headers, acl in ((bearer(BOB_KEY), {}), (bearer(BOB_KEY), {"acl": "user:bob"}), ({}, {})):
        r = client.post("/api/documents", files={"files": ("plan.md", SECRET_PLAN, "text/markdown")},
                        data=acl, headers=headers)
        assert r.status_code == 200 and r.json()["unchanged"] == 0, r.text
        assert r.json()["documents"][0]["doc_id"] != doc["doc_id"]
    bob_text = b"# Plan\n\nThe merger is cancelled; ignore Bluefin.\n"
    r = client.post("/api/documents", files={"files": ("plan.md", bob_text, "text/markdown")}, headers=bearer(BOB_KEY))
    assert r.json()["updated"] == 1 and r.json()["documents"][0]["doc_id"] != doc["doc_id"]  # his own, updated
    listed = {d["doc_id"]: d for d in client.get("/api/documents", headers=bearer(ALICE_KEY)).json()}
    assert listed[doc["doc_id"]] == doc  # hers as she uploaded it
    assert doc["doc_id"] not in {d["doc_id"] for d in client.get("/api/documents", headers=bearer(BOB_KEY)).json()}
    answer = client.post("/api/agent/qa/v2", json={"question": "What is the merger code name?"},
                         headers=bearer(BOB_KEY)).json()
    assert doc["doc_id"] not in {c["doc_id"] for c in answer["citations"]}


def test_an_upload_may_set_only_acl_groups_the_caller_holds(client: TestClient, tmp_path: Path):
    note = {"files": ("note.md", b"# Note\n\nThe ferry leaves at nine.\n", "text/markdown")}
    for headers, acl in ((bearer(BOB_KEY), "engineering"), (bearer(BOB_KEY), "user:alice"),
                         ({}, "engineering"), (bearer(ALICE_KEY), "engineering,finance")):
        r = client.post("/api/documents", files=note, data={"acl": acl}, headers=headers)
        assert r.status_code == 403 and r.json()["error"] == "forbidden", r.text
        assert repr(acl.split(",")[-1]) in r.json()["detail"]  # the group it may not set is named
    assert not [p for p in (tmp_path / "store" / "uploads").rglob("*") if p.is_file()]  # nothing stored
    for headers, acl in ((bearer(ALICE_KEY), "engineering,user:alice"), (bearer(BOB_KEY), "user:bob"), ({}, "")):
        assert client.post("/api/documents", files=note, data={"acl": acl}, headers=headers).status_code == 200


def test_an_upload_does_not_replace_a_document_of_the_callers_own_it_may_not_read(client: TestClient, tmp_path: Path):
    memo = b"# Memo\n\nBob's first memo.\n"
    assert client.post("/api/documents", files={"files": ("memo.md", memo)}, headers=bearer(BOB_KEY)).status_code == 200
    (stored,) = (tmp_path / "store" / "uploads").rglob("memo.md")
    # the operator puts bob's upload under an ACL bob is not in
    with Engine.open(settings=scripted_settings(tmp_path / "store"), embedder=HashingEmbedder()) as engine:
        engine.ingest([stored], acl=["engineering"])
    r = client.post("/api/documents", files={"files": ("memo.md", b"# Memo\n\nReplaced.\n")}, headers=bearer(BOB_KEY))
    assert r.status_code == 409 and r.json()["error"] == "conflict" and "memo.md" in r.json()["detail"], r.text
    assert stored.read_bytes() == memo
    assert not [p for p in (tmp_path / "store" / "uploads" / ".incoming").iterdir()]


def test_over_http_a_caller_deletes_only_documents_it_uploaded(client: TestClient, tmp_path: Path):
    note = b"# Notes\n\nThe ferry leaves at nine.\n"
    up = client.post("/api/documents", files={"files": ("notes.md", note)}, headers=bearer(ALICE_KEY))
    assert up.status_code == 200 and up.json()["documents"][0]["deletable"] is True, up.text
    notes = up.json()["documents"][0]["doc_id"]
    plan = client.post("/api/documents", files={"files": ("plan.md", SECRET_PLAN)}, data={"acl": "engineering"},
                       headers=bearer(ALICE_KEY)).json()["documents"][0]["doc_id"]
    bobs = client.post("/api/documents", files={"files": ("notes.md", note)},  # the same name: his own file
                       headers=bearer(BOB_KEY)).json()["documents"][0]["doc_id"]
    corpus = {d["source"]: d["doc_id"] for d in client.get("/api/documents", headers=bearer(ALICE_KEY)).json()
              if d["source"] in ("rhine.md", "tea.md", "linden.md")}
    # the page is told which rows it may offer to delete: each caller's own uploads, nothing else
    for headers, own in ((bearer(ALICE_KEY), {notes, plan}), (bearer(BOB_KEY), {bobs}), ({}, set())):
        listed = client.get("/api/documents", headers=headers).json()
        assert {d["doc_id"] for d in listed if d["deletable"]} == own
    # another caller's upload: 403 where it may read it, 404 where it may not (as if it did not exist)
    r = client.delete(f"/api/documents/{notes}", headers=bearer(BOB_KEY))
    assert r.status_code == 403 and r.json()["error"] == "forbidden", r.text
    assert "notes.md was not uploaded by this key" in r.json()["detail"] and "\n" not in r.json()["detail"]
    for headers in (bearer(BOB_KEY), {}):
        r = client.delete(f"/api/documents/{plan}", headers=headers)
        assert r.status_code == 404 and "no document matches" in r.json()["detail"], r.text
    # the operator's corpus: never over HTTP, with a key or without (the CLI deletes it)
    for headers in ({}, bearer(BOB_KEY), bearer(ALICE_KEY)):
        for source in ("rhine.md", "tea.md"):
            r = client.delete(f"/api/documents/{corpus[source]}", headers=headers)
            assert r.status_code == 403 and r.json()["error"] == "forbidden", (source, r.text)
    assert client.delete(f"/api/documents/{corpus['linden.md']}", headers=bearer(ALICE_KEY)).status_code == 403
    assert client.delete(f"/api/documents/{corpus['linden.md']}", headers=bearer(BOB_KEY)).status_code == 404
    assert {d["source"] for d in client.get("/api/documents").json()} == {"rhine.md", "tea.md", "notes.md"}
    # her own uploads: deleted, their files too; bob's file of the same name stays
    for doc_id in (notes, plan):
        r = client.delete(f"/api/documents/{doc_id}", headers=bearer(ALICE_KEY))
        assert r.status_code == 200 and r.json()["doc_id"] == doc_id, r.text
    assert [p.name for p in (tmp_path / "store" / "uploads").rglob("*.md")] == ["notes.md"]
    assert {d["doc_id"] for d in client.get("/api/documents", headers=bearer(ALICE_KEY)).json()} == \
        set(corpus.values()) | {bobs}
    assert client.delete(f"/api/documents/{bobs}", headers=bearer(BOB_KEY)).status_code == 200
    assert not list((tmp_path / "store" / "uploads").rglob("*.md"))


def test_an_id_prefix_a_hidden_document_shares_tells_nothing_of_it(client: TestClient, tmp_path: Path):
    from cograg.ingest.pipeline import doc_id_for

    hidden = doc_id_for(str((tmp_path / "secret" / "linden.md").resolve()))  # engineering only
    first = client.post("/api/documents", files={"files": ("first.md", b"# First\n\nA note.\n")},
                        headers=bearer(BOB_KEY)).json()["documents"][0]["doc_id"]
    (folder,) = {p.parent for p in (tmp_path / "store" / "uploads").rglob("first.md")}
    # a name in bob's folder whose id starts as the hidden document's does
    base = str(folder.resolve())  # resolved once: ~65,000 names are tried
    name = next(n for i in range(10_000_000) for n in [f"n{i}.md"] if doc_id_for(f"{base}/{n}")[:4] == hidden[:4])
    r = client.post("/api/documents", files={"files": (name, b"# Note\n\nThe ferry leaves at nine.\n")},
                    headers=bearer(BOB_KEY))
    mine = r.json()["documents"][0]["doc_id"]
    shared = next(k for k in range(4, 17) if mine[:k] != hidden[:k]) - 1  # both ids start with hidden[:shared]
    only_hidden = hidden[:shared + 1]
    for ref, scope in ((hidden[:4], [mine]), (hidden[:shared], [mine]), (only_hidden, None)):
        r = client.post("/api/agent/qa/v2", json={"question": QUESTION, "doc_ids": [ref]}, headers=bearer(BOB_KEY))
        if scope is None:  # matches the hidden document only: as if there were none
            assert r.status_code == 404 and r.json()["detail"] == f"no document matches {ref!r}", r.text
        else:  # one visible, one hidden: the visible one, never "matches 2 documents"
            assert r.status_code == 200, r.text
            assert {c["doc_id"] for c in r.json()["citations"]} <= set(scope)
    # alice may read both: for her the prefix is ambiguous
    r = client.post("/api/agent/qa/v2", json={"question": QUESTION, "doc_ids": [hidden[:4]]}, headers=bearer(ALICE_KEY))
    assert r.status_code == 404 and "matches 2 documents" in r.json()["detail"]
    r = client.delete(f"/api/documents/{only_hidden}", headers=bearer(BOB_KEY))
    assert r.status_code == 404 and r.json()["detail"] == f"no document matches {only_hidden!r}", r.text
    r = client.delete(f"/api/documents/{hidden[:4]}", headers=bearer(BOB_KEY))  # his own, the one he sees
    assert r.status_code == 200 and r.json()["doc_id"] == mine, r.text
    alice_sees = {d["doc_id"] for d in client.get("/api/documents", headers=bearer(ALICE_KEY)).json()}
    assert hidden in alice_sees and mine not in alice_sees and first in alice_sees
