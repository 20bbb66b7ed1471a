"""`snippet_visible: false` (SPEC B2) hides a source's text everywhere a user is shown a hit, chunk
or citation, including the fields read from that text: a Markdown heading becomes the document's
title and the passage's heading path, a JSON record's title line its heading and `metadata.title`.
Ids, the source (file name) and scores stay visible."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cograg.answer.contract import Citation
from cograg.answer.response import withhold_quotes
from cograg.api.views import hide_source_text
from cograg.engine import Engine
from tests.api_support import scripted_app
from tests.fakes import HashingEmbedder

DOCS = {"payroll.jsonl": '{"id": "emp-7", "title": "Jane Roe salary 90000 USD", '
                         '"text": "Approved by the board in March."}\n',
        "notes.md": "# Jane Roe is under investigation\n\nThe board approved it in March.\n"}
SECRETS = ("90000", "investigation", "Jane Roe")
QUESTION = "When did the board approve it?"


def leaks(shown: Any) -> list[str]:
    dumped = shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False)
    return [s for s in SECRETS if s in dumped]


@pytest.fixture
def hidden_app(tmp_path: Path) -> tuple[Any, TestClient]:
    app, _ = scripted_app(tmp_path, docs=DOCS, policy="snippet_visible: false\n")
    with TestClient(app, raise_server_exceptions=False) as client:
        yield app, client


def test_search_results_for_users_carry_no_title_or_heading_read_from_the_text(hidden_app) -> None:
    app, _ = hidden_app
    with Engine.open(settings=app.state.cograg.engines.settings, embedder=HashingEmbedder()) as engine:
        result = engine.search(QUESTION, k=5)
        retrieved = engine.retrieve(QUESTION, k=5)  # the stages that read the text still get it
    assert {Path(h.source).name for h in result.hits} == set(DOCS)
    assert leaks(result.model_dump()) == []
    assert leaks(retrieved.model_dump())
    by_name = {Path(h.source).name: h for h in result.hits}
    assert by_name["notes.md"].title == "notes" and by_name["payroll.jsonl"].title == "payroll"
    assert all(h.heading_path == [] for h in result.hits)
    # ids and scores as the stages that read the text got them
    assert [(h.chunk_id, h.doc_id, h.score) for h in result.hits] == \
        [(h.chunk_id, h.doc_id, h.score) for h in retrieved.hits]
    # a record's id names it without quoting it: it stays, its title goes
    assert by_name["payroll.jsonl"].metadata == {"record_id": "emp-7"}


def test_a_chunk_by_its_id_shows_no_title_or_heading_read_from_the_text(hidden_app) -> None:
    app, client = hidden_app
    with Engine.open(settings=app.state.cograg.engines.settings, embedder=HashingEmbedder()) as engine:
        chunk_ids = [h.chunk_id for h in engine.search(QUESTION, k=5).hits]
    assert len(chunk_ids) == 2
    for chunk_id in chunk_ids:
        body = client.get(f"/api/chunks/{chunk_id}").json()
        assert leaks(body) == [], body
        assert body["text"] == "" and body["heading_path"] == [] and body["snippet_visible"] is False
        assert body["chunk_id"] == chunk_id and body["source"] in DOCS
        assert body["title"] == Path(body["source"]).stem


def test_answers_their_traces_and_the_document_list_show_no_text_derived_title(hidden_app) -> None:
    _, client = hidden_app
    scr = client.post("/api/self-corrective-rag", json={"query": QUESTION, "topK": 5})
    assert scr.status_code == 200
    body = scr.json()
    assert body["citations"] or body["retrieval"]["documents"]
    trace = client.get(f"/api/traces/{body['traceId']}")
    qa = client.post("/api/agent/qa/v2", json={"question": QUESTION})
    simple = client.post("/api/agent/qa", json={"question": QUESTION})
    with client.stream("POST", "/api/agent/qa/v2/stream", json={"question": QUESTION}) as r:
        stream = "".join(r.iter_text())
    documents = client.get("/api/documents")
    for shown in (scr.text, trace.text, qa.text, simple.text, stream, documents.text):
        assert leaks(shown) == [], shown[:600]
    # which document stays visible
    assert {d["source"] for d in documents.json()} == set(DOCS)
    assert all(c["source"] in DOCS and c["chunk_id"] for c in body["citations"])


def test_a_hidden_citation_keeps_its_ids_source_and_score_only() -> None:
    cited = Citation(id="1", doc_id="d1", chunk_id="d1-c1", quote="Jane Roe salary 90000 USD",
                     source="/srv/payroll.jsonl", score=0.8, title="Jane Roe salary 90000 USD",
                     heading_path=["Jane Roe salary 90000 USD"], page=2)
    other = cited.model_copy(update={"chunk_id": "d2-c1"})
    hidden, shown = withhold_quotes([cited, other], {"d1-c1"})
    assert shown == other
    assert hidden.model_dump() == {**cited.model_dump(), "quote": "", "title": "payroll", "heading_path": []}


def test_a_stored_trace_is_shown_without_the_titles_it_holds() -> None:
    # a trace stored before titles were withheld still holds them: the view takes them out
    from cograg.retrieval.models import source_text_withheld

    stored = {"outcome": {"citations": [{"chunk_id": "d1-c1", "source": "notes.md", "quote": "",
                                         "title": "Jane Roe is under investigation",
                                         "heading_path": ["Jane Roe is under investigation"], "score": 1.0}]},
              "retrieved": [{"chunk_id": "d1-c1", "doc_id": "d1", "score": 1.0}]}
    shown = hide_source_text(stored)
    assert leaks(shown) == []
    assert shown["outcome"]["citations"][0]["title"] == "notes"
    assert shown["retrieved"] == stored["retrieved"]  # no fields added where there were none
    assert source_text_withheld({"chunk_id": "x", "score": 1.0}) == {}


@pytest.mark.parametrize("flag", ["--json", "--explain"])
def test_the_command_line_search_shows_no_text_derived_title(tmp_path: Path, cli, flag: str) -> None:
    corpus, store, policy = tmp_path / "corpus", tmp_path / "store", tmp_path / "policy.yaml"
    corpus.mkdir()
    for name, text in DOCS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    policy.write_text("snippet_visible: false\n", encoding="utf-8")
    assert cli("ingest", corpus, "--store", store, "--embedder", "none").exit_code == 0
    result = cli("search", "board March", "--store", store, "--embedder", "none", "--policy", policy, flag)
    assert result.exit_code == 0, result.stderr
    assert "notes.md" in result.stdout and "payroll.jsonl" in result.stdout
    assert leaks(result.stdout) == [], result.stdout
