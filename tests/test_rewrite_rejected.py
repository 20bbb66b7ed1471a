"""A draft the verifier rejects whole is written once more, in the same form, told what was rejected
(`answer.rewrite_rejected`, SPEC C3 "removed or rewritten"). The scripted model answers from the
case's documents: its first reply states a date the cited block does not hold (the verifier's
numbers check rejects it), its second states the block's date."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cograg.answer.answerer import AnswerConfig
from cograg.engine import Engine
from cograg.testing import ScriptedLLM
from tests.test_answer import OPEN, answering, ask, block_number, make_engine
from tests.test_verifier import AgreeableJudge

OPENED = "When did the Linden Bridge open?"


@pytest.fixture()
def eng(tmp_path: Path):
    e = make_engine(tmp_path)
    yield e
    e.close()


def quotes_first(answer: str, needle: str, quote: str):
    """A quotes-first reply citing the block that holds `needle`."""
    def reply(messages):
        n = block_number(messages, needle)
        return json.dumps({"citations": [{"id": n, "quote": quote}], "answer": answer.format(n=n), "fallback": False})
    return reply


WRONG_YEAR = answering("The Linden Bridge opened in 1911 [{n}].", "opened in 1811")
RIGHT_YEAR = answering("The Linden Bridge opened in 1811 [{n}].", "opened in 1811", quote="The bridge opened in 1811")


def test_a_rejected_draft_is_written_again_told_what_was_rejected_and_verified(eng: Engine):
    assert AnswerConfig().rewrite_rejected == ["en", "zh"]
    llm = ScriptedLLM([WRONG_YEAR, RIGHT_YEAR])
    r = ask(eng, llm, OPENED)
    assert not r.fallback and r.answer == "The Linden Bridge opened in 1811 [1]."
    assert r.citations[0].quote == "The bridge opened in 1811"
    assert r.removed.rewrites == 1 and r.removed.unsupported_sentences == 1 and r.removed.regenerations == 0
    assert [c.verdict for c in r.claims] == ["SUPPORTED"]
    first, second = llm.calls
    assert list(first.kwargs["schema"].model_fields)[0] == list(second.kwargs["schema"].model_fields)[0] == "answer"
    assert first.messages[0].content == second.messages[0].content  # the same instructions
    assert "rejected" not in first.messages[-1].content
    told = second.messages[-1].content
    assert '"The Linden Bridge opened in 1911."' in told and "rejected" in told
    t = eng.trace(r.trace_id)
    assert [d["attempt"] for d in t["drafts"]] == [1, 2]
    assert [v["verdict"] for v in t["verdicts"]] == ["UNRELATED", "SUPPORTED"]
    names = [e["name"] for e in t["events"]]
    assert names.index("VERIFIED") < names.index("REWRITE_REQUESTED") < names.index("DRAFT_READY", names.index("REWRITE_REQUESTED"))
    assert names.count("VERIFIED") == 2 and names.count("DRAFT_READY") == 2


def test_a_rewrite_the_verifier_rejects_too_is_refused(eng: Engine):
    wrong_again = answering("The Linden Bridge opened in 1912 [{n}].", "opened in 1811", quote="The bridge opened in 1811")
    llm = ScriptedLLM([WRONG_YEAR, wrong_again])
    r = ask(eng, llm, OPENED)
    assert r.fallback and r.route == "REFUSED" and "do not establish" in r.answer
    assert len(llm.calls) == 2 and r.removed.rewrites == 1 and r.removed.unsupported_sentences == 2
    assert r.notes == ["only 0 of 1 sentences verified"]
    assert [v["verdict"] for v in eng.trace(r.trace_id)["verdicts"]] == ["UNRELATED", "UNRELATED"]


def test_switched_off_or_for_another_language_the_rejected_draft_is_refused(eng: Engine):
    llm = ScriptedLLM([WRONG_YEAR, RIGHT_YEAR])
    r = ask(eng, llm, OPENED, config=OPEN.model_copy(update={"rewrite_rejected": []}))
    assert r.fallback and len(llm.calls) == 1 and r.removed.rewrites == 0
    llm = ScriptedLLM([WRONG_YEAR, RIGHT_YEAR])
    r = ask(eng, llm, OPENED, config=OPEN.model_copy(update={"rewrite_rejected": ["zh"]}))
    assert r.fallback and len(llm.calls) == 1
    assert AnswerConfig(rewrite_rejected="false").rewrite_rejected == []
    assert AnswerConfig(rewrite_rejected="en").rewrite_rejected == ["en"]


def test_chinese_drafts_are_written_again_too(eng: Engine):
    llm = ScriptedLLM([answering("银雾于1987年育成[{n}]。", "1978"), answering("银雾于1978年育成[{n}]。", "1978", quote="银雾于1978年育成")])
    r = ask(eng, llm, "银雾是哪一年育成的？")
    assert not r.fallback and r.answer == "银雾于1978年育成[1]。" and r.removed.rewrites == 1


def test_written_quotes_first_where_the_language_is_answered_quotes_first(eng: Engine):
    llm = ScriptedLLM([quotes_first("The Linden Bridge opened in 1911 [{n}].", "opened in 1811", "The bridge opened in 1811"),
                       quotes_first("The Linden Bridge opened in 1811 [{n}].", "opened in 1811", "The bridge opened in 1811")])
    r = ask(eng, llm, OPENED, config=OPEN.model_copy(update={"evidence_first": ["en"]}))
    assert not r.fallback and r.removed.rewrites == 1
    assert [list(c.kwargs["schema"].model_fields)[0] for c in llm.calls] == ["citations", "citations"]


def test_no_rewrite_for_an_accepted_draft_or_the_model_s_own_fallback(eng: Engine):
    llm = ScriptedLLM([answering("The Linden Bridge opened in 1811 [{n}].", "opened in 1811")])
    r = ask(eng, llm, OPENED)
    assert not r.fallback and len(llm.calls) == 1 and r.removed.rewrites == 0
    gave_up = json.dumps({"answer": "The documents do not say.", "citations": [], "fallback": True})
    llm = ScriptedLLM([gave_up, RIGHT_YEAR])
    r = ask(eng, llm, OPENED)
    assert r.fallback and len(llm.calls) == 1 and r.removed.rewrites == 0


def test_the_rewrite_follows_the_contract_s_own_regeneration(eng: Engine):
    """No valid citation (C2's one regeneration), then a rejected draft, then the rewrite: three drafts."""
    uncited = json.dumps({"answer": "It opened in 1811.", "citations": [], "fallback": False})
    llm = ScriptedLLM([uncited, WRONG_YEAR, RIGHT_YEAR])
    r = ask(eng, llm, OPENED)
    assert not r.fallback and r.removed.regenerations == 1 and r.removed.rewrites == 1
    assert [d["attempt"] for d in eng.trace(r.trace_id)["drafts"]] == [1, 2, 3]


def test_no_rewrite_after_a_sentence_removed_as_an_obeyed_injection(eng: Engine):
    """A sentence the judge passes (as the 1.5B judge passes much) but that carries a link no source
    holds is removed by the post-check (C5): writing again would give what prompted it a second try."""
    obeying = answering("The Linden Bridge opened in 1811, see https://bridge-tickets.example [{n}].", "opened in 1811")
    llm = ScriptedLLM([obeying, RIGHT_YEAR])
    r = ask(eng, llm, OPENED, judge=AgreeableJudge())
    assert r.fallback and len(llm.calls) == 1
    assert r.removed.injection_sentences == 1 and r.removed.rewrites == 0
