"""Conversation memory end to end on the real embedded models (1.5B default profile,
multilingual-e5): the Linden Bridge follow-up, after a first turn in the one-shot mode (R1). "How
many arches does it have?" after a question about the Linden Bridge is read as a question about the
bridge, retrieved and answered with a verified citation; the verified facts of both turns are in
the session's ledger; without a session the same follow-up is answered with a clarifying question."""

from __future__ import annotations

import pytest

from tests.test_e2e_answer import assert_contract_holds, verified_sentences

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1500)
def test_linden_bridge_follow_up_resolves_it_from_the_session(demo_engine):
    eng = demo_engine
    # the first turn is R1 forced, the one-shot mode's end-to-end test too: one retrieval, one
    # verified answer from the bridge article
    first = eng.ask("Who designed the stone Linden Bridge?", session="e2e", mode="R1")
    assert_contract_holds(eng, first)
    assert first.mode == "R1_ONE_SHOT_RETRIEVE"
    assert "Marrick" in " ".join(verified_sentences(first, "bridge_history.html")), first.answer
    t = eng.trace(first.trace_id)
    assert t["states"][:3] == ["IDLE", "ROUTING", "RETRIEVING"] and t["outcome"]["anomalies"] == []

    follow = eng.ask("How many arches does it have?", session="e2e")
    t = eng.trace(follow.trace_id)
    rewrite = next(e["data"] for e in t["events"] if e["name"] == "FOLLOW_UP_RESOLVED")
    assert "Linden Bridge" in rewrite["rewritten"] and "it" not in rewrite["rewritten"].split()
    assert follow.route != "CLARIFY" and t["searches"][0]["query"] == rewrite["rewritten"]
    assert_contract_holds(eng, follow)
    written = next(e["data"] for e in t["events"] if e["name"] == "MEMORY_COMMITTED")["facts_written"]
    # assert_contract_holds fails on a refusal: the follow-up must be answered, and remembered
    assert "seven" in follow.answer.lower() or "7" in follow.answer
    assert written

    facts = eng.memory().facts("e2e")
    assert all(f.valid and f.quote and f.source.endswith("bridge_history.html") for f in facts)
    for f in facts:  # every remembered statement was a kept, SUPPORTED sentence of an answer
        assert f.quote in eng.store.get_chunk(f.source_chunk_id).text

    alone = eng.ask("How many arches does it have?")
    assert alone.route == "CLARIFY" and alone.fallback
