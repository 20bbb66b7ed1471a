""""Which band was formed first, A or B?" decided by the dates the look-ups verified
(control/order_value.py, plan_templates.order_check, the plan's check in orchestrator/plan_tasks.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cograg.control.order_value import Moment, earlier, moments, the_moment
from cograg.control.plan_templates import choice_check, order_check, template_plan
from cograg.engine import Engine
from tests.test_answer import make_engine
from tests.test_control_flow import Brain, ask, assert_verified, block_with

BANDS = {
    "exies.md": "# The Exies\n\nThe Exies were formed in 1997 in Los Angeles as a rock band.\n",
    "diablo.md": "# Circus Diablo\n\nCircus Diablo was formed in 2004 by Billy Morrison and Billy Duffy.\n",
    "haig.md": "# Sid Haig\n\nSid Haig was born on July 19, 1939 in Fresno, California.\n",
    "darchinyan.md": "# Vic Darchinyan\n\nVic Darchinyan was born on 7 January 1976 in Vanadzor.\n",
    "seer.md": "# Seer\n\nSeer was founded in 1996 and re-formed in 2005 by Alfred Jaklitsch.\n",
}


@pytest.fixture()
def bands(tmp_path: Path):
    e = make_engine(tmp_path, BANDS)
    yield e
    e.close()


def test_moments_read_the_dates_a_statement_writes():
    assert moments("Sid Haig was born on July 19, 1939 [1].") == [Moment(1939, 7, 19)]
    assert moments("born 7 January 1976; released 2007-04-17; in Sept. 1999") == [
        Moment(1976, 1, 7), Moment(2007, 4, 17), Moment(1999, 9)]
    assert moments("active 1993–2002, in the 1950s and the 1990's, (c. 1711–16), 1950/51") == []
    assert the_moment("The Exies were formed in 1997 [1].") == Moment(1997)
    assert the_moment("formed in March 1997; its first album came in 1997") == Moment(1997, 3)
    assert the_moment("founded in 1996 and re-formed in 2005") is None  # two dates: which one is asked?
    assert the_moment("a band from Los Angeles") is None
    assert str(Moment(1939, 7, 19)) == "July 19, 1939" and str(Moment(1997)) == "1997"


def test_earlier_compares_only_as_far_as_both_are_written():
    assert earlier(Moment(1997), Moment(2004)) == 0 and earlier(Moment(2004), Moment(1997)) == 1
    assert earlier(Moment(1960, 1, 7), Moment(1960, 9, 14)) == 0
    assert earlier(Moment(1966, 8, 14), Moment(1966, 8, 2)) == 1
    assert earlier(Moment(1997), Moment(1997, 3)) is None  # the same year, one without a month
    assert earlier(Moment(1997, 3, 1), Moment(1997, 3, 1)) is None


def test_order_check_takes_temporal_comparisons_whose_look_ups_ask_a_date():
    spec = order_check("Which band was formed first, The Exies or Circus Diablo?")
    assert spec.entities == ("The Exies", "Circus Diablo") and not spec.latest
    assert spec.lookups == ("When was The Exies formed?", "When was Circus Diablo formed?")
    assert spec.predicate == "was formed first"
    younger = order_check("Between Jessica Capshaw and Hilarie Burton, who is younger?")
    assert younger.latest and younger.lookups == ("When was Jessica Capshaw born?", "When was Hilarie Burton born?")
    assert order_check("Was Strange Mercy or The Best Damn Thing released later?").predicate == "was released later"
    assert order_check("Who is older, Sid Haig or Vic Darchinyan?").predicate == "is older"
    for other in ("Which plant is larger, the Pterocarya or the Cotula?",  # not a date
                  "What author was more popular in the 70's, Richard Wright or Richard Bach?",
                  "Which singer is American, Mark King or Nick Hexum?",
                  "Are King Vidor and Howard Hawks both American directors?",
                  "When was The Exies formed?",
                  "阿贝歇和拉伊哪个更早建立？"):
        assert order_check(other) is None, other
    assert choice_check("Which band was formed first, The Exies or Circus Diablo?") is None
    plan = template_plan("Which band was formed first, The Exies or Circus Diablo?")
    assert [t.kind for t in plan.plan.sub_tasks] == ["retrieve", "retrieve", "check"]
    assert [t.description for t in plan.plan.sub_tasks[:2]] == list(spec.lookups)


def own_date(q: str, text: str) -> dict:
    """A look-up model that answers "When was X <verb>?" with X's own sentence, found in the blocks
    by the case data; any other prompt fails the test: the check decides without a model call."""
    m = (re.match(r"When was (.+) (?:formed|born|founded)\?$", q)
         or re.match(r"When did the \w+ of (.+) happen or begin\?$", q))
    if not m:
        raise AssertionError(f"no model call expected for {q!r}: the check decides without one")
    n = block_with(text, m.group(1))
    sentence = re.search(rf"{re.escape(m.group(1))} [^.]*\.", text).group(0)
    return {"answer": f"{sentence[:-1]} [{n}].", "citations": [{"id": n, "quote": ""}], "fallback": False}


@pytest.mark.parametrize(("question", "expected", "first_source"), [
    ("Which band was formed first, The Exies or Circus Diablo?",
     "The Exies was formed first: in 1997 [1], and Circus Diablo in 2004 [2].", "exies.md"),
    ("Which band was formed later, The Exies or Circus Diablo?",
     "Circus Diablo was formed later: in 2004 [1], and The Exies in 1997 [2].", "diablo.md"),
    ("Who is older, Vic Darchinyan or Sid Haig?",
     "Sid Haig is older: on July 19, 1939 [1], and Vic Darchinyan on January 7, 1976 [2].", "haig.md"),
    # sides that are events of names: each look-up's statement names the band or the man, not the event
    ("Which came first the forming of The Exies or the birth of Sid Haig?",
     "The birth of Sid Haig came first: on July 19, 1939 [1], and the forming of The Exies in 1997 [2].", "haig.md"),
])
def test_the_earlier_date_decides_without_a_model_call(bands: Engine, question: str, expected: str,
                                                        first_source: str):
    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=own_date)
    resp = ask(bands, brain, question, mode="R3", templates=True)
    assert not resp.fallback and resp.answer == expected
    assert_verified(resp)
    assert brain.kinds.count("answer") == 2 and "synthesize" not in brain.kinds  # the look-ups only
    assert resp.citations[0].source.rsplit("/", 1)[-1] == first_source
    conclusion = resp.claims[-1]
    assert conclusion.method == "check: order" and "from the look-ups' verified statements" in conclusion.reason


def test_a_side_with_two_dates_leaves_it_to_the_reasoning_step(bands: Engine):
    # Seer's statement names its founding and its re-forming: which one the question means is not
    # the system's to guess, so the model answers from both look-ups, verified as ever
    def answer(q: str, text: str) -> dict:
        if q.startswith("When was "):
            return own_date(q, text)
        n = block_with(text, "The Exies were formed in 1997")
        return {"answer": f"The Exies were formed in 1997 [{n}].", "citations": [{"id": n, "quote": ""}],
                "fallback": False}

    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=answer)
    resp = ask(bands, brain, "Which band was founded first, Seer or The Exies?", mode="R3", templates=True)
    assert brain.kinds.count("answer") == 3  # two look-ups and the reasoning step
    assert not resp.fallback and "The Exies were formed in 1997" in resp.answer
    assert_verified(resp)
    assert resp.claims[-1].method != "check: order"
    t = bands.trace(resp.trace_id)
    nodes = {n["id"]: n for n in t["plan"]["nodes"]}
    assert nodes[3]["kind"] == "check" and "ORDER_UNDECIDED" in nodes[3]["events"]
