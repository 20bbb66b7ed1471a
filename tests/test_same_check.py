""""Are A and B in the same X?" decided by the system (control/same_value.py, plan_templates.same_check,
the plan's check in orchestrator/plan_tasks.py), routed to R3 even where one search covers it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cograg.answer.answerer import AnswerConfig
from cograg.control.plan_templates import same_check, template_plan
from cograg.control.router import Router
from cograg.control.routing_rules import load_rules
from cograg.control.same_value import named_value, same_value
from cograg.models.judge import LexicalJudge
from tests.test_answer import make_engine
from tests.test_control_flow import Brain, ask, assert_verified
from tests.test_plan_templates import own_sentence
from tests.test_router import result

CITIES = {
    "nantong.md": "# Nantong\n\nNantong is a prefecture-level city in Jiangsu Province, China.\n",
    "jingdezhen.md": "# Jingdezhen\n\nJingdezhen is a prefecture-level city in northeastern Jiangxi province, China.\n",
    "suzhou.md": "# Suzhou\n\nSuzhou is a major city in the south of Jiangsu Province.\n",
    "lanxi.md": "# Lanxi\n\nLanxi is a city on the Qiantang River, known for its ham.\n",
}


@pytest.mark.parametrize(("statement", "noun", "entity", "value"), [
    ("Nantong is a prefecture-level city in Jiangsu Province, China.", "province", "Nantong", "Jiangsu"),
    ("Jingdezhen is a prefecture-level city in northeastern Jiangxi province, China.", "province", "Jingdezhen",
     "Jiangxi"),
    ("Alphaville is a German synthpop/new wave band which gained popularity in the 1980s.", "band", "Marian Gold",
     "Alphaville"),
    ("She is best known as the main vocalist of the South Korean girl group Apink.", "band", "Jung Eun-ji", "Apink"),
    ("Watertown International Airport is a county-owned airport in the state of New York.", "state",
     "Watertown International Airport", "New York"),
    # no name tied to the noun, the plural of a name, the entity itself, two different names: no value
    ("Lanxi is a city on the Qiantang River, known for its ham.", "province", "Lanxi", None),
    ("Alexandria International Airport is a public airport in Alexandria, Louisiana, United States.", "state",
     "Alexandria International Airport", None),
    ("The Exies are a band from Los Angeles.", "band", "The Exies", None),
    ("Kai played in the band Alphaville and later in the band Propaganda.", "band", "Kai", None),
])
def test_the_value_is_the_name_the_statement_ties_to_the_noun(statement, noun, entity, value):
    assert named_value(statement, noun, entity) == value


def test_values_compare_as_names():
    assert same_value("Jiangsu", "jiangsu ") and not same_value("Jiangsu", "Jiangxi")


def test_same_check_takes_the_yes_no_same_x_shape_in_english_only():
    spec = same_check("Are Nantong and Jingdezhen situated in the same province ?")
    assert spec is not None and spec.entities == ("Nantong", "Jingdezhen") and spec.noun == "province"
    assert spec.lookups == ("What is the province of Nantong?", "What is the province of Jingdezhen?")
    assert same_check("Are Watertown International Airport and Alexandria International Airport both airports "
                      "in the same state?").noun == "state"
    for other in ("Are King Vidor and Howard Hawks both American directors?",  # a category: category_check
                  "Do Nantong and Jingdezhen have the same mayor?",  # not a be-verb
                  "Were Ada Lovelace and Charles Babbage of the same nationality?",  # no name as its value
                  "南通和景德镇是否属于同一个省？",
                  "Is the Linden Bridge in the same town as the tram depot?"):
        assert same_check(other) is None, other
    plan = template_plan("Are Nantong and Jingdezhen situated in the same province?")
    assert [t.kind for t in plan.plan.sub_tasks] == ["retrieve", "retrieve", "check"]


# each look-up answers with its city's own sentence, found in the blocks by the case data
looks_up = own_sentence(r"What is the province of (.+)\?$", "is")


@pytest.fixture()
def cities(tmp_path: Path):
    e = make_engine(tmp_path, CITIES)
    yield e
    e.close()


@pytest.mark.parametrize(("b", "expected"), [
    ("Jingdezhen", "No, the province of Nantong is Jiangsu [1], and that of Jingdezhen is Jiangxi [2]."),
    ("Suzhou", "Yes, the province of both Nantong and Suzhou is Jiangsu [1][2]."),
])
def test_the_check_compares_the_values_of_the_verified_look_ups(cities, b: str, expected: str):
    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=looks_up)
    resp = ask(cities, brain, f"Are Nantong and {b} situated in the same province?", mode="R3", templates=True,
               judge=LexicalJudge())
    assert not resp.fallback and resp.answer == expected
    assert_verified(resp)
    assert brain.kinds.count("answer") == 2 and "synthesize" not in brain.kinds  # the look-ups only
    assert sorted(c.source.rsplit("/", 1)[-1] for c in resp.citations) == sorted(["nantong.md", f"{b.lower()}.md"])
    nodes = {n["id"]: n for n in cities.trace(resp.trace_id)["plan"]["nodes"]}
    assert nodes[3]["kind"] == "check" and nodes[3]["status"] == "done"
    assert resp.claims[-1].method == "check: same value"


def test_a_side_naming_no_province_is_a_partial_reply(cities):
    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=looks_up)
    question = "Are Nantong and Lanxi situated in the same province?"
    resp = ask(cities, brain, question, mode="R3", templates=True, judge=LexicalJudge())
    assert resp.fallback and resp.answer.endswith("Not established: " + question)
    assert "Jiangsu Province" in resp.answer and "Qiantang River" in resp.answer  # what was found is shown
    nodes = {n["id"]: n for n in cities.trace(resp.trace_id)["plan"]["nodes"]}
    assert nodes[3]["status"] == "failed" and "Lanxi: None" in nodes[3]["error"]


def test_same_x_goes_to_r3_even_where_one_search_covers_it():
    question = "Are Nantong and Jingdezhen situated in the same province?"
    texts = [CITIES["nantong.md"], CITIES["jingdezhen.md"]]
    d = Router(load_rules(), search=lambda q: result(q, texts, 0.9), floors=AnswerConfig()).route(question)
    assert d.route == "MULTI_HOP" and d.mode == "R3_DAG_PLAN"
    assert any("'same X?'" in r and "is decided by R3's check" in r for r in d.reasons)
    rules = load_rules().model_copy(update={"both_checked_in_r3": False})
    assert Router(rules, search=lambda q: result(q, texts, 0.9)).route(question).mode == "R1_ONE_SHOT_RETRIEVE"
