"""Who owns what over HTTP: sessions made from the CLI or Python are no HTTP caller's; two callers
who name one new session at once get one owner; a trace is found by its whole id only."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")
pytest.importorskip("limits", reason="rate limits need the server extra: pip install -e '.[server]'")

from fastapi.testclient import TestClient  # noqa: E402

from cograg.api.auth import ANONYMOUS_OWNER, load_keys  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.errors import ConfigError  # noqa: E402
from cograg.memory.store import SessionNotFound  # noqa: E402
from cograg.models.judge import LexicalJudge  # noqa: E402
from cograg.retrieval.models import Principal  # noqa: E402
from cograg.testing import ScriptedLLM  # noqa: E402
from tests.api_support import ingest_corpus, scripted_settings  # noqa: E402
from tests.fakes import HashingEmbedder  # noqa: E402
from tests.test_api_keys import ALICE_KEY, BOB_KEY, QUESTION, bearer, keyed_app  # noqa: E402
from tests.test_control_flow import Brain  # noqa: E402


def scripted_engine(tmp_path: Path) -> Engine:
    return Engine.open(settings=scripted_settings(tmp_path / "store"), llm=ScriptedLLM([Brain()] * 100),
                       embedder=HashingEmbedder(), judge=LexicalJudge())


def test_a_session_made_from_the_cli_is_served_to_no_http_caller(tmp_path: Path):
    # Its owner was None, as an anonymous caller's: anyone without a key listed it, read its facts
    # (quoting a document only the group engineering may read) and could delete it.
    app = keyed_app(tmp_path)
    with scripted_engine(tmp_path) as engine:
        cli = engine.ask(QUESTION, session="ops-private")
        assert cli.citations and engine.memory().facts("ops-private")
    with TestClient(app, raise_server_exceptions=False) as client:
        for headers in ({}, bearer(ALICE_KEY), bearer(BOB_KEY)):
            assert "ops-private" not in [s["session_id"] for s in client.get("/api/sessions", headers=headers).json()]
            for path in ("/api/sessions/ops-private", "/api/sessions/ops-private/facts",
                         "/api/sessions/ops-private/export"):
                assert client.get(path, headers=headers).status_code == 404, (path, headers)
            assert client.delete("/api/sessions/ops-private", headers=headers).status_code == 404
            r = client.post("/api/agent/qa/v2", json={"question": QUESTION, "session": "ops-private"}, headers=headers)
            assert r.status_code == 404  # nor may a caller ask in it and read its context
        # anonymous callers still keep their own sessions
        assert client.post("/api/agent/qa/v2", json={"question": QUESTION, "session": "anon-1"}).status_code == 200
        assert [s["session_id"] for s in client.get("/api/sessions").json()] == ["anon-1"]
        assert client.get("/api/sessions/anon-1", headers=bearer(BOB_KEY)).status_code == 404
    with scripted_engine(tmp_path) as engine:
        assert engine.memory().session("ops-private").user is None  # untouched
        assert engine.memory().session("anon-1").user == ANONYMOUS_OWNER


def test_two_owners_naming_one_new_session_get_one_owner(tmp_path: Path):
    # Both passed the API's ownership check while the session did not exist yet, then both turns
    # ran in it: bob's turn read alice's context and wrote into her ledger.
    ingest_corpus(scripted_settings(tmp_path / "store"), tmp_path / "corpus")
    with scripted_engine(tmp_path) as engine:
        first = engine.ask(QUESTION, principal=Principal(user="alice"), session="main", owner="alice")
        assert first.citations
        with pytest.raises(SessionNotFound):
            engine.ask(QUESTION, principal=Principal(user="bob"), session="main", owner="bob")
        memory = engine.memory()
        assert memory.session("main").user == "alice" and len(memory.turns("main")) == 1
        engine.ask(QUESTION, session="main")  # the operator (no owner) may use any session


def test_the_race_loser_gets_a_404_from_the_api(tmp_path: Path):
    from cograg.api.auth import Caller
    from cograg.api.qa import prepare, run_turn
    from cograg.api.schemas import QARequest
    from cograg.api.state import api_state

    app = keyed_app(tmp_path)
    with TestClient(app, raise_server_exceptions=False) as client:
        state = api_state(client)  # type: ignore[arg-type]
        body = QARequest(question=QUESTION, session="main")
        alice = Caller("alice", Principal(user="alice", groups=["engineering"]), False, "key:alice", 100)
        bob = Caller("bob", Principal(user="bob"), False, "key:bob", 100)
        turns = [prepare(state, body, alice), prepare(state, body, bob)]  # both checked before either ran
        run_turn(state, turns[0])
        with pytest.raises(SessionNotFound) as info:
            run_turn(state, turns[1])
        from cograg.api.errors import error_of
        assert error_of(info.value) == (404, "not_found")
        assert client.get("/api/sessions/main", headers=bearer(ALICE_KEY)).json()["turn_count"] == 1


def test_a_trace_is_found_by_its_whole_id_only(tmp_path: Path):
    # "tr_0" … "tr_f" found another anonymous caller's trace, question and answer, in 16 tries
    app = keyed_app(tmp_path)
    with TestClient(app, raise_server_exceptions=False) as client:
        trace_id = client.post("/api/agent/qa/v2", json={"question": QUESTION}).json()["trace_id"]
        assert client.get(f"/api/traces/{trace_id}").status_code == 200
        for prefix in (trace_id[:4], trace_id[:-1]):
            assert client.get(f"/api/traces/{prefix}").status_code == 404
    with scripted_engine(tmp_path) as engine:
        assert engine.store.get_trace(trace_id[:-1])["trace_id"] == trace_id  # the CLI keeps prefixes


def test_no_key_may_hold_the_anonymous_owner_name(tmp_path: Path):
    path = tmp_path / "keys.yaml"
    path.write_text(f"keys:\n  - name: '{ANONYMOUS_OWNER}'\n    key: k-123456\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="anonymous"):
        load_keys(path)
