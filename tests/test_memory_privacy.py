"""What a session keeps after its user takes something back (SPEC E6): a forgotten or invalidated
fact leaves the summary's conclusions; a deleted session leaves no trace; a session idle past its
TTL is gone for show and export too; over HTTP, what came from a document the caller can no longer
read is withheld."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cograg.engine import Engine
from cograg.memory.store import SessionNotFound
from cograg.errors import StoreError
from tests.test_memory import ARCHES, chat, eng, linden_id  # noqa: F401 - eng: the fixture


def test_a_forgotten_fact_leaves_the_summary_conclusions(eng: Engine):
    # the statement stayed in show, --json, export and the L2 context as a "conclusion"
    e, ask = chat(eng)
    ask(ARCHES)
    mem = e.memory()
    (fact,) = [f for f in mem.facts("s1") if f.kind == "document"]
    assert fact.statement in mem.session("s1").summary.key_conclusions
    mem.forget("s1", fact.fact_id)
    assert fact.statement not in mem.session("s1").summary.key_conclusions
    exported = mem.export(session_id="s1")["sessions"][0]
    assert fact.statement not in exported["summary"]["key_conclusions"]
    ask("Who designed the Linden Bridge?")  # the next turn's commit drops it from the stored summary too
    stored = mem.store.get_session("s1")
    assert stored is not None and fact.statement not in stored.summary.key_conclusions


def test_an_invalidated_fact_leaves_the_summary_conclusions(eng: Engine):
    e, ask = chat(eng)
    ask(ARCHES)
    mem = e.memory()
    statement = next(f.statement for f in mem.facts("s1") if f.kind == "document")
    e.delete_document(linden_id(e))
    assert statement not in mem.session("s1").summary.key_conclusions


def test_deleting_a_session_deletes_its_turns_traces(eng: Engine):
    # each trace holds the question, the answer, the session id and the fact ids
    e, ask = chat(eng)
    resp, _, _ = ask(ARCHES)
    assert e.trace(resp.trace_id)
    e.memory().delete("s1")
    with pytest.raises(StoreError, match="no trace"):
        e.trace(resp.trace_id)


def test_a_session_idle_past_its_ttl_is_gone_for_show_and_export(eng: Engine):
    e, ask = chat(eng)
    ask(ARCHES)
    short = e.settings.memory.model_copy(update={"session_ttl_days": 0.5 / 86400})  # half a second
    mem = type(e.memory())(e.memory().store, short, doc_hash=e.memory().doc_hash,
                           generation=e.memory().generation)
    time.sleep(0.7)
    with pytest.raises(SessionNotFound):
        mem.session("s1")
    assert mem.export(session_id=None)["sessions"] == []


def test_over_http_a_document_the_caller_no_longer_reads_is_withheld_from_its_sessions(tmp_path: Path):
    pytest.importorskip("fastapi", reason="the HTTP API needs the server extra")
    from fastapi.testclient import TestClient

    from tests.api_support import scripted_settings
    from tests.fakes import HashingEmbedder
    from tests.test_api_keys import ALICE_KEY, QUESTION, bearer, keyed_app

    app = keyed_app(tmp_path)
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/api/agent/qa/v2", json={"question": QUESTION, "session": "al"}, headers=bearer(ALICE_KEY))
        assert "1811" in r.json()["answer"]
        assert client.get("/api/sessions/al/facts", headers=bearer(ALICE_KEY)).json()
        # the operator takes the document away from engineering (its text, and so its facts, unchanged)
        with Engine.open(settings=scripted_settings(tmp_path / "store"), embedder=HashingEmbedder()) as e:
            e.ingest([tmp_path / "secret"], acl=["finance"])
        assert client.get("/api/sessions/al/facts", headers=bearer(ALICE_KEY)).json() == []
        shown = client.get("/api/sessions/al", headers=bearer(ALICE_KEY)).json()
        assert "1811" not in str(shown) and shown["turns"][0]["withheld"] and shown["turns"][0]["question"] == QUESTION
        exported = client.get("/api/sessions/al/export", headers=bearer(ALICE_KEY)).json()
        assert "1811" not in str(exported)


def test_chat_commands_never_reach_the_model_or_the_session(eng: Engine, ingest_env, monkeypatch):
    # "/forget" without an id (or "/forgot ID") was asked as a question and stored as the session's turn
    from typer.testing import CliRunner

    from cograg import cli as cli_module

    monkeypatch.setattr(cli_module.out, "width", 400)
    store = str(eng.settings.store)
    r = CliRunner().invoke(cli_module.app, ["chat", "--session", "fresh", "--store", store],
                           input="/compact\n/forget\n/forgot F123\n/quit\n")
    assert r.exit_code == 0, r.output
    assert "nothing to compact yet" in r.stdout
    assert "/forget needs a fact id (see /facts)" in r.stderr and "unknown command /forgot" in r.stderr
    with pytest.raises(SessionNotFound):  # no turn was asked, so no session was made
        eng.memory().session("fresh")
    bad = CliRunner().invoke(cli_module.app, ["chat", "--session", "a/b", "--store", store], input="/quit\n")
    assert bad.exit_code == 1 and "session id" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_a_turn_cancelled_mid_way_is_not_written_to_the_session(eng: Engine):
    # a stream the client left recorded "I could not answer this reliably (cancelled: client
    # disconnected)" as the session's turn, though no one read it
    from cograg.control.models import CancelToken
    from cograg.orchestrator.orchestrator import TurnOptions
    from cograg.testing import ScriptedLLM
    from tests.test_answer import OPEN, with_models
    from tests.test_control_flow import Brain
    from tests.test_memory import answer

    cancel = CancelToken()

    def leave(text: str) -> None:
        cancel.cancel("client disconnected")
    e = with_models(eng, llm=ScriptedLLM([Brain(answer=answer, on_call=leave)] * 20))
    resp = e.ask(ARCHES, options=TurnOptions(answer=OPEN), session="s1", cancel=cancel)
    assert cancel.cancelled
    assert e.memory().turns("s1") == [] and e.memory().facts("s1") == []
    assert "MEMORY_SKIPPED" in [ev["name"] for ev in e.trace(resp.trace_id)["events"]]


def test_session_show_counts_the_valid_facts_and_a_pasted_id_is_one_short_line(eng: Engine, cli, ingest_env):
    # "2 facts" where `session facts` listed none (both invalid); a 100,000-character id was echoed whole
    e, ask = chat(eng)
    ask(ARCHES)
    e.delete_document(linden_id(e))
    store = eng.settings.store
    shown = cli("session", "show", "s1", "--store", store)
    assert "· 0 facts (1 no longer valid)" in shown.stdout.replace("\n", " ")
    r = cli("session", "show", "x" * 100_000, "--store", store)
    assert r.exit_code == 1 and len(r.stderr) < 200 and "(100000 characters)" in r.stderr


def test_the_session_view_withholds_what_a_withheld_turn_put_in_the_summary():
    # a folded turn's answer lives on in the rolling summary and its names in the topics: the turn
    # itself was withheld, its words were not
    pytest.importorskip("fastapi", reason="the HTTP API needs the server extra")
    from cograg.api.sessions import _Reader

    turns = [{"turn_id": "t1", "question": "Who led the Linden Bridge audit?", "answer": "Jane Roe led it [1].",
              "resolved_question": "Who led the Linden Bridge audit?", "entities": ["the Linden Bridge", "Jane Roe"],
              "citations": ["secret01-aa"], "folded": True},
             {"turn_id": "t2", "question": "When did the Rhine Bridge open?", "answer": "In 1870 [1].",
              "entities": ["the Rhine Bridge"], "citations": ["public01-bb"], "folded": False}]
    session = {"session_id": "s", "summary": {"rolling": "Who led the audit? / Jane Roe led it.",
                                              "main_topics": ["Linden Bridge", "Jane Roe", "Rhine Bridge"],
                                              "key_conclusions": []}}
    reader = _Reader(visible=True, allowed={"public01-document"})
    shown = reader.session(session, [], turns)
    assert "Jane Roe" not in str(shown)
    assert shown["summary"]["main_topics"] == ["Linden Bridge", "Rhine Bridge"]  # the user named those
    assert shown["summary"]["rolling"] == "" and shown["summary"]["rolling_withheld"]
    hidden = reader.turn(turns[0])
    assert "Jane Roe" not in str(hidden) and hidden["question"] == turns[0]["question"] and hidden["withheld"]
    everyone = _Reader(visible=True, allowed=None)  # no ACL anywhere: nothing is withheld
    assert everyone.session(session, [], turns)["summary"] == session["summary"]
