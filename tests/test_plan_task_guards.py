"""Guards of the plan's task runners (orchestrator/plan_tasks.py):

* a check's sides are placed by what each look-up verified (orchestrator/check_sides.py), never by the
  planner's task order: a planner that names both sides in both look-ups and lists B's first must not
  swap the values the system compares (SPEC C3, "the model proposes, the system decides");
* an abandoned attempt (node timeout, the turn stopped) makes no model call or search once its
  token is cancelled (SPEC D4, orchestrator/task_guard.py).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from cograg.answer.contract import Citation
from cograg.control.models import CancelToken, ControlBudget, SubTask, TaskResult
from cograg.engine import Engine
from cograg.models.judge import LexicalJudge
from cograg.orchestrator.plan_tasks import PlanTaskRunners
from cograg.orchestrator.turn import TurnEvidence
from cograg.testing import ScriptedLLM
from cograg.trace import Trace
from tests.test_answer import make_engine, with_models
from tests.test_choice_check import SINGERS, SingerJudge
from tests.test_control_flow import DOCS, OPEN, Brain, ask, assert_verified, block_with
from tests.test_same_check import CITIES


@pytest.fixture()
def bridges(tmp_path: Path):
    e = make_engine(tmp_path, DOCS)
    yield e
    e.close()


# ---------------------------------------------------------------- which look-up is whose side
def look_up(description: str, statement: str, id_: int = 1) -> TaskResult:
    return TaskResult(id=id_, description=description, kind="retrieve", status="done", statement=statement)


def test_a_name_is_found_as_written_case_and_a_leading_article_aside():
    from cograg.orchestrator.check_sides import names

    assert names("The Linden Bridge opened in 1811 [1].", "the Linden Bridge", "the Rhine Bridge")
    assert names("Linden Bridge opened in 1811.", "the Linden Bridge", "the Rhine Bridge")
    assert not names("The Rhine Bridge opened in 1870.", "the Linden Bridge", "the Rhine Bridge")
    assert not names("Times New Roman is a typeface.", "Time", "Nature")  # a whole word, not part of one
    assert not names("Ohio State won in 1942.", "Ohio", "Ohio State")  # part of the other side's name
    assert names("Ohio State beat a team from Ohio.", "Ohio", "Ohio State")
    assert names("南通是江苏省的地级市。", "南通", "景德镇")


def test_an_event_side_is_named_by_the_name_it_is_of():
    # "Which came first, the forming of The Dandy Warhols or the birth of Robert Young?": no
    # statement writes "the forming of The Dandy Warhols"; each is placed by the name it is of
    from cograg.orchestrator.check_sides import named_in_event, names, side_of

    assert named_in_event("the forming of The Dandy Warhols") == "The Dandy Warhols"
    assert named_in_event("the first release of 'Strange Mercy'") == "'Strange Mercy'"
    for name in ("the University of Oxford", "the Duke of York", "The Dandy Warhols", "the Rhine Bridge"):
        assert named_in_event(name) == name
    pair = ("the forming of The Dandy Warhols", "the birth of Robert Young")
    assert names("The Dandy Warhols formed in Portland in 1994 [1].", *pair)
    assert not names("Robert Young was born on 6 April 1849 [2].", *pair)
    assert side_of(pair, look_up("When did the birth of Robert Young happen or begin?",
                                 "Robert Young was born on 6 April 1849 [1]."), []) == 1
    assert side_of(pair, look_up("When did the forming of The Dandy Warhols happen or begin?",
                                 "The band formed in 1994 [1]."), ["The Dandy Warhols formed in 1994."]) == 0
    # the event's name still must not be only part of the other side's name
    assert not names("Ohio State won in 1942.", "the founding of Ohio", "the founding of Ohio State")


def test_a_look_up_is_placed_by_its_verified_statement_not_by_what_it_was_asked():
    from cograg.orchestrator.check_sides import side_of

    pair = ("the Linden Bridge", "the Rhine Bridge")
    both = "When did the Rhine Bridge open (not the Linden Bridge)?"
    assert side_of(pair, look_up(both, "The Rhine Bridge opened in 1870 [1]."), []) == 1
    assert side_of(pair, look_up(both, "The Linden Bridge opened in 1811 [1]."), []) == 0
    # a statement naming both cannot say whose its date is
    assert side_of(pair, look_up(both, "The Rhine Bridge opened in 1870, after the Linden Bridge [1]."), []) is None
    # a statement naming neither is placed by the chunks it cites, when they name one side
    assert side_of(pair, look_up(both, "It opened in 1870 [1]."), ["The Rhine Bridge opened in 1870."]) == 1
    assert side_of(pair, look_up(both, "It opened in 1870 [1]."), ["The Rhine Bridge and the Linden Bridge ..."]) is None
    assert side_of(pair, look_up(both, "It opened in 1870 [1]."), []) is None
    # asked about one side, verified about the other: no side of either
    assert side_of(pair, look_up("When did the Rhine Bridge open?", "The Linden Bridge opened in 1811 [1]."),
                   []) is None


def test_sides_never_fall_back_to_plan_order():
    from cograg.orchestrator.check_sides import sides

    pair = ("the Linden Bridge", "the Rhine Bridge")
    rhine = look_up("When did the Rhine Bridge open (not the Linden Bridge)?", "The Rhine Bridge opened in 1870.", 1)
    linden = look_up("When did the Linden Bridge open (not the Rhine Bridge)?", "The Linden Bridge opened in 1811.", 2)
    assert sides(pair, [rhine, linden], lambda d: []) == [linden, rhine]
    unplaced = look_up("When did it open?", "It opened in 1811.", 2)
    assert sides(pair, [rhine, unplaced], lambda d: []) is None
    assert sides(pair, [rhine, rhine.model_copy(update={"id": 2})], lambda d: []) is None  # two on one side
    assert sides(pair, [rhine], lambda d: []) == [None, rhine]  # the other look-up established nothing
    # the planner asked each about one bridge, the model answered each with the other's: no sides
    swapped = [look_up("When did the Rhine Bridge open?", "The Linden Bridge opened in 1811.", 1),
               look_up("When did the Linden Bridge open?", "The Rhine Bridge opened in 1870.", 2)]
    assert sides(pair, swapped, lambda d: []) is None


def both_named_plan(question: str, first: str, second: str, ask_: str) -> dict:
    """A planner's plan whose look-ups each name both sides, the second side's listed first."""
    return {"sub_tasks": [
        {"id": 1, "description": ask_.format(this=second, other=first), "dependencies": []},
        {"id": 2, "description": ask_.format(this=first, other=second), "dependencies": []},
        {"id": 3, "description": question, "dependencies": [1, 2], "type": "check"}]}


def own_fact(q: str, text: str) -> dict:
    """A look-up model that answers "… the <X> (not the <Y>)?" with X's own sentence from the blocks."""
    subject = re.match(r"(?:When did|What is the province of|Who or what is) (?:the )?(.+?) (?:open )?\(not", q).group(1)
    n = block_with(text, subject)
    block = re.search(rf'<document id="{n}"[^>]*>\n(.*?)\n</document>', text, re.S).group(1)
    sentence = re.search(rf"(?:The )?{re.escape(subject)} [^.]*\.", block).group(0)
    return {"answer": f"{sentence[:-1]} [{n}].", "citations": [{"id": n, "quote": ""}], "fallback": False}


def test_an_order_check_over_look_ups_listed_the_other_way_round_gives_each_bridge_its_own_date(bridges: Engine):
    q = "Which bridge opened first, the Linden Bridge or the Rhine Bridge?"
    plan = both_named_plan(q, "Linden Bridge", "Rhine Bridge", "When did the {this} open (not the {other})?")
    resp = ask(bridges, Brain(plan=plan, answer=own_fact), q, mode="R3")
    assert not resp.fallback
    assert resp.answer == "The Linden Bridge opened first: in 1811 [1], and the Rhine Bridge in 1870 [2]."
    assert [c.source.rsplit("/", 1)[-1] for c in resp.citations] == ["linden.md", "rhine.md"]
    assert_verified(resp)
    assert resp.claims[-1].method == "check: order"


def test_a_same_check_over_look_ups_listed_the_other_way_round_gives_each_city_its_own_province(tmp_path: Path):
    q = "Are Nantong and Jingdezhen situated in the same province?"
    plan = both_named_plan(q, "Nantong", "Jingdezhen", "What is the province of {this} (not {other})?")
    with make_engine(tmp_path, CITIES) as eng:
        resp = ask(eng, Brain(plan=plan, answer=own_fact), q, mode="R3", judge=LexicalJudge())
    assert resp.answer == "No, the province of Nantong is Jiangsu [1], and that of Jingdezhen is Jiangxi [2]."
    assert [c.source.rsplit("/", 1)[-1] for c in resp.citations] == ["nantong.md", "jingdezhen.md"]


def test_a_choice_check_over_look_ups_listed_the_other_way_round_verifies_each_claim_against_its_own_side(
        tmp_path: Path):
    q = "Which singer is American, Mark King or Nick Hexum?"
    plan = both_named_plan(q, "Mark King", "Nick Hexum", "Who or what is {this} (not {other})?")

    def answer(q_: str, text: str) -> dict:
        if "Hexum (not" in q_:
            n = block_with(text, "Nick")
            return {"answer": f"Nick Hexum is an American singer [{n}].", "citations": [{"id": n, "quote": ""}],
                    "fallback": False}
        return own_fact(q_, text)

    with make_engine(tmp_path, SINGERS) as eng:
        resp = ask(eng, Brain(plan=plan, answer=answer), q, mode="R3", judge=SingerJudge())
    assert not resp.fallback and "Mark King is American" not in resp.answer
    assert resp.answer.endswith('Nicholas Lofton "Nick" Hexum is American [2].')
    assert resp.claims[-1].method == "check: choice"


# ---------------------------------------------------------------- abandoned attempts stop
UNCITED = '{"answer": "The Linden Bridge is old.", "citations": [], "fallback": false}'


def runners(bridges: Engine, llm: ScriptedLLM, cancel: CancelToken | None = None) -> PlanTaskRunners:
    eng = with_models(bridges, llm=llm, judge=LexicalJudge())
    q = "When did the Linden Bridge open?"
    turn = {"cancel": cancel} if cancel is not None else {}  # the turn's stop, where the caller passes it
    return PlanTaskRunners(question=q, answerer=eng.answerer(OPEN, save_traces=False), llm=llm, judge=LexicalJudge(),
                           trace=Trace(question=q), evidence=TurnEvidence(), llm_timeout_s=5.0, **turn)


def task(kind: str) -> SubTask:
    asked = ("Which bridge opened first, the Linden Bridge or the Rhine Bridge?" if kind == "check"
             else "When did the Linden Bridge open?")
    return SubTask(id=1, description=asked, dependencies=[], type=kind)


@pytest.mark.parametrize("kind", ["retrieve", "rewrite", "reason", "check"])
def test_a_cancelled_attempt_makes_no_model_call_and_no_search(bridges: Engine, kind: str):
    llm = ScriptedLLM([UNCITED] * 10)
    tasks = runners(bridges, llm)
    searched: list[str] = []
    search = tasks.answerer.search
    tasks.answerer.search = lambda q: searched.append(q) or search(q)
    token = CancelToken()
    token.cancel("node timeout")
    hit = next(h for h in bridges.retrieve("Linden Bridge opened 1811", k=4).hits if "1811" in h.text)
    tasks.evidence.hits[hit.chunk_id] = hit  # the fact's chunk, as its look-up saw it
    cited = Citation(id="1", doc_id=hit.doc_id, chunk_id=hit.chunk_id, quote="", source="linden.md", score=1.0)
    fact = TaskResult(id=9, description="When did the Linden Bridge open?", kind="retrieve", status="done",
                      statement="The Linden Bridge opened in 1811 [1].", citations=[cited])
    result = getattr(tasks, kind)(task(kind), [fact], token)
    assert llm.calls == [] and searched == []
    assert result.status == "cancelled" and "node timeout" in (result.error or "")


def test_an_attempt_cancelled_during_its_model_call_makes_no_further_call(bridges: Engine):
    token = CancelToken()

    def uncited(messages) -> str:  # the turn is abandoned while the model writes its first draft
        token.cancel("node timeout")
        return UNCITED

    llm = ScriptedLLM([uncited] * 10)
    result = runners(bridges, llm).retrieve(task("retrieve"), [], token)
    assert len(llm.calls) == 1  # no regeneration of the uncited draft after the cancel
    assert result.status != "done"


def test_the_turn_s_stop_ends_an_attempt_before_the_executor_passes_it_on(bridges: Engine):
    stop = CancelToken()

    def uncited(messages) -> str:
        stop.cancel("user pressed stop")
        return UNCITED

    llm = ScriptedLLM([uncited] * 10)
    runners(bridges, llm, cancel=stop).retrieve(task("retrieve"), [], CancelToken())
    assert len(llm.calls) == 1


def quiet(timeout_s: float = 5.0) -> None:
    """Wait until the plan's attempt threads, abandoned ones included, have ended."""
    end = time.perf_counter() + timeout_s
    for t in [t for t in threading.enumerate() if t.name.startswith("cograg-task-")]:
        t.join(max(0.0, end - time.perf_counter()))


CHAIN = {"sub_tasks": [
    {"id": 1, "description": "When did the Linden Bridge open?", "dependencies": []},
    {"id": 2, "description": "Which bridge opened first, the Linden Bridge or the Rhine Bridge?",
     "dependencies": [1]}]}


def test_attempts_abandoned_by_a_node_timeout_stop_calling_the_model(bridges: Engine):
    calls: list[str] = []

    def slow(text: str) -> None:
        if "<retrieved_documents>" in text and threading.current_thread().name.startswith("cograg-task-"):
            calls.append(threading.current_thread().name)
            time.sleep(0.6)  # past the node timeout: the executor abandons the attempt

    brain = Brain(plan=CHAIN, on_call=slow, answer=lambda q, text: {"answer": "The Linden Bridge is old.",
                                                                     "citations": [], "fallback": False})
    resp = ask(bridges, brain, CHAIN["sub_tasks"][1]["description"], mode="R3",
               budget=ControlBudget(node_timeout_s=0.2, max_wall_s=30))
    quiet()
    assert resp.fallback
    # one draft per attempt of node 1 (two attempts), no regeneration once abandoned
    assert calls == ["cograg-task-1-1", "cograg-task-1-2"]


def test_a_stopped_turn_makes_no_model_call_after_the_stop(bridges: Engine):
    cancel = CancelToken()
    after_stop: list[str] = []

    def stop_during_the_draft(text: str) -> None:
        if cancel.cancelled:
            after_stop.append(text.split("\n", 1)[0][:60])
        elif "<retrieved_documents>" in text:
            cancel.cancel("user pressed stop")
            time.sleep(0.3)  # the model still writes while the turn returns

    brain = Brain(plan=CHAIN, on_call=stop_during_the_draft,
                  answer=lambda q, text: {"answer": "The Linden Bridge is old.", "citations": [], "fallback": False})
    resp = ask(bridges, brain, CHAIN["sub_tasks"][1]["description"], mode="R3", cancel=cancel)
    quiet()
    assert resp.fallback and after_stop == []
