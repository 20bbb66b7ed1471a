"""A remembered fact is shown only while its source could be (SPEC B2/B3 with E2): after the
operator takes a document away from the caller — same text, so the fact stays valid in the
ledger — the fact no longer reaches the router, the planner, R0 or the reply. One predicate
(`memory.access.FactSources`) decides for every one of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cograg.control.models import ControlBudget
from cograg.engine import Engine
from cograg.memory import SessionMemory, SQLiteMemoryStore
from cograg.memory.models import Fact, TurnRecord
from cograg.orchestrator.orchestrator import TurnOptions
from cograg.retrieval.models import Principal, SearchHit
from cograg.testing import ScriptedLLM
from tests.test_answer import make_engine, with_models
from tests.test_control_flow import DOCS, OPEN, Brain, block_with, default_answer

SECRET = "# Linden Bridge\n\nThe Linden Bridge has seven arches. Its secret budget was 42 million thalers.\n"
ARCHES = "How many arches does the Linden Bridge have?"
COMPARE = "Compare the arches of the Linden Bridge and the spans of the Rhine Bridge"
ALICE = Principal(user="alice", groups=["engineering"])


def answer(q: str, text: str) -> dict:
    """Cite the passage (or remembered fact) that says how many arches, when the model sees one."""
    if "arches" in q.lower():
        fact = re.search(r"\[cite: fact, (F\w+)\] [^\n]*arches", text)
        if fact:
            return {"answer": f"The Linden Bridge has seven arches [cite: fact, {fact.group(1)}].",
                    "citations": [], "fallback": False}
        n = block_with(text, "seven arches")
        if n:
            return {"answer": f"The Linden Bridge has seven arches [{n}].",
                    "citations": [{"id": n, "quote": ""}], "fallback": False}
        return {"answer": "The documents do not say.", "citations": [], "fallback": True}
    return default_answer(q, text)


def copying_plan(prompts: list[str]):
    """A planner that copies whatever remembered fact it is shown into a sub-task of its plan."""
    def plan(text: str) -> str:
        prompts.append(text)
        fact = re.search(r'<fact id="[^"]+">(.*?)</fact>', text)
        tasks = [{"id": 1, "description": "When did the Rhine Bridge open?", "dependencies": []},
                 {"id": 2, "description": "How many arches does the Linden Bridge have?", "dependencies": []}]
        if fact:
            tasks[1]["description"] = f"Linden Bridge: {fact.group(1)}"
        tasks.append({"id": 3, "description": "Compare the two bridges", "dependencies": [1, 2]})
        return json.dumps({"sub_tasks": tasks})
    return plan


@pytest.fixture()
def revoked(tmp_path: Path):
    """(engine, ask, planner prompts): alice learnt the arches from the secret document in session
    s1, then the operator re-ingested it, unchanged, for finance only."""
    eng = make_engine(tmp_path, DOCS)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "linden_secret.md").write_text(SECRET)
    eng.ingest([secret], acl=["engineering"])
    prompts: list[str] = []
    e = with_models(eng, llm=ScriptedLLM([Brain(answer=answer, plan=copying_plan(prompts))] * 400))
    opts = TurnOptions(answer=OPEN, budget=ControlBudget(plan_templates=False))

    def ask(question: str, mode: str | None = None):
        o = opts.model_copy(update={"force_mode": mode}) if mode else opts
        resp = e.ask(question, options=o, session="s1", principal=ALICE)
        return resp, e.trace(resp.trace_id)

    first, _ = ask(ARCHES, mode="R1_ONE_SHOT_RETRIEVE")
    assert "seven arches" in first.answer
    eng.ingest([secret], acl=["finance"])
    (fact,) = [f for f in e.memory().facts("s1") if f.kind == "document"]
    assert fact.valid and "seven arches" in fact.statement  # the premise: the ledger still holds it
    yield e, ask, prompts
    eng.close()


def test_a_fact_the_caller_can_no_longer_read_is_not_in_the_planner_prompt(revoked):
    _, ask, prompts = revoked
    resp, trace = ask(COMPARE, mode="R3_DAG_PLAN")
    assert prompts and not any("seven arches" in p for p in prompts)
    assert "seven arches" not in resp.answer
    memory = next(ev["data"] for ev in trace["events"] if ev["name"] == "MEMORY_LOADED")
    assert memory["facts_read"] == []


def test_a_planner_copying_a_remembered_fact_cannot_carry_a_revoked_one_into_the_reply(revoked):
    _, ask, _ = revoked
    resp, _ = ask(COMPARE, mode="R3_DAG_PLAN")
    assert "seven arches" not in resp.answer and "42 million" not in resp.answer


def test_the_router_is_not_told_a_revoked_fact_covers_the_question(revoked):
    _, ask, _ = revoked
    resp, trace = ask(ARCHES)
    decided = next(ev["data"] for ev in trace["events"] if ev["name"] == "ROUTE_DECIDED")
    assert not any("facts_cover" in r for r in decided["reasons"])
    assert "seven arches" not in resp.answer


# ---------------------------------------------------------------------------------- the memory API
def _memory(tmp_path: Path) -> SessionMemory:
    store = SQLiteMemoryStore(tmp_path)
    mem = SessionMemory(store, doc_hash=lambda d: "h", generation=lambda: "0")
    store.create_session("s")
    facts = [Fact(fact_id=f"F{n}", session_id="s", statement=statement, source_doc_id=f"d{n}",
                  source_chunk_id=f"c{n}", source_hash="h", turn_id="t0", created_at=float(n))
             for n, statement in ((1, "The Linden Bridge has seven arches."),
                                  (2, "The Linden Bridge opened in 1811."))]
    store.commit_turn(TurnRecord(turn_id="t0", session_id="s", question="q", tokens=5), facts)
    return mem


def _hit(chunk_id: str) -> SearchHit:
    return SearchHit(chunk_id=chunk_id, doc_id="d" + chunk_id[1:], seq=0, text="The Linden Bridge ...", start=0,
                     end=10, token_count=5, title="Linden", source="linden.md", score=1.0)


def test_every_way_a_recalled_fact_leaves_memory_applies_the_callers_access(tmp_path: Path):
    mem = _memory(tmp_path)
    readable = {"c2"}  # the caller may read the opening-year passage only
    turn = mem.begin_turn("s", "How many arches does the Linden Bridge have, and when did it open?",
                          source_hit=lambda c: _hit(c) if c in readable else None, cache_scope={})
    assert [f["id"] for f in turn.prompt_facts()] == ["F2"]
    assert [f.fact_id for f in turn.document_facts()] == ["F2"]
    assert [f.fact_id for f, _ in turn.fact_hits()] == ["F2"]
    assert turn.bench.recalled_fact_ids == ["F2"] and turn.loaded_event()["facts_read"] == ["F2"]
    assert [b.block_id for b in turn.context.blocks if b.layer == "L3"] == ["L3:F2"]
    mem.store.close()


def test_a_fact_the_caller_may_not_read_does_not_take_a_readable_facts_place(tmp_path: Path):
    mem = _memory(tmp_path)
    mem.config = mem.config.model_copy(update={"recall_facts": 1})
    # F1 shares more words with the question; the caller may read only F2's source
    turn = mem.begin_turn("s", "How many arches does the Linden Bridge have?",
                          source_hit=lambda c: _hit(c) if c == "c2" else None, cache_scope={})
    assert [f["id"] for f in turn.prompt_facts()] == ["F2"]
    mem.store.close()


# ------------------------------------------------------------------- earlier turns (follow-ups)
AUDIT = "# Audit report\n\nThe bridge audit was led by Jane Roe, a surveyor from Basel.\n"


def audit_answer(q: str, text: str) -> dict:
    """Name the auditor when the audit passage is in the context."""
    if "audit" in q.lower():
        n = block_with(text, "Jane Roe")
        if n:
            return {"answer": f"Jane Roe led the bridge audit [{n}].", "citations": [{"id": n, "quote": ""}],
                    "fallback": False}
        return {"answer": "The documents do not say.", "citations": [], "fallback": True}
    return default_answer(q, text)


def _audit_session(tmp_path: Path, *, revoke: bool):
    """Alice learns in session s1 who led the audit, from a document only engineering may read;
    with `revoke`, the operator then re-ingests it, unchanged, for finance only."""
    eng = make_engine(tmp_path, DOCS)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "audit.md").write_text(AUDIT)
    eng.ingest([secret], acl=["engineering"])
    e = with_models(eng, llm=ScriptedLLM([Brain(answer=audit_answer)] * 100))
    opts = TurnOptions(answer=OPEN, budget=ControlBudget(plan_templates=False))
    first = e.ask("Who led the bridge audit?", options=opts.model_copy(update={"force_mode": "R1_ONE_SHOT_RETRIEVE"}),
                  session="s1", principal=ALICE)
    assert "Jane Roe" in first.answer  # the premise: the name came from the secret document
    if revoke:
        eng.ingest([secret], acl=["finance"])
    follow = e.ask("Where was she born?", options=opts, session="s1", principal=ALICE)
    return eng, follow, json.dumps(e.trace(follow.trace_id), ensure_ascii=False)


def test_a_follow_up_pronoun_does_not_resolve_to_a_name_from_a_source_the_caller_lost(tmp_path: Path):
    eng, follow, trace = _audit_session(tmp_path, revoke=True)
    assert "Jane Roe" not in follow.answer and "Jane Roe" not in trace
    assert "Jane Roe" not in json.dumps(follow.explain, ensure_ascii=False)
    assert "withheld" in trace  # the trace says an earlier turn was left out, not what it said
    eng.close()


def test_a_follow_up_pronoun_resolves_to_the_earlier_answer_while_its_source_is_readable(tmp_path: Path):
    eng, follow, trace = _audit_session(tmp_path, revoke=False)
    assert "Where was Jane Roe born?" in trace
    eng.close()


def test_a_withheld_turn_keeps_only_what_the_user_wrote(tmp_path: Path):
    from cograg.memory.access import withhold_unreadable_turns
    from cograg.memory.models import Session, SessionState

    turns = [TurnRecord(turn_id="t1", session_id="s", question="Who led the Linden Bridge audit?",
                        resolved_question="Who led the Linden Bridge audit?", answer="Jane Roe led it [1].",
                        entities=["Linden Bridge", "Jane Roe"], summary_short="Q / Jane Roe led it.",
                        citations=["secret01-aa", "public01-bb"], facts_written=["F1"]),
             TurnRecord(turn_id="t2", session_id="s", question="When did it open?", answer="In 1811 [1].",
                        citations=["public01-cc"])]
    state = SessionState(session=Session(session_id="s"), turns=turns)
    out = withhold_unreadable_turns(state, lambda c: not c.startswith("secret"))
    hidden, kept = out.turns
    assert "Jane Roe" not in hidden.model_dump_json()
    assert hidden.question == "Who led the Linden Bridge audit?" and hidden.entities == ["the Linden Bridge"]
    assert hidden.citations == [] and hidden.facts_written == []
    assert kept == turns[1] and out.problems and "Jane Roe" not in " ".join(out.problems)
    assert withhold_unreadable_turns(state, lambda c: True) is state


def test_a_gone_chunk_is_judged_by_its_document(tmp_path: Path):
    from cograg.memory.access import cited_readable

    docs = {"abcd1234": [("abcd1234ffff", True)], "hidden99": [("hidden99ffff", False)]}
    readable = cited_readable(lambda c: None, chunk_exists=lambda c: c == "there000-1",
                              docs_with_prefix=lambda p: docs.get(p, []), allowed=lambda: {"abcd1234ffff"})
    assert readable("abcd1234-re-ingested")      # new text, same readable document
    assert not readable("hidden99-x")             # the corpus policy hides its document now
    assert not readable("there000-1")             # the chunk is there but not for this caller
    assert not readable("deleted0-x")             # deleted, and ACLs apply: nothing says it was readable
    public = cited_readable(lambda c: None, chunk_exists=lambda c: False, docs_with_prefix=lambda p: [],
                            allowed=lambda: None)
    assert public("deleted0-x")                   # no ACL anywhere: a deleted document's turn stays
