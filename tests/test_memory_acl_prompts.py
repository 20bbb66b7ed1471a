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
