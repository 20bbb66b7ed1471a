"""Conversation memory through whole turns (SPEC E1–E6) with a scripted model: only verified
statements enter the ledger, follow-ups resolve from the session, R0 answers from facts without
retrieval (and only then), facts die with their source, the answer cache, corrections,
compaction. The real models run the Linden Bridge follow-up in test_e2e_memory.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cograg.control.models import ControlBudget
from cograg.engine import Engine
from cograg.memory import SessionError, SessionNotFound
from cograg.orchestrator.orchestrator import TurnOptions
from cograg.testing import ScriptedLLM
from tests.test_answer import make_engine, with_models
from tests.test_control_flow import DOCS, OPEN, Brain, block_with, default_answer

LINDEN = ("# Linden Bridge\n\nThe Linden Bridge opened in 1811. It was designed by Tobias Marrick. "
          "The Linden Bridge has seven arches.\n")
MEM_DOCS = DOCS | {"linden.md": LINDEN}
ARCHES = "How many arches does the Linden Bridge have?"


def answer(q: str, text: str) -> dict:
    """Cite whichever block (or remembered fact) supports the answer to `q`."""
    ql = q.lower()
    if "arches" in ql:
        fact = re.search(r"\[cite: fact, (F\w+)\] [^\n]*arches", text)
        if fact:
            return {"answer": f"The Linden Bridge has seven arches [cite: fact, {fact.group(1)}].",
                    "citations": [], "fallback": False}
        n = block_with(text, "seven arches")
        if n is None:
            return {"answer": "The documents do not say.", "citations": [], "fallback": True}
        return {"answer": f"The Linden Bridge has seven arches [{n}].",
                "citations": [{"id": n, "quote": "The Linden Bridge has seven arches."}], "fallback": False}
    if "tower" in ql:
        return {"answer": "The documents do not say.", "citations": [], "fallback": True}
    if "design" in ql:
        n = block_with(text, "Tobias")
        return {"answer": f"The Linden Bridge was designed by Tobias Marrick [{n}]. It is made of gold [{n}].",
                "citations": [{"id": n, "quote": ""}], "fallback": False}
    return default_answer(q, text)


@pytest.fixture()
def eng(tmp_path: Path):
    e = make_engine(tmp_path, MEM_DOCS)
    yield e
    e.close()


def chat(eng: Engine, cache: str = "off"):
    """An engine with a scripted model; `ask(question, session)` returns (response, trace, model calls)."""
    llm = ScriptedLLM([Brain(answer=answer)] * 200)
    settings = eng.settings.model_copy(update={"memory": eng.settings.memory.model_copy(
        update={"answer_cache": cache})})
    e = with_models(eng, llm=llm, settings=settings)
    opts = TurnOptions(answer=OPEN, budget=ControlBudget(plan_templates=False))

    def ask(question: str, session: str | None = "s1", mode: str | None = None):
        before = len(llm.calls)
        o = TurnOptions(answer=OPEN, budget=opts.budget, force_mode=mode) if mode else opts
        resp = e.ask(question, options=o, session=session)
        return resp, e.trace(resp.trace_id), llm.calls[before:]
    return e, ask


def linden_id(e: Engine) -> str:
    return next(d.doc_id for d in e.documents() if d.source_path.endswith("linden.md"))


def names(trace: dict) -> list[str]:
    return [ev["name"] for ev in trace["events"]]


def event(trace: dict, name: str) -> dict:
    return next(ev["data"] for ev in trace["events"] if ev["name"] == name)


# ---------------------------------------------------------------------------------- E2 memorizer
def test_only_supported_sentences_enter_the_ledger_with_their_provenance(eng: Engine):
    e, ask = chat(eng)
    resp, trace, _ = ask("Who designed the Linden Bridge?")
    assert "Tobias Marrick" in resp.answer and "gold" not in resp.answer  # the verifier removed the made-up one
    facts = e.memory().facts("s1")
    assert [f.statement for f in facts] == ["The Linden Bridge was designed by Tobias Marrick."]
    f = facts[0]
    assert f.source.endswith("linden.md") and f.quote in LINDEN and f.source_chunk_id == resp.citations[0].chunk_id
    assert f.valid and f.kind == "document" and f.turn_id
    assert event(trace, "MEMORY_LOADED")["facts_read"] == []
    assert event(trace, "MEMORY_COMMITTED")["facts_written"] == [f.fact_id]
    assert names(trace).index("MEMORY_COMMITTED") > names(trace).index("ANSWER_READY")


def test_a_refusal_writes_no_fact_and_a_repeat_writes_no_duplicate(eng: Engine):
    e, ask = chat(eng)
    ask("How tall is the Linden Bridge tower?")
    assert e.memory().facts("s1") == []
    ask("Who designed the Linden Bridge?")
    resp, trace, _ = ask("Who designed the Linden Bridge?", mode="R1")
    assert len(e.memory().facts("s1")) == 1 and event(trace, "MEMORY_COMMITTED")["facts_duplicate"]


# ---------------------------------------------------------------------------------- follow-ups
def test_a_follow_up_resolves_it_from_the_session_and_the_trace_records_the_rewrite(eng: Engine):
    _, ask = chat(eng)
    ask("Who designed the Linden Bridge?")
    resp, trace, _ = ask("How many arches does it have?")
    assert not resp.fallback and "seven arches" in resp.answer and resp.mode == "R1_ONE_SHOT_RETRIEVE"
    rewrite = event(trace, "FOLLOW_UP_RESOLVED")
    assert rewrite["original"] == "How many arches does it have?" and rewrite["rewritten"] == ARCHES
    assert trace["searches"][0]["query"] == ARCHES  # retrieval used the rewritten question
    assert resp.explain["memory"]["rewrite"]["entity"] == "the Linden Bridge"


def test_without_a_session_the_same_follow_up_still_asks_for_clarification(eng: Engine):
    _, ask = chat(eng)
    resp, _, calls = ask("How many arches does it have?", session=None)
    assert resp.route == "CLARIFY" and resp.fallback and calls == []
    resp, trace, _ = ask("How many arches does it have?", session="fresh")  # a session with nothing in it
    assert resp.route == "CLARIFY" and "FOLLOW_UP_RESOLVED" not in names(trace)


# ---------------------------------------------------------------------------------- R0 for real
def test_r0_answers_from_facts_with_fact_citations_and_no_retrieval(eng: Engine):
    e, ask = chat(eng)
    ask(ARCHES)
    fact = e.memory().facts("s1")[0]
    resp, trace, calls = ask("The Linden Bridge has how many arches?")
    assert resp.mode == "R0_DIRECT_WRITE" and resp.route == "FAST_PATH" and not resp.fallback
    assert trace["searches"] == [] and "RETRIEVED" not in names(trace)
    assert [c.annotations for c in resp.citations] == [[f"fact:{fact.fact_id}"]]
    c = resp.citations[0]
    assert c.source.endswith("linden.md") and c.quote in LINDEN  # shown with its original source and quote
    assert all(cl.verdict == "SUPPORTED" for cl in resp.claims)  # verified like any citation
    assert f"[cite: fact, {fact.fact_id}]" in calls[0].messages[-1].content
    assert trace["states"] == ["IDLE", "ROUTING", "WRITING", "DRAFTING", "VERIFYING", "DONE"]
    assert event(trace, "MEMORY_LOADED")["facts_read"] == [fact.fact_id]


def test_router_does_not_choose_r0_when_the_ledger_does_not_cover_the_question(eng: Engine):
    _, ask = chat(eng)
    ask(ARCHES)
    resp, trace, _ = ask("When did the Rhine Bridge open?")
    assert resp.mode != "R0_DIRECT_WRITE" and "1870" in resp.answer and trace["searches"]


def test_r0_falls_back_to_a_search_when_the_facts_do_not_establish_the_answer(eng: Engine):
    e, ask = chat(eng)
    ask(ARCHES)
    brain_llm = ScriptedLLM([lambda m: '{"answer": "", "citations": [], "fallback": true}',
                             *[Brain(answer=answer)] * 20])
    e2 = with_models(eng, llm=brain_llm, settings=e.settings)
    resp = e2.ask("The Linden Bridge has how many arches?", session="s1",
                  options=TurnOptions(answer=OPEN))
    t = e2.trace(resp.trace_id)
    assert [m["mode"] for m in t["outcome"]["modes_tried"]] == ["R0_DIRECT_WRITE", "R1_ONE_SHOT_RETRIEVE"]
    assert not resp.fallback and "seven" in resp.answer


def test_facts_outrank_new_documents_in_a_retrieval_turn(eng: Engine):
    _, ask = chat(eng)
    ask(ARCHES)
    resp, trace, calls = ask("When did the Linden Bridge open, and how many arches does it have?", mode="R1")
    first_block = re.search(r'<document id="1"[^>]*>\n(.*?)\n</document>', calls[0].messages[-1].content, re.S)
    assert "seven arches" in first_block.group(1)  # the fact's source comes first


def test_the_planner_gets_the_relevant_facts(eng: Engine):
    _, ask = chat(eng)
    ask(ARCHES)
    plans: list[str] = []
    brain = Brain(answer=answer, plan=lambda text: plans.append(text) or {"sub_tasks": [
        {"id": 1, "description": "When did the Linden Bridge open?", "dependencies": []}]})
    e = with_models(eng, llm=ScriptedLLM([brain] * 50))
    e.ask("Why does the Linden Bridge have seven arches, compared with the Rhine Bridge?", session="s1",
          options=TurnOptions(answer=OPEN, budget=ControlBudget(plan_templates=False), force_mode="R3"))
    assert plans and "The Linden Bridge has seven arches." in plans[0]


# ---------------------------------------------------------------------------------- invalidation
def test_a_fact_whose_source_changes_is_invalidated_and_no_longer_recalled(eng: Engine, tmp_path: Path):
    e, ask = chat(eng)
    ask(ARCHES)
    (tmp_path / "corpus" / "linden.md").write_text(LINDEN.replace("seven", "eight"), encoding="utf-8")
    e.ingest([tmp_path / "corpus"])
    [fact] = e.memory().facts("s1")
    assert not fact.valid and fact.invalid_reason == "source document changed"
    resp, trace, _ = ask("The Linden Bridge has how many arches?")
    assert resp.mode != "R0_DIRECT_WRITE" and event(trace, "MEMORY_LOADED")["facts_read"] == []


def test_a_fact_whose_source_is_deleted_is_invalidated(eng: Engine):
    e, ask = chat(eng)
    ask(ARCHES)
    e.delete_document(linden_id(e))
    [fact] = e.memory().facts("s1")
    assert not fact.valid and fact.invalid_reason == "source document deleted"
    assert e.memory().facts("s1", include_invalid=False) == []


def test_a_change_made_by_another_engine_is_noticed_on_the_next_turn(eng: Engine, tmp_path: Path):
    e, ask = chat(eng)
    ask(ARCHES)
    other = Engine.open(settings=eng.settings, store=eng.store, embedder=eng.components.embedder.get())
    other.store.delete_document(linden_id(other))  # no memory hook: a bare store write
    resp, trace, _ = ask("The Linden Bridge has how many arches?")
    assert event(trace, "MEMORY_LOADED")["facts_read"] == [] and resp.mode != "R0_DIRECT_WRITE"


# ---------------------------------------------------------------------------------- E3 answer cache
def test_a_repeated_or_normalised_equal_question_is_served_from_the_cache(eng: Engine, tmp_path: Path):
    e, ask = chat(eng, cache="session")
    first, _, calls = ask("When did the Linden Bridge open?")
    assert calls and not first.fallback
    again, trace, calls = ask("when was the Linden Bridge opened")
    assert calls == [] and "CACHE_HIT" in names(trace) and again.answer == first.answer
    assert again.trace_id != first.trace_id and again.explain["memory"]["cache"] == "hit"
    # a document write changes what the answer depended on: the cache misses
    (tmp_path / "corpus" / "new.md").write_text("# New\n\nUnrelated text about trams.\n", encoding="utf-8")
    e.ingest([tmp_path / "corpus"])
    _, trace, calls = ask("When did the Linden Bridge open?")
    assert calls and "CACHE_HIT" not in names(trace)


def test_the_cache_is_off_for_session_less_turns_by_default(eng: Engine):
    _, ask = chat(eng, cache="session")
    ask("When did the Linden Bridge open?", session=None)
    _, _, calls = ask("When did the Linden Bridge open?", session=None)
    assert calls


# ---------------------------------------------------------------------------------- E6 governance
def test_a_user_correction_is_recorded_as_the_users_statement_and_disputes_the_fact(eng: Engine):
    e, ask = chat(eng)
    ask(ARCHES)
    [doc_fact] = e.memory().facts("s1")
    resp, trace, calls = ask("That is wrong, the Linden Bridge has eight arches.")
    assert calls == [] and resp.mode == "R0_DIRECT_WRITE" and resp.citations == []
    correction = next(f for f in e.memory().facts("s1") if f.kind == "user_correction")
    assert correction.statement == "the Linden Bridge has eight arches." and correction.source_doc_id is None
    assert correction.corrects == doc_fact.fact_id
    resp, trace, _ = ask("The Linden Bridge has how many arches?")  # a disputed fact is looked up again
    assert resp.mode != "R0_DIRECT_WRITE" and not any(c.annotations for c in resp.citations)


def test_sessions_are_listed_shown_exported_and_deleted(eng: Engine):
    e, ask = chat(eng)
    ask(ARCHES)
    mem = e.memory()
    assert [s.session_id for s in mem.sessions()] == ["s1"]
    assert mem.session("s1").turn_count == 1 and mem.session("s1").summary.key_conclusions
    data = mem.export(session_id="s1")
    assert data["sessions"][0]["facts"][0]["statement"] == "The Linden Bridge has seven arches."
    fact_id = data["sessions"][0]["facts"][0]["fact_id"]
    mem.forget("s1", fact_id)
    assert mem.facts("s1") == []
    mem.delete("s1")
    with pytest.raises(SessionNotFound):
        mem.session("s1")
    with pytest.raises(SessionNotFound):
        mem.facts("s1")


def test_an_export_for_one_user_never_holds_another_users_session(eng: Engine):
    mem = eng.memory()
    mem.store.create_session("a1", user="alice")
    mem.store.create_session("b1", user="bob")
    assert [s["session_id"] for s in mem.export(user="bob")["sessions"]] == ["b1"]
    assert mem.export(user="bob", session_id="a1") == {"user": "bob", "sessions": []}
    assert [s["user"] for s in mem.export(user="alice", session_id="a1")["sessions"]] == ["alice"]
    assert [s["session_id"] for s in mem.export(session_id="a1")["sessions"]] == ["a1"]


@pytest.mark.parametrize("session_id", ["a/b", "tab\there", "x" * 201])
def test_a_session_id_the_http_api_could_not_name_is_refused_before_the_turn(eng: Engine, tmp_path: Path,
                                                                             session_id: str):
    # /api/sessions/{id}: a session made under "a/b" by the CLI could not be shown, exported or deleted there
    pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")
    from fastapi.testclient import TestClient

    from tests.api_support import scripted_app

    e, ask = chat(eng)
    with pytest.raises(SessionError, match="a session id is 1 to 200 characters without '/'"):
        ask(ARCHES, session_id)
    assert e.memory().sessions() == []
    app, _ = scripted_app(tmp_path, brain=Brain(answer=answer), docs=MEM_DOCS)
    with TestClient(app) as client:
        r = client.post("/api/agent/qa/v2", json={"question": ARCHES, "session": session_id})
        assert r.status_code == 422 and "a session id is 1 to 200 characters" in r.json()["detail"]
        assert client.post("/api/agent/qa/v2", json={"question": ARCHES, "session": ""}).status_code == 200


# ---------------------------------------------------------------------------------- E3/E4 context and compaction
def test_compaction_keeps_six_raw_turns_and_bounds_a_long_session(eng: Engine):
    from cograg.memory.memorizer import turn_record
    from cograg.answer.answerer import AnswerResponse

    e, _ = chat(eng)
    mem = e.memory()
    mem.store.create_session("long")
    resp = AnswerResponse(answer="The Linden Bridge opened in 1811 [1].", fallback=False, confidence=0.9,
                          grounded=True, route="DOC_GROUNDED", trace_id="x")
    for i in range(400):
        t = turn_record(session_id="long", question=f"Question {i} about the Linden Bridge?",
                        resolved=f"Question {i} about the Linden Bridge?", question_norm="", resp=resp,
                        facts_used=[], trace_id="x", tokens=lambda s: 40)
        mem.store.commit_turn(t, [])
        mem.maybe_compact("long")
    unfolded = mem.store.turns("long", include_folded=False)
    assert len(unfolded) <= e.settings.memory.compact_above_tokens // 40 + 1
    assert mem.compact("long").kept_raw == 6 and len(mem.store.turns("long", include_folded=False)) == 6
    summary = mem.session("long").summary
    assert summary.folded_turns == 394 and summary.rolling
    turn = mem.begin_turn("long", "When did the Linden Bridge open?", source_hit=lambda c: None, cache_scope={})
    assert turn.context.tokens <= e.settings.memory.context_budget_tokens
    assert [b.layer for b in turn.context.blocks] == sorted((b.layer for b in turn.context.blocks),
                                                            key=["L2", "L0", "L1", "L3"].index)


# ---------------------------------------------------------------------------------- command line
def test_session_commands_list_show_facts_forget_and_delete_with_json(eng: Engine, cli, ingest_env):
    import json

    _, ask = chat(eng)
    ask(ARCHES)
    store = eng.settings.store
    listed = json.loads(cli("session", "list", "--store", store, "--json").stdout)
    assert [s["session_id"] for s in listed["sessions"]] == ["s1"] and listed["sessions"][0]["turns"] == 1
    shown = json.loads(cli("session", "show", "s1", "--store", store, "--json").stdout)
    assert shown["turns"][0]["question"] == ARCHES and shown["summary"]["key_conclusions"]
    facts = json.loads(cli("facts", "list", "--session", "s1", "--store", store, "--json").stdout)["facts"]
    assert set(facts[0]) >= {"fact_id", "statement", "source_doc_id", "source_chunk_id", "quote", "valid"}
    assert facts[0]["valid"] is True
    assert json.loads(cli("session", "facts", "s1", "--store", store, "--json").stdout)["facts"] == facts
    exported = json.loads(cli("session", "export", "--session", "s1", "--store", store).stdout)
    assert exported["sessions"][0]["facts"][0]["fact_id"] == facts[0]["fact_id"]
    assert cli("session", "forget", "s1", facts[0]["fact_id"], "--store", store, "--json").exit_code == 0
    assert json.loads(cli("facts", "list", "--session", "s1", "--store", store, "--json").stdout)["facts"] == []
    assert cli("session", "compact", "s1", "--store", store, "--json").exit_code == 0
    assert cli("sessions", "delete", "s1", "--store", store, "--json").exit_code == 0
    r = cli("session", "show", "s1", "--store", store)
    assert r.exit_code == 1 and r.stderr.strip() == "error: no session 's1'"
    r = cli("facts", "forget", "Fnope", "--session", "nope", "--store", store)
    assert r.exit_code == 1 and "no session 'nope'" in r.stderr


def test_two_concurrent_turns_on_one_session_keep_both_facts(eng: Engine):
    import threading

    # one engine per thread over the same store directory, as the HTTP server runs requests
    opts = TurnOptions(answer=OPEN, budget=ControlBudget(plan_templates=False), force_mode="R1_ONE_SHOT_RETRIEVE")
    errors: list[BaseException] = []

    def run(q: str) -> None:
        try:
            with Engine.open(settings=eng.settings, embedder=eng.components.embedder.get(),
                             llm=ScriptedLLM([Brain(answer=answer)] * 20)) as e:
                e.ask(q, options=opts, session="busy")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(q,)) for q in (ARCHES, "Who designed the Linden Bridge?",
                                                                  "When did the Rhine Bridge open?")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    statements = sorted(f.statement for f in eng.memory().facts("busy"))
    assert statements == ["The Linden Bridge has seven arches.", "The Linden Bridge was designed by Tobias Marrick.",
                          "The Rhine Bridge opened in 1870."]
    assert eng.memory().session("busy").turn_count == 3


def test_a_chinese_follow_up_resolves_from_the_session():
    from cograg.memory.followup import resolve_follow_up
    from cograg.memory.memorizer import entities_in
    from cograg.memory.models import TurnRecord

    turns = [TurnRecord(turn_id="t1", session_id="s", question="茶叶研究所育成了什么品种？",
                        entities=entities_in("茶叶研究所育成了什么品种？"))]
    rewrite = resolve_follow_up("它是哪一年创办的？", turns)
    assert rewrite is not None and rewrite.rewritten == "茶叶研究所是哪一年创办的？"
    assert resolve_follow_up("它是哪一年创办的？", []) is None


def test_a_ten_thousand_turn_session_stays_within_its_budget(tmp_path: Path):
    from cograg.config import MemoryConfig
    from cograg.memory import SessionMemory, SQLiteMemoryStore
    from cograg.memory.models import TurnRecord

    cfg = MemoryConfig()
    store = SQLiteMemoryStore(tmp_path)
    mem = SessionMemory(store, cfg, doc_hash=lambda d: None, generation=lambda: "0")
    store.create_session("long")
    for i in range(10_000):
        store.commit_turn(TurnRecord(turn_id=f"t{i}", session_id="long", question=f"Question {i} about trams?",
                                     summary_short=f"Question {i} about trams? — answer {i}.", tokens=40), [])
        mem.maybe_compact("long")
    assert store.unfolded_tokens("long") <= cfg.compact_above_tokens + 40
    summary = mem.session("long").summary
    assert summary.folded_turns > 9_900 and "Question 9" in summary.rolling
    turn = mem.begin_turn("long", "What about the trams?", source_hit=lambda c: None, cache_scope={})
    assert turn.context.tokens <= cfg.context_budget_tokens
    store.close()


def test_the_llm_summary_of_a_compaction_keeps_only_what_the_folded_turns_state():
    from cograg.memory.compaction import condense
    from cograg.models.llm import LLMTimeout

    lines = ["When did the Linden Bridge open? — The Linden Bridge opened in 1811.",
             "Who designed the Linden Bridge? — The Linden Bridge was designed by Tobias Marrick.",
             "How long is the Linden Bridge? — It is 212 metres long."]
    llm = ScriptedLLM(['{"sentences": ["The Linden Bridge opened in 1811 and was designed by Tobias Marrick.", '
                       '"The Linden Bridge cost 3 million thalers."]}'])
    summary, report = condense(lines, llm, count_tokens=lambda s: len(s.split()))
    assert summary == "The Linden Bridge opened in 1811 and was designed by Tobias Marrick."
    assert report == {"prompt": "summarize_session@1", "method": "llm", "proposed": 2, "kept": 1}
    summary, report = condense(lines, ScriptedLLM([LLMTimeout("slow")] * 3), count_tokens=lambda s: len(s.split()))
    assert summary == "\n".join(lines) and report["method"] == "rules" and "error" in report


def test_small_talk_in_a_session_with_facts_stays_small_talk(eng: Engine):
    _, ask = chat(eng)
    ask(ARCHES)
    resp, trace, calls = ask("Thanks, that Linden Bridge answer was helpful!")
    assert resp.mode == "R0_DIRECT_WRITE" and calls == [] and resp.citations == []
    assert event(trace, "MEMORY_LOADED")["facts_read"]  # facts were recalled, and not used for a thank-you


def test_a_corrupt_memory_row_or_a_failed_write_back_never_costs_the_answer(eng: Engine, monkeypatch):
    e, ask = chat(eng)
    ask(ARCHES)
    e.memory().store.conn.execute("UPDATE facts SET data='{broken'")
    resp, trace, _ = ask("When did the Linden Bridge open?")
    assert not resp.fallback and "1811" in resp.answer
    assert event(trace, "MEMORY_LOADED")["problems"]  # reported, and the turn went on

    def fail(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(e.memory().store, "commit_turn", fail)
    resp, trace, _ = ask("Who designed the Linden Bridge?")
    assert not resp.fallback and "Marrick" in resp.answer
    assert "disk full" in event(trace, "MEMORY_ERROR")["error"] and "MEMORY_COMMITTED" not in names(trace)


def test_chat_lists_and_forgets_facts_and_reports_errors_on_one_line(eng: Engine, ingest_env, monkeypatch):
    from typer.testing import CliRunner

    from cograg import cli as cli_module

    monkeypatch.setattr(cli_module.out, "width", 400)
    e, ask = chat(eng)
    ask(ARCHES)
    [fact] = e.memory().facts("s1")
    r = CliRunner().invoke(cli_module.app, ["chat", "--session", "s1", "--store", str(eng.settings.store)],
                           input=f"/facts\n/forget Fnope\n/forget {fact.fact_id}\n/facts\n/quit\n")
    assert r.exit_code == 0, r.output
    assert "The Linden Bridge has seven arches." in r.stdout and "no facts" in r.stdout
    assert "session 's1' has no fact 'Fnope'" in r.stderr
    assert e.memory().facts("s1") == []


def test_the_http_api_asks_in_a_session_and_follow_ups_resolve(tmp_path: Path):
    pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")
    from fastapi.testclient import TestClient

    from tests.api_support import scripted_app, scripted_settings

    app, _ = scripted_app(tmp_path, brain=Brain(answer=answer), docs=MEM_DOCS)
    with TestClient(app) as client:
        first = client.post("/api/agent/qa/v2", json={"question": ARCHES, "session": "web"})
        follow = client.post("/api/agent/qa/v2", json={"question": "Who designed it?", "session": "web"})
    assert first.status_code == 200 and follow.status_code == 200
    with Engine.open(settings=scripted_settings(tmp_path / "store"), create=False) as e:
        facts = [f.statement for f in e.memory().facts("web")]
        turns = e.memory().turns("web")
    assert "The Linden Bridge has seven arches." in facts
    assert turns[1].resolved_question == "Who designed the Linden Bridge?"


def test_the_http_api_lists_shows_forgets_exports_and_deletes_sessions(tmp_path: Path):
    pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")
    from fastapi.testclient import TestClient

    from tests.api_support import scripted_app

    app, _ = scripted_app(tmp_path, brain=Brain(answer=answer), docs=MEM_DOCS)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.post("/api/agent/qa/v2", json={"question": ARCHES, "session": "web"}).status_code == 200
        assert [s["session_id"] for s in client.get("/api/sessions").json()] == ["web"]
        shown = client.get("/api/sessions/web").json()
        assert shown["turn_count"] == 1 and shown["turns"][0]["question"] == ARCHES
        [fact] = client.get("/api/sessions/web/facts").json()
        assert fact["statement"] == "The Linden Bridge has seven arches." and "seven arches" in fact["quote"]
        assert fact["source"].endswith(".md") and fact["valid"]
        exported = client.get("/api/sessions/web/export").json()
        assert exported["sessions"][0]["facts"][0]["fact_id"] == fact["fact_id"]
        # unknown session or fact: 404 with one line
        missing = client.get("/api/sessions/nope/facts")
        assert missing.status_code == 404 and missing.json()["detail"] == "no session 'nope'"
        assert client.delete("/api/sessions/web/facts/Fnope").status_code == 404
        assert client.delete(f"/api/sessions/web/facts/{fact['fact_id']}").json()["forgotten"] == fact["fact_id"]
        assert client.get("/api/sessions/web/facts", params={"include_invalid": False}).json() == []
        assert client.delete("/api/sessions/web").json() == {"deleted": "web"}
        assert client.get("/api/sessions").json() == []
        assert client.delete("/api/sessions/web").status_code == 404


# ---------------------------------------------------------------------------------- a damaged memory store
def test_a_corrupt_fact_row_never_breaks_an_ingest_a_session_or_another_session(eng: Engine, tmp_path: Path):
    # fact_sources read the row with json_extract: "malformed JSON" after the ingest had committed,
    # and from then on in every session's turn and every listing
    e, ask = chat(eng)
    ask(ARCHES, "s1")
    ask("Who designed the Linden Bridge?", "s2")
    e.memory().store.conn.execute("UPDATE facts SET data='{broken' WHERE session_id='s1'")
    (tmp_path / "corpus" / "linden.md").write_text(LINDEN.replace("seven", "eight"), encoding="utf-8")
    assert e.ingest([tmp_path / "corpus"]).updated == 1
    [fact] = e.memory().facts("s2")
    assert not fact.valid and fact.invalid_reason == "source document changed"
    assert e.memory().session("s1").turn_count == 1 and len(e.memory().turns("s1")) == 1
    resp, trace, _ = ask("When did the Linden Bridge open?", "s3")
    assert "1811" in resp.answer and "MEMORY_COMMITTED" in names(trace) and "MEMORY_ERROR" not in names(trace)


def test_a_corrupt_turn_row_never_stops_later_turns_or_their_compaction(eng: Engine):
    # unfolded_tokens read the row with json_extract: every later turn ended with MEMORY_ERROR and
    # the session was never compacted again
    e, ask = chat(eng)
    ask(ARCHES)
    mem = e.memory()
    mem.store.conn.execute("UPDATE turns SET data='{broken' WHERE session_id='s1'")
    mem.config = mem.config.model_copy(update={"keep_raw_turns": 1, "compact_above_tokens": 100})
    for q in ["When did the Linden Bridge open?", "Who designed the Linden Bridge?", ARCHES] * 3:
        _, trace, _ = ask(q)
        assert "MEMORY_COMMITTED" in names(trace) and "MEMORY_ERROR" not in names(trace)
    folded = [t.seq for t in mem.turns("s1") if t.folded]  # shown as folded too (SQLite said false)
    assert mem.session("s1").summary.folded_turns == len(folded) >= 3 and folded == list(range(2, len(folded) + 2))
    assert mem.store.conn.execute("SELECT folded FROM turns WHERE seq=1").fetchone()[0] == 1  # the corrupt one too
    assert mem.store.unfolded_tokens("s1") <= 100


def test_a_damaged_memory_file_is_a_one_line_error_in_the_cli(eng: Engine, cli, ingest_env):
    _, ask = chat(eng)
    for s in ("s1", "s2"):
        ask(ARCHES, s)
    store = eng.memory().store
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = int(store.conn.execute("PRAGMA page_size").fetchone()[0])
    root = int(store.conn.execute("SELECT rootpage FROM sqlite_master WHERE name='sessions'").fetchone()[0])
    with store.path.open("r+b") as fh:
        fh.seek((root - 1) * page)
        fh.write(b"\xa5" * page)
    for args in (("session", "list"), ("session", "show", "s1"), ("ask", ARCHES, "--session", "s1")):
        r = cli(*args, "--store", eng.settings.store)
        assert r.exit_code == 1, (args, r.stderr)
        assert re.fullmatch(rf"error: memory store {re.escape(str(store.path))}: damaged \([^\n]*\)\n", r.stderr)


def test_an_ingest_whose_memory_cannot_be_updated_still_reports_its_documents(eng: Engine, tmp_path: Path,
                                                                               monkeypatch):
    # the documents were committed, then the memory sync failed and the command reported a failure
    from cograg.errors import StoreError

    e, ask = chat(eng)
    ask(ARCHES)

    def broken(**_: object) -> list[str]:
        raise StoreError("memory store memory.db: read-only (attempt to write a readonly database)")
    monkeypatch.setattr(e.memory(), "sync", broken)
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "ferry.md").write_text("# Ferry\n\nThe ferry leaves at nine.\n", encoding="utf-8")
    summary = e.ingest(tmp_path / "more")
    assert summary.added == 1 and any("session memory not updated" in w.reason for w in summary.warnings)
