""""Which X is P, A or B?" chosen by verdicts (plan_templates.choice_check, the plan's check in
orchestrator/plan_tasks.py), routed to R3 even where one search covers it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cograg.answer.answerer import AnswerConfig
from cograg.answer.contract import strip_markers
from cograg.control.plan_templates import choice_check, template_plan
from cograg.control.router import Router
from cograg.control.routing_rules import load_rules
from cograg.engine import Engine
from tests.test_answer import make_engine
from tests.test_control_flow import Brain, ask, assert_verified, block_with
from tests.test_plan_templates import NationalityJudge, directors, only, own_sentence  # noqa: F401 (fixture)
from tests.test_router import result

SINGERS = {
    "king.md": "# Mark King\n\nMark King is an English musician, the singer of Level 42.\n",
    "hexum.md": '# Nick Hexum\n\nNicholas Lofton "Nick" Hexum is an American singer, the vocalist of 311.\n',
}


class SingerJudge(NationalityJudge):
    NATIONALITIES = ("American", "English")


def test_choice_check_takes_which_x_is_p_a_or_b_in_english_only():
    spec = choice_check("Which singer is American, Mark King or Nick Hexum?")
    assert spec is not None and spec.entities == ("Mark King", "Nick Hexum")
    assert spec.lookups == ("Who or what is Mark King?", "Who or what is Nick Hexum?")
    assert spec.claims == ("Mark King is American", "Nick Hexum is American")
    past = choice_check("Who was born in Germany, Albert Einstein or Isaac Newton?")
    assert past.claims == ("Albert Einstein was born in Germany", "Isaac Newton was born in Germany")
    for other in ("Which band was formed first, The Exies or Acid Bath?",  # a comparative: compared by the model
                  "Who is older, Ada Lovelace or Charles Babbage?",
                  "Which magazine is published more frequently, Time or Nature?",
                  "Which band has more members, Oasis or Blur?",  # no be-verb
                  "Are King Vidor and Howard Hawks both American directors?",
                  "马克·金和尼克·赫克瑟姆谁是美国人？"):
        assert choice_check(other) is None, other
    plan = template_plan("Which singer is American, Mark King or Nick Hexum?")
    assert [t.kind for t in plan.plan.sub_tasks] == ["retrieve", "retrieve", "check"]
    assert [t.description for t in plan.plan.sub_tasks[:2]] == list(spec.lookups)


def test_the_side_supported_while_the_other_is_contradicted_is_the_answer(tmp_path: Path):
    # each look-up answers with its singer's own sentence as the model shortens it ("Nick Hexum is …")
    def short_names(q: str, text: str) -> dict:
        if q == "Who or what is Nick Hexum?":
            n = block_with(text, "Nick")
            return {"answer": f"Nick Hexum is an American singer [{n}].", "citations": [{"id": n, "quote": ""}],
                    "fallback": False}
        return own_sentence(r"Who or what is (.+)\?$", "is")(q, text)

    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=short_names)
    with make_engine(tmp_path, SINGERS) as singers:
        resp = ask(singers, brain, "Which singer is American, Mark King or Nick Hexum?", mode="R3",
                   templates=True, judge=SingerJudge())
    # the other side's verified statement comes first (the conclusion does not cite it), then the choice,
    # with the name as the chosen side's look-up wrote it from its source
    assert not resp.fallback
    assert resp.answer == ('Mark King is an English musician, the singer of Level 42 [1]. '
                           'Nicholas Lofton "Nick" Hexum is American [2].')
    assert_verified(resp)
    assert brain.kinds.count("answer") == 2 and "synthesize" not in brain.kinds  # the look-ups only
    assert {c.id: c.source.rsplit("/", 1)[-1] for c in resp.citations} == {"1": "king.md", "2": "hexum.md"}
    conclusion = resp.claims[-1]
    assert conclusion.method == "check: choice"
    assert "Mark King is American: CONTRADICTED" in conclusion.reason
    assert "Nick Hexum is American: SUPPORTED" in conclusion.reason


def test_verdicts_that_do_not_choose_leave_it_to_the_reasoning_step(directors: Engine):
    # both directors were American: the verdicts cannot choose, so the model answers from the two
    # look-ups and its sentence is verified as any other
    def answer(q: str, text: str) -> dict:
        if q.startswith("Who or what was "):
            return own_sentence(r"Who or what was (.+)\?$", "was")(q, text)
        n = block_with(text, "Howard Hawks was")
        return {"answer": f"Howard Hawks was an American film director and screenwriter [{n}].",
                "citations": [{"id": n, "quote": ""}], "fallback": False}

    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=answer)
    resp = ask(directors, brain, "Which director was American, King Vidor or Howard Hawks?", mode="R3",
               templates=True, judge=NationalityJudge())
    assert not resp.fallback and "Howard Hawks was an American film director" in resp.answer
    assert_verified(resp)
    assert brain.kinds.count("answer") == 3  # two look-ups and the reasoning step
    assert resp.claims[-1].method != "check: choice"
    t = directors.trace(resp.trace_id)
    nodes = {n["id"]: n for n in t["plan"]["nodes"]}
    assert nodes[3]["kind"] == "check" and nodes[3]["status"] == "done"
    assert "CHOICE_UNDECIDED" in nodes[3]["events"]
    checked = {strip_markers(v["sentence"]).strip(): v["verdict"] for v in t["verdicts"]}
    assert checked["King Vidor was American"] == checked["Howard Hawks was American"] == "SUPPORTED"


def test_one_side_alone_never_chooses(directors: Engine):
    # Cziffra's look-up finds nothing: Vidor's "American" cannot choose between two on its own
    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=only("Vidor"))
    resp = ask(directors, brain, "Which director is American, King Vidor or Géza von Cziffra?", mode="R3",
               templates=True, judge=NationalityJudge())
    assert resp.fallback and resp.answer.endswith("Not established: Who or what is Géza von Cziffra?")
    assert "King Vidor was an American film director and producer" in resp.answer
    t = directors.trace(resp.trace_id)
    assert t["plan"]["one_side_check"]["status"] == "failed"


def test_which_is_p_goes_to_r3_even_where_one_search_covers_it():
    question = "Which singer is American, Mark King or Nick Hexum?"
    texts = list(SINGERS.values())
    d = Router(load_rules(), search=lambda q: result(q, texts, 0.9), floors=AnswerConfig()).route(question)
    assert d.route == "MULTI_HOP" and d.mode == "R3_DAG_PLAN"
    assert any("'which is P, A or B?' is decided by R3's check" in r for r in d.reasons)
    rules = load_rules().model_copy(update={"both_checked_in_r3": False})
    assert Router(rules, search=lambda q: result(q, texts, 0.9)).route(question).mode == "R1_ONE_SHOT_RETRIEVE"
