"""R3 plan templates (control/plan_templates.py): each question shape in English and Chinese, the
questions no template may take, the planner's entry point (template first, no model call; the LLM
planner otherwise), and template plans run end to end through the orchestrator with a scripted model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cograg.answer.contract import answer_sentences
from cograg.control.models import ControlBudget
from cograg.control.plan_templates import category_check, order_check, template_plan
from cograg.control.planner import Planner, check_grounded, validate_plan
from cograg.engine import Engine
from cograg.models.judge import JudgeVerdict, LexicalJudge
from cograg.testing import ScriptedLLM
from tests.test_control_flow import DOCS, Brain, ask, assert_verified, block_with
from tests.test_answer import make_engine

BUDGET = ControlBudget()

COMPARISONS = [
    # question, entities, the look-up of the first entity
    ("Which was released first, Blue Harbor or Red Canyon?", ("Blue Harbor", "Red Canyon"),
     "When was Blue Harbor released?"),
    ("Who is older, Sid Haig or Vic Darchinyan?", ("Sid Haig", "Vic Darchinyan"), "When was Sid Haig born?"),
    ("Which band was formed first The Exies or Circus Diablo ?", ("The Exies", "Circus Diablo"),
     "When was The Exies formed?"),
    ("Are Christopher Nolan and Sathish Kalathil both film directors?", ("Christopher Nolan", "Sathish Kalathil"),
     "Who or what is Christopher Nolan?"),
    ("Have Sid Haig and Vic Darchinyan both won titles?", ("Sid Haig", "Vic Darchinyan"), "Has Sid Haig won titles?"),
    ("Were Ada Lovelace and Charles Babbage of the same nationality?", ("Ada Lovelace", "Charles Babbage"),
     "What is the nationality of Ada Lovelace?"),
    ("Between Iain Banks and Irwin Shaw, which writer has had a more diverse career?", ("Iain Banks", "Irwin Shaw"),
     "What are the facts about Iain Banks relevant to: which writer has had a more diverse career?"),
    ("Which plant is larger, the Pterocarya or the Cotula?", ("the Pterocarya", "the Cotula"),
     "How large is the Pterocarya?"),
    ("What do E. B. White and Dan Masterson have in common?", ("E. B. White", "Dan Masterson"),
     "Who or what is E. B. White, and what is E. B. White known for?"),
    ("红楼梦和西游记哪个更早？", ("红楼梦", "西游记"), "红楼梦是什么时候出现的？"),
    ("银雾和龙井43哪个更早育成？", ("银雾", "龙井43"), "银雾是什么时候育成的？"),
    ("鲁迅与老舍是否都是作家？", ("鲁迅", "老舍"), "鲁迅是谁或是什么？"),
    ("鲁迅与老舍是否都获得过文学奖？", ("鲁迅", "老舍"), "鲁迅获得过文学奖吗？"),
    ("鲁迅还是老舍更早出生？", ("鲁迅", "老舍"), "鲁迅是哪一年出生的？"),
    ("哪个更早成立，清华大学还是北京大学？", ("清华大学", "北京大学"), "清华大学是什么时候成立的？"),
    ("南通和景德镇是否属于同一个省份？", ("南通", "景德镇"), "南通属于哪个省份？"),
]

BRIDGES = [
    # question, the first look-up
    ("Who directed the film that was shot in Wilmington, North Carolina in 1986",
     "Which film was shot in Wilmington, North Carolina in 1986?"),
    ("Who directed the film in which Jung Joon-young made his big screen debut?",
     "Which film is the one in which Jung Joon-young made his big screen debut?"),
    ("Who is the father of the director of Titanic?", "Who is the director of Titanic?"),
    ("When was the author of The Hobbit born?", "Who is the author of The Hobbit?"),
    ("《红楼梦》的作者是哪国人？", "《红楼梦》的作者是谁？"),
    ("林登桥的设计者出生于哪一年？", "林登桥的设计者是谁？"),
]

NO_TEMPLATE = [
    "When did the Linden Bridge open?",
    "Who wrote Hamlet?",
    "Which of the two tornado outbreaks killed the most people?",
    "Compare A and B in the Linden report",
    "In what year was the man that resigned as the president of Israel before the election born?",
    "Summarise the report on tea and coffee.",
    "What is the difference between BM25 and dense retrieval?",
    "红楼梦的作者是谁？",
    "银雾是什么时候育成的？",
    "总结一下这份报告。",
]


@pytest.mark.parametrize(("question", "entities", "first"), COMPARISONS)
def test_comparison_template_looks_up_each_entity_then_compares(question, entities, first):
    tp = template_plan(question)
    assert tp is not None and tp.name == "comparison" and tp.entities == entities
    one, two, compare = validate_plan(tp.plan, BUDGET).sub_tasks
    check_grounded(tp.plan, question)
    assert one.description == first
    assert entities[1] in two.description and entities[0] not in two.description
    # "are both X?" with a category X is decided by a check of each side, every other shape by reasoning
    # "which was formed first, A or B?" by a check of the dates (tests/test_order_check.py)
    last = "check" if question in CATEGORY_QUESTIONS or order_check(question) is not None else "reason"
    assert (one.kind, two.kind, compare.kind) == ("retrieve", "retrieve", last)
    assert compare.dependencies == [1, 2] and compare.description == " ".join(question.split())


CATEGORY_QUESTIONS = {
    # question: (claim about the first entity, its negation, the conclusion when both hold)
    "Are Christopher Nolan and Sathish Kalathil both film directors?": (
        "Christopher Nolan is a film director", "Christopher Nolan is not a film director",
        "Yes, Christopher Nolan and Sathish Kalathil are both film directors"),
    "鲁迅与老舍是否都是作家？": ("鲁迅是作家", "鲁迅不是作家", "是的，鲁迅和老舍都是作家"),
}


@pytest.mark.parametrize("question", sorted(CATEGORY_QUESTIONS))
def test_a_both_category_question_composes_each_side_s_claim_and_its_negation(question):
    claim, negation, yes = CATEGORY_QUESTIONS[question]
    spec = category_check(question)
    assert spec is not None and spec.claims[0] == claim and spec.negations[0] == negation and spec.yes == yes


def test_were_both_uses_the_past_and_other_verbs_are_no_check():
    spec = category_check("Were King Vidor and Géza von Cziffra both American directors?")
    assert spec is not None and spec.claims == ("King Vidor was an American director",
                                                "Géza von Cziffra was an American director")
    assert spec.negations[1] == "Géza von Cziffra was not an American director"
    assert spec.yes == "Yes, King Vidor and Géza von Cziffra were both American directors"
    for question in ("Have Sid Haig and Vic Darchinyan both won titles?", "鲁迅与老舍是否都获得过文学奖？",
                     "Which opened first, the Linden Bridge or the Rhine Bridge?",
                     # a relation between the two, not what each one is: the `same` shape's reasoning step
                     "Are Watertown International Airport and Alexandria International Airport both airports "
                     "in the same state ?", "Are A and B both located in the same city?", "南通和景德镇是否都是同一个省份的城市？"):
        assert category_check(question) is None


@pytest.mark.parametrize(("question", "first"), BRIDGES)
def test_bridge_template_looks_up_the_hidden_entity_then_the_question(question, first):
    tp = template_plan(question)
    assert tp is not None and tp.name == "bridge"
    hop1, hop2 = validate_plan(tp.plan, BUDGET).sub_tasks
    check_grounded(tp.plan, question)
    assert hop1.description == first and hop1.dependencies == []
    assert hop2.kind == "retrieve" and hop2.dependencies == [1] and hop2.description == " ".join(question.split())


@pytest.mark.parametrize("question", NO_TEMPLATE)
def test_questions_of_no_known_shape_get_no_template(question):
    assert template_plan(question) is None


def test_planner_uses_a_template_without_a_model_call_and_the_model_otherwise():
    plan = {"sub_tasks": [{"id": 1, "description": "Linden Bridge opening", "dependencies": []}]}
    llm = ScriptedLLM([json.dumps(plan)])
    planner = Planner(llm, BUDGET, timeout_s=10)
    templated = planner.plan("Which opened first, the Linden Bridge or the Rhine Bridge?")
    assert templated.template == "comparison" and templated.attempts == 0 and llm.calls == []
    assert [t.description for t in templated.plan.sub_tasks][:2] == ["When was the Linden Bridge opened?",
                                                                     "When was the Rhine Bridge opened?"]
    modelled = planner.plan("Everything about the Linden Bridge in the report")
    assert modelled.template is None and modelled.attempts == 1 and len(llm.calls) == 1
    # templates off: the model plans the comparison too
    off = Planner(ScriptedLLM([json.dumps(plan)]), BUDGET, timeout_s=10, templates=False)
    assert off.plan("Which opened first, the Linden Bridge or the Rhine Bridge?").template is None


def test_a_budget_too_small_for_the_template_leaves_the_question_to_the_model():
    llm = ScriptedLLM([json.dumps({"sub_tasks": [{"id": 1, "description": "Linden Bridge", "dependencies": []}]})])
    out = Planner(llm, ControlBudget(max_nodes=2), timeout_s=10).plan(
        "Which opened first, the Linden Bridge or the Rhine Bridge?")
    assert out.template is None and len(llm.calls) == 1


# --------------------------------------------------------------------------- whole turns


@pytest.fixture()
def eng(tmp_path: Path):
    docs = DOCS | {"marrick.md": "# Tobias Marrick\n\nTobias Marrick was born in Leeds in 1770.\n"}
    e = make_engine(tmp_path, docs)
    yield e
    e.close()


def compare_answer(q: str, text: str) -> dict:
    """The comparison step answers from both look-ups' sources (the case data decides the blocks)."""
    from tests.test_control_flow import default_answer

    if "first" not in q.lower():
        return default_answer(q, text)
    a, b = block_with(text, "opened in 1811"), block_with(text, "1870")
    return {"answer": f"The Linden Bridge opened in 1811 [{a}]. The Rhine Bridge opened in 1870 [{b}].",
            "citations": [{"id": a, "quote": ""}, {"id": b, "quote": ""}], "fallback": False}


def test_comparison_template_runs_end_to_end_with_no_planning_call(eng: Engine):
    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=compare_answer)
    resp = ask(eng, brain, "Which opened first, the Linden Bridge or the Rhine Bridge?", mode="R3", templates=True)
    assert not resp.fallback and resp.mode == "R3_DAG_PLAN" and "plan" not in brain.kinds
    assert "1811" in resp.answer and "1870" in resp.answer
    assert_verified(resp)
    # the comparison step asked the user's question over both statements: its verified answer is
    # the turn's answer, with no synthesis call
    assert "synthesize" not in brain.kinds
    t = eng.trace(resp.trace_id)
    assert t["plan"]["outcome"]["template"] == "comparison" and t["plan"]["outcome"]["attempts"] == 0
    assert resp.explain["plan_template"] == "comparison"
    ready = next(e for e in t["events"] if e["name"] == "PLAN_READY")
    assert ready["data"]["template"] == "comparison"
    assert not any(c["purpose"] == "plan" for c in t["model_calls"])
    assert "plan_decompose" not in t["prompt_versions"]
    nodes = {n["id"]: n for n in t["plan"]["nodes"]}
    assert [nodes[i]["status"] for i in (1, 2, 3)] == ["done", "done", "done"]
    assert "1811" in nodes[1]["statement"] and "1870" in nodes[2]["statement"]
    assert nodes[3]["deps"] == [1, 2]  # the comparison step reasons over both statements


def test_a_conclusion_citing_one_side_comes_with_the_other_side_s_verified_statement(eng: Engine):
    """The comparison step's verified answer cites only the Linden Bridge's source: the Rhine
    Bridge look-up's verified statement (and its source) is delivered before it, with no extra
    model call, so every side of the comparison is cited in the answer."""
    def one_sided(q: str, text: str) -> dict:
        from tests.test_control_flow import default_answer

        if q.startswith("How long is"):  # the look-ups
            return default_answer(q, text)
        a = block_with(text, "opened in 1811")
        return {"answer": f"The Linden Bridge opened first, in 1811 [{a}].", "citations": [{"id": a, "quote": ""}],
                "fallback": False}

    # not "which opened first?": the order check decides that from both sides' dates, citing both
    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=one_sided)
    resp = ask(eng, brain, "Which is longer, the Linden Bridge or the Rhine Bridge?", mode="R3", templates=True)
    assert not resp.fallback and "synthesize" not in brain.kinds
    assert_verified(resp)
    sentences = answer_sentences(resp.answer)
    assert "1870" in sentences[0] and sentences[-1].startswith("The Linden Bridge opened first")
    by_id = {c.id: c.source.rsplit("/", 1)[-1] for c in resp.citations}
    assert [by_id[m] for m in re.findall(r"\[(\d+)\]", sentences[0])] == ["rhine.md"]
    assert [by_id[m] for m in re.findall(r"\[(\d+)\]", sentences[-1])] == ["linden.md"]
    assert any("tasks [2]" in n for n in resp.notes)


def test_bridge_template_second_look_up_searches_with_the_first_answer(eng: Engine):
    def answer(q: str, text: str) -> dict:
        if q == "Who is the designer of the Linden Bridge?":
            n = block_with(text, "designed by Tobias Marrick")
            return {"answer": f"The Linden Bridge was designed by Tobias Marrick [{n}].",
                    "citations": [{"id": n, "quote": ""}], "fallback": False}
        # the second hop sees the first one's statement as an established fact
        n = block_with(text, "born in Leeds")
        if "<established_facts>" not in text or "Tobias Marrick" not in text.split("<retrieved_documents>")[0] or n is None:
            return {"answer": "", "citations": [], "fallback": True}
        return {"answer": f"Tobias Marrick was born in Leeds in 1770 [{n}].", "citations": [{"id": n, "quote": ""}],
                "fallback": False}

    def synth(text: str) -> dict:
        return {"answer": "The Linden Bridge was designed by Tobias Marrick [cite: task, 1]. "
                          "Tobias Marrick was born in Leeds in 1770 [cite: task, 2]."}

    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=answer, synth=synth)
    question = "Where was the designer of the Linden Bridge born?"
    resp = ask(eng, brain, question, mode="R3", templates=True)
    assert not resp.fallback and "Leeds" in resp.answer
    assert_verified(resp)
    t = eng.trace(resp.trace_id)
    assert t["plan"]["outcome"]["template"] == "bridge"
    nodes = {n["id"]: n for n in t["plan"]["nodes"]}
    assert nodes[2]["deps"] == [1] and nodes[2]["status"] == "done"
    second = [s["query"] for s in t["searches"] if s["query"].startswith(question)]
    assert second and "Tobias Marrick" in second[0]
    assert sorted({c.source.rsplit("/", 1)[-1] for c in resp.citations}) == ["linden.md", "marrick.md"]


def test_a_question_of_no_known_shape_goes_to_the_llm_planner(eng: Engine):
    plan = {"sub_tasks": [{"id": 1, "description": "When did the Linden Bridge open?", "dependencies": []},
                          {"id": 2, "description": "Who designed the Linden Bridge?", "dependencies": []}]}
    brain = Brain(plan=plan)
    resp = ask(eng, brain, "Tell me the history of the Linden Bridge", mode="R3", templates=True)
    t = eng.trace(resp.trace_id)
    assert brain.kinds.count("plan") == 1 and t["plan"]["outcome"]["template"] is None
    assert any(c["purpose"] == "plan" for c in t["model_calls"])
    assert re.match(r"plan_decompose@\d+", t["prompt_versions"]["plan_decompose"])


DIRECTORS = {
    "vidor.md": "# King Vidor\n\nKing Vidor was an American film director and producer.\n",
    "hawks.md": "# Howard Hawks\n\nHoward Hawks was an American film director and screenwriter.\n",
    "cziffra.md": "# Géza von Cziffra\n\nGéza von Cziffra was a Hungarian film director and screenwriter.\n",
    "blom.md": "# Ada Blom\n\nAda Blom was a film director of silent comedies.\n",
}


class NationalityJudge(LexicalJudge):
    """Decides from the case's own words: a claim giving a person a nationality is SUPPORTED by a
    passage giving the same one, CONTRADICTED by one giving another, UNRELATED by one giving none."""

    NATIONALITIES = ("American", "Hungarian", "British")

    def judge(self, claim: str, passage: str, question: str | None = None) -> JudgeVerdict:
        said = [n for n in self.NATIONALITIES if n in claim]
        given = [n for n in self.NATIONALITIES if n in passage]
        if not said:
            return super().judge(claim, passage, question)
        if not given:
            return JudgeVerdict(verdict="UNRELATED", reason="the passage gives no nationality")
        if set(said) & set(given):
            return JudgeVerdict(verdict="SUPPORTED" if " not " not in claim else "CONTRADICTED", reason="same")
        return JudgeVerdict(verdict="CONTRADICTED" if " not " not in claim else "SUPPORTED", reason="another")


def own_sentence(asked: str, verb: str):
    """A look-up model that answers with its entity's own sentence ("<entity> <verb> …."), found in
    the blocks by the case data; `asked` is the look-up's pattern, its group the entity. Any other
    prompt fails the test: the check decides without a model call."""
    def answer(q: str, text: str) -> dict:
        m = re.match(asked, q)
        if not m:
            raise AssertionError(f"no model call expected for {q!r}: the check decides without one")
        n = block_with(text, f"{m.group(1)} {verb}")
        if n is None:
            return {"answer": "", "citations": [], "fallback": True}
        sentence = re.search(rf"{re.escape(m.group(1))} {verb} [^.]*\.", text).group(0)
        return {"answer": f"{sentence[:-1]} [{n}].", "citations": [{"id": n, "quote": ""}], "fallback": False}
    return answer


who_is = own_sentence(r"Who or what is (.+)\?$", "was")


@pytest.fixture()
def directors(tmp_path: Path):
    e = make_engine(tmp_path, DIRECTORS)
    yield e
    e.close()


@pytest.mark.parametrize(("b", "expected"), [
    ("Howard Hawks", "Yes, King Vidor and Howard Hawks are both American directors [1][2]."),
    ("Géza von Cziffra", "King Vidor was an American film director and producer [1]. "
                         "No, Géza von Cziffra is not an American director [2]."),
])
def test_both_category_question_is_decided_by_each_side_s_verdict(directors: Engine, b: str, expected: str):
    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=who_is)
    resp = ask(directors, brain, f"Are King Vidor and {b} both American directors?", mode="R3", templates=True,
               judge=NationalityJudge())
    assert not resp.fallback and resp.answer == expected
    assert_verified(resp)
    assert brain.kinds.count("answer") == 2 and "synthesize" not in brain.kinds  # the two look-ups only
    t = directors.trace(resp.trace_id)
    nodes = {n["id"]: n for n in t["plan"]["nodes"]}
    assert nodes[3]["kind"] == "check" and nodes[3]["status"] == "done"
    cited = {c.id: c.source.rsplit("/", 1)[-1] for c in resp.citations}
    assert sorted(cited.values()) == sorted(["vidor.md", {"Howard Hawks": "hawks.md"}.get(b, "cziffra.md")])
    conclusion = resp.claims[-1]
    assert conclusion.method.startswith("check:") and "CONTRADICTED" in conclusion.reason if "No" in expected \
        else "CONTRADICTED" not in conclusion.reason


def test_a_side_whose_sources_do_not_say_is_a_partial_reply(directors: Engine):
    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=who_is)
    question = "Are King Vidor and Ada Blom both American directors?"
    resp = ask(directors, brain, question, mode="R3", templates=True, judge=NationalityJudge())
    assert resp.fallback and resp.answer.endswith("Not established: " + question)
    assert "King Vidor was an American film director and producer [1]." in resp.answer
    assert "Ada Blom was a film director of silent comedies" in resp.answer  # what was found is shown
    nodes = {n["id"]: n for n in directors.trace(resp.trace_id)["plan"]["nodes"]}
    assert nodes[3]["status"] == "failed" and "UNRELATED" in nodes[3]["error"]


class ChineseRoleJudge(LexicalJudge):
    """From the case's own words: "甲是乙" is SUPPORTED by a passage saying 甲是乙, CONTRADICTED by
    one saying 甲是 something else, UNRELATED otherwise."""

    def judge(self, claim: str, passage: str, question: str | None = None) -> JudgeVerdict:
        m = re.fullmatch(r"(.+?)是(.+?)(?:\s*\[\d+\])*[。.]?", claim.strip())
        if not m:
            return super().judge(claim, passage, question)
        said = re.search(rf"{re.escape(m.group(1))}是([^。]+)", passage)
        if said is None:
            return JudgeVerdict(verdict="UNRELATED", reason="the passage does not say what it is")
        return JudgeVerdict(verdict="SUPPORTED" if said.group(1).startswith(m.group(2)) else "CONTRADICTED",
                            reason=said.group(0))


def test_a_chinese_both_question_says_no_when_one_side_is_something_else(tmp_path: Path):
    e = make_engine(tmp_path, {"lu.md": "# 鲁迅\n\n鲁迅是作家，代表作有《呐喊》。\n",
                               "mei.md": "# 梅兰芳\n\n梅兰芳是京剧表演艺术家。\n"})

    def who(q: str, text: str) -> dict:
        name = q.removesuffix("是谁或是什么？")
        n = block_with(text, f"{name}是")
        sentence = re.search(rf"{name}是[^，。]+", text).group(0)
        return {"answer": f"{sentence}[{n}]。", "citations": [{"id": n, "quote": ""}], "fallback": False}

    try:
        brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=who)
        resp = ask(e, brain, "鲁迅与梅兰芳是否都是作家？", mode="R3", templates=True, judge=ChineseRoleJudge())
        assert not resp.fallback and resp.answer.endswith("不，梅兰芳不是作家[2]。"), resp.answer
        assert brain.kinds.count("answer") == 2
    finally:
        e.close()


def only(found: str):
    """Look-ups that find only `found` (the other look-up's model answer cites nothing)."""
    def answer(q: str, text: str) -> dict:
        if found not in q:
            return {"answer": "", "citations": [], "fallback": True}
        return who_is(q, text)
    return answer


def test_one_side_that_is_not_an_x_says_no_though_the_other_look_up_failed(directors: Engine):
    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=only("Cziffra"))
    resp = ask(directors, brain, "Are King Vidor and Géza von Cziffra both American directors?", mode="R3",
               templates=True, judge=NationalityJudge())
    assert not resp.fallback and resp.answer == "No, Géza von Cziffra is not an American director [1]."
    assert [c.source.rsplit("/", 1)[-1] for c in resp.citations] == ["cziffra.md"]
    t = directors.trace(resp.trace_id)
    assert t["plan"]["synthesis"]["method"] == "one_side_check"
    assert any("CONTRADICTED" == v["verdict"] for v in t["verdicts"])  # the side's own verdict is recorded


def test_one_side_that_is_an_x_never_makes_a_yes(directors: Engine):
    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=only("Hawks"))
    question = "Are King Vidor and Howard Hawks both American directors?"
    resp = ask(directors, brain, question, mode="R3", templates=True, judge=NationalityJudge())
    assert resp.fallback and "Yes" not in resp.answer
    assert resp.answer.endswith("Not established: Who or what is King Vidor?")


def test_no_one_side_check_after_the_plan_s_budget_is_spent(directors: Engine):
    """The Vidor look-up hangs past the turn's wall budget: the plan stops there, and no judge
    call decides the check from the Cziffra side afterwards."""
    brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=who_is,
                  hang_on="King Vidor")
    budget = ControlBudget(max_wall_s=1.0, node_timeout_s=5)
    resp = ask(directors, brain, "Are King Vidor and Géza von Cziffra both American directors?", mode="R3",
               templates=True, judge=NationalityJudge(), budget=budget)
    t = directors.trace(resp.trace_id)
    assert (t["plan"].get("report") or {}).get("status") == "budget_exceeded", t["plan"].get("report")
    assert "one_side_check" not in t["plan"] and not resp.answer.startswith("No,")


def test_the_other_side_s_statement_comes_with_a_no_when_both_sides_are_records_of_one_file(tmp_path: Path):
    """Both people are records of one JSONL file, so both look-ups cite the same document: the
    check's "No" cites B's record only, and A's verified statement, which cites another record,
    is still delivered before it (sources are compared by chunk, not by document)."""
    rows = [{"title": "King Vidor", "text": "King Vidor was an American film director and producer."},
            {"title": "Ada Blom", "text": "Ada Blom was a film director of silent comedies. " * 30},
            {"title": "Géza von Cziffra", "text": "Géza von Cziffra was a Hungarian film director and screenwriter."}]
    e = make_engine(tmp_path, {"people.jsonl": "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n"})
    try:
        brain = Brain(plan=lambda text: pytest.fail("the LLM planner must not be asked"), answer=who_is)
        resp = ask(e, brain, "Are King Vidor and Géza von Cziffra both American directors?", mode="R3",
                   templates=True, judge=NationalityJudge())
        assert not resp.fallback, resp.answer
        assert resp.answer.startswith("King Vidor was an American film director and producer ["), resp.answer
        assert resp.answer.endswith("No, Géza von Cziffra is not an American director [2].")
        assert_verified(resp)
        assert len({c.chunk_id for c in resp.citations}) == 2 and len({c.doc_id for c in resp.citations}) == 1
    finally:
        e.close()
