"""The answer's sentence budget (`answer.max_sentences`) is enforced by code (SPEC C, budgets): a
draft longer than the budget is cut before verification, so the judge is asked about no more
sentences than may be delivered, and the answer holds no more; the trace says what was cut."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cograg.answer.contract import answer_sentences
from cograg.engine import Engine
from cograg.models.judge import LLMJudge
from cograg.testing import ScriptedLLM
from tests.test_answer import OPEN, ask, block_number, make_engine

ADJECTIVES = ["famous", "old", "grand", "stone", "historic", "elegant", "sturdy", "lovely", "tall", "long",
              "broad", "quiet"]


def long_draft(count: int, tail: str = ""):
    """A model that writes `count` sentences, each citing the block that shows "seven arches", then `tail`
    citing the block that shows "EUR 2.10" (its "{n}" is that block's number)."""
    def reply(messages) -> str:
        n = block_number(messages, "seven arches")
        sentences = [f"The {a} Linden Bridge by Tobias Marrick has seven arches [{n}]." for a in ADJECTIVES[:count]]
        cited = [{"id": n, "quote": "It has seven arches."}]
        if tail:
            m = block_number(messages, "EUR 2.10")
            sentences.append(tail.format(n=m))
            cited.append({"id": m, "quote": "A single tram ticket costs EUR 2.10."})
        return json.dumps({"answer": " ".join(sentences), "citations": cited})
    return reply


def supporting_judge() -> ScriptedLLM:
    return ScriptedLLM(['{"verdict": "SUPPORTED", "reason": "stated"}'] * 50, name="judge")


@pytest.fixture()
def eng(tmp_path: Path):
    e = make_engine(tmp_path)
    yield e
    e.close()


@pytest.mark.parametrize("limit", [5, 2])
def test_a_draft_longer_than_the_budget_is_cut_before_the_judge(eng: Engine, limit: int):
    judge = supporting_judge()
    config = OPEN.model_copy(update={"max_sentences": limit})
    r = ask(eng, ScriptedLLM([long_draft(12)]), "Tell me about the Linden Bridge", config=config,
            judge=LLMJudge(judge))
    assert not r.fallback
    assert len(judge.calls) == limit  # one judge call per sentence at most, and no more sentences
    assert len(answer_sentences(r.answer)) == limit and len(r.claims) == limit
    assert r.removed.over_limit_sentences == 12 - limit
    events = [e for e in eng.trace(r.trace_id)["events"] if e["name"] == "SENTENCES_OVER_LIMIT"]
    assert [(e["data"]["kept"], e["data"]["dropped"]) for e in events] == [(limit, 12 - limit)]


def test_a_draft_within_the_budget_is_left_whole(eng: Engine):
    r = ask(eng, ScriptedLLM([long_draft(3)]), "Tell me about the Linden Bridge", judge=LLMJudge(supporting_judge()))
    assert not r.fallback and len(answer_sentences(r.answer)) == 3 and r.removed.over_limit_sentences == 0
    assert "SENTENCES_OVER_LIMIT" not in [e["name"] for e in eng.trace(r.trace_id)["events"]]


def test_a_citation_only_the_cut_sentences_carry_is_not_delivered(eng: Engine):
    llm = ScriptedLLM([long_draft(5, tail="A single tram ticket costs EUR 2.10 [{n}].")])
    r = ask(eng, llm, "Tell me about the Linden Bridge", judge=LLMJudge(supporting_judge()))
    assert not r.fallback and len(answer_sentences(r.answer)) == 5 and "EUR" not in r.answer
    assert [c.quote for c in r.citations] == ["It has seven arches."]
