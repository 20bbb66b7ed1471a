"""Whole turns through the orchestrator (SPEC D1–D7) with a scripted model: every mode, the
fallback chain, the loop-safety cases of the issue (grader always irrelevant, planner cycle /
50 nodes / invalid JSON, a hanging task, cancellation mid-plan) and conflicts. The real models
run the same paths in test_e2e_control.py."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest

from cograg.answer.answerer import AnswerConfig
from cograg.control.models import CancelToken, ControlBudget
from cograg.engine import Engine
from cograg.models.judge import JudgeVerdict, LexicalJudge
from cograg.models.llm import LLMOutputError
from cograg.orchestrator.events import EventBus
from cograg.orchestrator.orchestrator import TurnOptions
from cograg.testing import ScriptedLLM
from tests.test_answer import make_engine, with_models

DOCS = {
    "linden.md": "# Linden Bridge\n\nThe Linden Bridge opened in 1811. It was designed by Tobias Marrick.\n",
    "rhine.md": "# Rhine Bridge\n\nThe Rhine Bridge opened in 1870. It has twelve spans.\n",
    "tea.md": "# 茶叶研究所\n\n研究所育成了耐寒品种银雾。银雾于1978年育成。\n",
    "old_guide.md": "# Guide\n\nAccording to the old guide, the Linden Bridge opened in 1820.\n",
}
OPEN = AnswerConfig(min_evidence_cosine=-1.0, min_evidence_cosine_zh=-1.0)
FACT_FOR = {"linden": "The Linden Bridge opened in 1811.", "rhine": "The Rhine Bridge opened in 1870.",
            "older": "The Linden Bridge opened in 1811, before the Rhine Bridge."}


class Brain:
    """A scripted model that answers each prompt kind the control flow sends, by content."""

    def __init__(self, plan=None, grade=None, rewrite=None, synth=None, answer=None, hang_on: str | None = None,
                 on_call=None) -> None:
        self.plan = plan
        self.grade = grade or (lambda q, doc: {"is_relevant": True, "confidence": 0.9, "reasoning": "on topic"})
        self.rewrite = rewrite
        self.synth = synth
        self.answer = answer
        self.hang_on = hang_on
        self.on_call = on_call
        self.kinds: list[str] = []
        self.rewrites = 0
        self.route_scores = {"ambiguity": 0.0, "complexity": 1.0, "intent": "compare", "retrieval_need": 0.9,
                             "risk": 0.0}

    def __call__(self, messages) -> str:
        text = "\n".join(m.content for m in messages if m.role == "user")
        if self.on_call:
            self.on_call(text)
        if "request dispatcher" in text:
            self.kinds.append("route")
            return json.dumps(self.route_scores)
        if "<complex_user_request>" in text:
            self.kinds.append("plan")
            plan = self.plan(text) if callable(self.plan) else self.plan
            return plan if isinstance(plan, str) else json.dumps(plan)
        if "document relevance grader" in text:
            self.kinds.append("grade")
            q = re.search(r"<question>\n(.*?)\n</question>", text, re.S).group(1)
            doc = re.search(r"<document>\n(.*?)</document>", text, re.S).group(1)
            return json.dumps(self.grade(q, doc))
        if "better search query" in text:
            self.kinds.append("rewrite")
            self.rewrites += 1
            return json.dumps(self.rewrite(self.rewrites) if self.rewrite else
                              {"rewritten_query": f"bridge opening year variant {self.rewrites}",
                               "rewrite_reason": "broaden", "keywords": ["bridge"]})
        if "<intermediate_analysis_results>" in text:
            self.kinds.append("synthesize")
            return json.dumps(self.synth(text) if self.synth else {
                "answer": "The Linden Bridge opened in 1811 [cite: task, 1]. "
                          "The Rhine Bridge opened in 1870 [cite: task, 2]."})
        if "<retrieved_documents>" in text:
            self.kinds.append("answer")
            q = re.search(r"<question>\n(.*?)\n</question>", text, re.S).group(1)
            if self.hang_on and self.hang_on in q:
                time.sleep(3)
            return json.dumps(self.answer(q, text) if self.answer else default_answer(q, text))
        raise AssertionError(f"unexpected prompt: {text[:200]}")


def block_with(text: str, needle: str) -> int | None:
    for m in re.finditer(r'<document id="(\d+)"[^>]*>\n(.*?)\n</document>', text, re.S):
        if needle in m.group(2):
            return int(m.group(1))
    return None


def default_answer(q: str, text: str) -> dict:
    ql = q.lower()
    if "rhine" in ql and "linden" not in ql:
        n = block_with(text, "1870")
        return {"answer": f"The Rhine Bridge opened in 1870 [{n}].", "citations": [{"id": n, "quote": ""}],
                "fallback": False} if n else {"answer": "", "citations": [], "fallback": True}
    n = block_with(text, "opened in 1811")
    if n is None:
        return {"answer": "The documents do not say.", "citations": [], "fallback": True}
    return {"answer": f"The Linden Bridge opened in 1811 [{n}].", "citations": [{"id": n, "quote": ""}],
            "fallback": False}


def assert_verified(resp) -> None:
    """The hard guarantee of C3 for every path: each delivered sentence is a kept, SUPPORTED claim."""
    from cograg.answer.contract import answer_sentences

    if resp.fallback:
        return
    kept = {c.sentence for c in resp.claims if c.kept and c.verdict == "SUPPORTED"}
    assert kept and all(s in kept for s in answer_sentences(resp.answer)), (resp.answer, kept)


@pytest.fixture()
def eng(tmp_path: Path):
    e = make_engine(tmp_path, DOCS)  # the lexical judge
    yield e
    e.close()


def ask(eng: Engine, brain: Brain, question: str, mode: str | None = None, budget: ControlBudget | None = None,
        bus: EventBus | None = None, cancel: CancelToken | None = None, llm_router: bool = False, judge=None,
        templates: bool = False, answer: AnswerConfig = OPEN):
    # templates off: these cases test the LLM planner's path (the templates: test_plan_templates.py)
    budget = (budget or ControlBudget()).model_copy(update={"plan_templates": templates})
    opts = TurnOptions(answer=answer, budget=budget, use_llm_router=llm_router, force_mode=mode)
    parts = {"llm": ScriptedLLM([brain] * 400)} | ({"judge": judge} if judge is not None else {})
    return with_models(eng, **parts).ask(question, options=opts, bus=bus, cancel=cancel)


TWO_BRIDGES = {"sub_tasks": [
    {"id": 1, "description": "When did the Linden Bridge open?", "dependencies": []},
    {"id": 2, "description": "When did the Rhine Bridge open?", "dependencies": []},
    {"id": 3, "description": "Which of the two bridges opened first?", "dependencies": [1, 2]}]}


def test_r1_one_shot_answer_runs_through_the_state_machine(eng: Engine):
    resp = ask(eng, Brain(), "When did the Linden Bridge open?", mode="R1")
    assert not resp.fallback and resp.mode == "R1_ONE_SHOT_RETRIEVE"
    assert "1811" in resp.answer and resp.citations[0].source.endswith("linden.md")
    t = eng.trace(resp.trace_id)
    assert t["states"] == ["IDLE", "ROUTING", "RETRIEVING", "DRAFTING", "VERIFYING", "DONE"]
    assert t["outcome"]["anomalies"] == []
    assert t["decision"]["mode"] == "R1_ONE_SHOT_RETRIEVE" and "mode forced: R1_ONE_SHOT_RETRIEVE" in t["decision"]["reasons"]
    names = [e["name"] for e in t["events"]]
    assert names[:2] == ["USER_INPUT_RECEIVED", "ROUTE_DECIDED"] and names[-1] == "ANSWER_READY"


def test_r2_passes_first_time_and_records_the_loop_state(eng: Engine):
    brain = Brain()
    resp = ask(eng, brain, "When did the Linden Bridge open?", mode="R2")
    assert not resp.fallback and "1811" in resp.answer
    t = eng.trace(resp.trace_id)
    assert t["loop"]["decision_path"][0] == "retrieve" and t["loop"]["decision_path"][-1] == "generate"
    assert t["loop"]["original_query"] == "When did the Linden Bridge open?"
    assert t["loop"]["current_rewrite_count"] == 0
    assert "rewrite" not in brain.kinds
    assert t["states"] == ["IDLE", "ROUTING", "RETRIEVING", "GRADING", "DRAFTING", "VERIFYING", "DONE"]
    assert any(c["purpose"] == "grade" for c in t["model_calls"])


def test_r2_grader_always_irrelevant_ends_after_max_rewrites_with_a_refusal(eng: Engine):
    brain = Brain(grade=lambda q, doc: {"is_relevant": False, "confidence": 0.9, "reasoning": "off topic"})
    t0 = time.perf_counter()
    # evidence below the refusal floor: nothing vouches for the ungraded documents (above it, R2
    # answers from them: test_corrective_evidence.py)
    weak = AnswerConfig(min_evidence_cosine=0.9999, min_evidence_cosine_zh=0.9999)
    resp = ask(eng, brain, "When did the Linden Bridge open?", mode="R2", answer=weak)
    assert time.perf_counter() - t0 < 20
    assert resp.fallback and not resp.grounded
    t = eng.trace(resp.trace_id)
    assert t["loop"]["current_rewrite_count"] == 3 and brain.rewrites == 3
    assert t["loop"]["stop_reason"] == "max_rewrite_attempts"
    assert t["loop"]["original_query"] == "When did the Linden Bridge open?"
    assert "answer" not in brain.kinds  # nothing passed: no generation from ungraded text
    assert t["states"][-1] == "REFUSED"
    assert [e["name"] for e in t["events"]].count("QUERY_REWRITTEN") == 3


def test_r3_plan_runs_as_a_dag_and_the_synthesis_cites_the_task_sources(eng: Engine):
    brain = Brain(plan=TWO_BRIDGES)
    bus = EventBus()
    seen: list[tuple[str, str]] = []
    bus.subscribe(lambda e: seen.append((e.name, e.state)))
    resp = ask(eng, brain, "Which opened first, the Linden Bridge or the Rhine Bridge?", mode="R3", bus=bus)
    assert not resp.fallback and resp.route == "MULTI_HOP" and resp.mode == "R3_DAG_PLAN"
    assert "1811" in resp.answer and "1870" in resp.answer
    assert sorted(c.source.rsplit("/", 1)[-1] for c in resp.citations) == ["linden.md", "rhine.md"]
    assert all(c.kept and c.verdict == "SUPPORTED" for c in resp.claims)
    assert_verified(resp)
    t = eng.trace(resp.trace_id)
    nodes = {n["id"]: n for n in t["plan"]["nodes"]}
    assert [nodes[i]["status"] for i in (1, 2, 3)] == ["done", "done", "done"]
    assert nodes[3]["deps"] == [1, 2] and all(nodes[i]["duration_ms"] > 0 for i in (1, 2))
    assert t["states"] == ["IDLE", "ROUTING", "PLANNING", "EXECUTING", "SYNTHESIZING", "VERIFYING", "DONE"]
    names = [e["name"] for e in t["events"]]
    assert names.count("TASK_DONE") == 3 and names.index("PLAN_READY") < names.index("EXECUTION_DONE")
    assert [n for n, _ in seen] == names  # the bus saw exactly what the trace recorded
    purposes = {c["purpose"] for c in t["model_calls"]}
    assert {"plan", "synthesize", "task1/generate", "task3/generate"} <= purposes
    assert resp.explain["plan"]["sub_tasks"][2]["dependencies"] == [1, 2]


@pytest.mark.parametrize("bad_plan,why", [
    ({"sub_tasks": [{"id": 1, "description": "a", "dependencies": [2]},
                    {"id": 2, "description": "b", "dependencies": [1]}]}, "cycle"),
    ({"sub_tasks": [{"id": i, "description": f"task {i}", "dependencies": []} for i in range(1, 51)]}, "nodes"),
    ("this is not JSON at all", "JSON"),
])
def test_r3_bad_plans_are_repaired_once_then_fall_back_to_r2(eng: Engine, bad_plan, why):
    brain = Brain(plan=bad_plan)
    resp = ask(eng, brain, "Which opened first, the Linden Bridge or the Rhine Bridge?", mode="R3")
    t = eng.trace(resp.trace_id)
    assert t["plan"]["outcome"]["attempts"] == 2  # the plan and one repair
    assert brain.kinds.count("plan") >= 2
    assert resp.mode == "R2_MULTI_RETRIEVE"
    t = eng.trace(resp.trace_id)
    tried = t["outcome"]["modes_tried"]
    assert tried[0]["mode"] == "R3_DAG_PLAN" and not tried[0]["ok"] and tried[1] == {"mode": "R2_MULTI_RETRIEVE", "ok": True}
    assert len(t["plan"]["outcome"]["errors"]) == 2
    assert "PLAN_FAILED" in [e["name"] for e in t["events"]] and "FALLBACK" in [e["name"] for e in t["events"]]
    assert "FALLING_BACK" in t["states"] and t["outcome"]["anomalies"] == []


def test_r3_hanging_task_times_out_is_retried_once_and_the_turn_still_answers(eng: Engine):
    brain = Brain(plan=TWO_BRIDGES, hang_on="Rhine Bridge open")
    budget = ControlBudget(node_timeout_s=0.5, max_wall_s=30)
    t0 = time.perf_counter()
    resp = ask(eng, brain, "Which opened first, the Linden Bridge or the Rhine Bridge?", mode="R3", budget=budget)
    assert time.perf_counter() - t0 < 15
    t = eng.trace(resp.trace_id)
    nodes = {n["id"]: n for n in t["plan"]["nodes"]}
    assert nodes[2]["status"] == "timeout" and nodes[2]["attempts"] == 2
    assert nodes[3]["status"] == "skipped"
    assert nodes[1]["status"] == "done"
    # what was established is still shown, verified, in a reply that names the missing part
    assert resp.fallback and resp.grounded and "The Linden Bridge opened in 1811 [1]." in resp.answer
    assert "Not established: When did the Rhine Bridge open?" in resp.answer
    assert any("without a verified result: [2]" in n for n in resp.notes)
    assert [c.source.rsplit("/", 1)[-1] for c in resp.citations] == ["linden.md"]
    assert "synthesize" not in brain.kinds  # from half the facts a synthesis would conclude anyway


def test_cancellation_mid_plan_returns_promptly_with_the_reason(eng: Engine):
    cancel = CancelToken()

    def on_call(text: str) -> None:
        if "<retrieved_documents>" in text:
            cancel.cancel("user pressed stop")
            time.sleep(0.3)
    brain = Brain(plan=TWO_BRIDGES, on_call=on_call)
    t0 = time.perf_counter()
    resp = ask(eng, brain, "Which opened first, the Linden Bridge or the Rhine Bridge?", mode="R3",
               cancel=cancel)
    assert time.perf_counter() - t0 < 10
    assert resp.fallback and resp.clarification
    t = eng.trace(resp.trace_id)
    assert "CANCELLED" in t["states"]
    assert any("cancel" in (m.get("reason") or "") for m in t["outcome"]["modes_tried"])
    assert brain.kinds.count("answer") <= 2 and "synthesize" not in brain.kinds


class YearJudge(LexicalJudge):
    """Lexical support, plus: two statements about the same bridge with different years contradict."""

    def judge(self, claim: str, passage: str, question: str | None = None) -> JudgeVerdict:
        yc, yp = set(re.findall(r"1[89]\d\d", claim)), set(re.findall(r"1[89]\d\d", passage))
        if "Linden" in claim and "Linden" in passage and yc and yp and not yc & yp:
            return JudgeVerdict(verdict="CONTRADICTED", reason=f"{sorted(yc)} vs {sorted(yp)}")
        return super().judge(claim, passage, question)


def test_conflicting_sources_are_both_cited_and_the_user_is_asked(eng: Engine):
    plan = {"sub_tasks": [
        {"id": 1, "description": "When did the Linden Bridge open according to its history?", "dependencies": []},
        {"id": 2, "description": "When did the Linden Bridge open according to the old guide?", "dependencies": []},
        {"id": 3, "description": "Do the sources agree on when the Linden Bridge opened?", "dependencies": [1, 2],
         "type": "conflict_resolve"}]}

    def answer(q: str, text: str) -> dict:
        needle, stated = ("1820", "According to the old guide, the Linden Bridge opened in 1820") if "guide" in q \
            else ("opened in 1811", "The Linden Bridge opened in 1811")
        n = block_with(text, needle)
        return {"answer": f"{stated} [{n}].", "citations": [{"id": n, "quote": ""}], "fallback": False}
    resp = ask(eng, Brain(plan=plan, answer=answer), "When did the Linden Bridge open, and do sources agree?",
               mode="R3", judge=YearJudge())
    assert "1811" in resp.answer and "1820" in resp.answer and "disagree" in resp.clarification
    assert all(c.kept and c.verdict == "SUPPORTED" for c in resp.claims) and len(resp.claims) == 2
    assert_verified(resp)
    assert sorted(c.source.rsplit("/", 1)[-1] for c in resp.citations) == ["linden.md", "old_guide.md"]
    assert resp.clarification
    t = eng.trace(resp.trace_id)
    assert t["states"][-1] == "REQUESTING_CLARIFICATION"
    assert "CONFLICT_DETECTED" in [e["name"] for e in t["events"]]


def test_r1_model_failure_falls_back_to_clarification_not_an_error(eng: Engine):
    failing = with_models(eng, llm=ScriptedLLM([LLMOutputError("garbage")] * 20))
    resp = failing.ask("When did the Linden Bridge open?",
                   options=TurnOptions(answer=OPEN, use_llm_router=False, force_mode="R1_ONE_SHOT_RETRIEVE"))
    assert resp.fallback
    t = eng.trace(resp.trace_id)
    assert t["states"][-1] in ("REFUSED", "REQUESTING_CLARIFICATION")


def test_unknown_mode_is_a_one_line_config_error(eng: Engine):
    from cograg.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown mode"):
        eng.ask("When did the Linden Bridge open?", mode="R9")


def test_cli_ask_mode_and_explain_print_the_route_plan_and_node_timings(eng: Engine, monkeypatch):
    from typer.testing import CliRunner

    import cograg.models.embedder as embedders
    import cograg.models.llm as llms
    from cograg.cli import app
    from tests.fakes import HashingEmbedder

    store = str(eng.settings.store)
    eng.close()
    monkeypatch.setattr(llms, "get_llm", lambda spec, cache_dir=None: ScriptedLLM([Brain(plan=TWO_BRIDGES)] * 400))
    monkeypatch.setattr(embedders, "get_embedder", lambda spec: HashingEmbedder())
    # the hashing embedder's cosines say nothing about the real refusal floors: open them
    open_floors = ["--set", "answer.min_evidence_cosine=-1", "--set", "answer.min_evidence_cosine_zh=-1"]
    res = CliRunner().invoke(app, ["ask", "Which opened first, the Linden Bridge or the Rhine Bridge?", "--mode",
                                   "R3", "--judge", "lexical", "--explain", "--store", store, *open_floors])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "1811" in out and "mode R3_DAG_PLAN" in out
    assert "route: MULTI_HOP → mode R3_DAG_PLAN" in out and "mode forced: R3_DAG_PLAN" in out
    assert "states: IDLE → ROUTING → PLANNING → EXECUTING → SYNTHESIZING → VERIFYING → DONE" in out
    # a two-entity comparison is planned by the comparison template, without a model call
    assert "plan (template comparison, no model call):" in out
    # which opened first is decided by the check of the two dates (tests/test_order_check.py)
    assert re.search(r"\[3\] check ← 1, 2: Which opened first, the Linden Bridge or the Rhine Bridge\?\s+done \d+ ms",
                     out)
    assert "The Linden Bridge opened first: in 1811 [1], and the Rhine Bridge in 1870 [2]." in out
    trace_id = re.search(r"trace (tr_\w+)", out).group(1)
    shown = CliRunner().invoke(app, ["trace", trace_id, "--store", store])
    assert shown.exit_code == 0 and "plan (template comparison" in shown.stdout
    assert "[1] retrieve ← —: When was the Linden Bridge opened?" in shown.stdout
    bad = CliRunner().invoke(app, ["ask", "x", "--mode", "R9", "--judge", "lexical", "--store", store])
    assert bad.exit_code != 0 and "unknown mode" in bad.stderr and "Traceback" not in bad.output


def test_router_llm_setting_blends_the_model_scores_into_the_decision(eng: Engine):
    """COGRAG_ROUTER_LLM: the model's scores may escalate a turn (here to a plan); the rules stay
    a floor, and without the setting no routing call is made at all."""
    brain = Brain(plan=TWO_BRIDGES)
    llm = ScriptedLLM([brain] * 400)
    question = "When did the Linden Bridge open?"
    plain = with_models(eng, llm=llm).ask(question, config=OPEN)
    assert "route" not in brain.kinds and plain.mode in ("R1_ONE_SHOT_RETRIEVE", "R2_MULTI_RETRIEVE")
    blended = eng.settings.with_overrides(["routing.router_llm=true"])
    escalated = with_models(eng, settings=blended, llm=llm).ask(question, config=OPEN)
    assert brain.kinds.count("route") == 1 and escalated.mode == "R3_DAG_PLAN"
    t = eng.trace(escalated.trace_id)
    assert t["decision"]["llm_scores"]["complexity"] == 1.0 and t["prompt_versions"]["route_scores"] == "route_scores@1"
    assert any(c["purpose"] == "route" for c in t["model_calls"])


def test_synthesis_fallback_never_runs_fragments_together(eng: Engine):
    """Task statements without a full stop (small models answer in fragments) become sentences of
    their own and are verified again, so none reaches the user unchecked."""
    def synth(text: str) -> dict:
        return {"answer": "Nothing I can cite."}

    def answer(q: str, text: str) -> dict:
        if "Rhine" in q:
            n = block_with(text, "1870")
            return {"answer": f"1870 [{n}]", "citations": [{"id": n, "quote": ""}], "fallback": False}
        n = block_with(text, "opened in 1811")
        return {"answer": f"1811 [{n}]", "citations": [{"id": n, "quote": ""}], "fallback": False}
    resp = ask(eng, Brain(plan=TWO_BRIDGES, synth=synth, answer=answer),
               "When did the Linden Bridge and the Rhine Bridge open?", mode="R3")
    assert_verified(resp)
    t = eng.trace(resp.trace_id)
    assert t["plan"]["synthesis"]["method"] == "task_statements"


def test_fallbacks_stop_when_the_turn_time_budget_is_used_up(eng: Engine):
    """R3 fails slowly (a plan that never validates); with the wall budget spent there is no R2
    attempt after it — a clarifying reply that says why."""
    def slow_bad_plan(text: str) -> str:
        time.sleep(0.6)
        return "not a plan"
    brain = Brain(plan=slow_bad_plan)
    resp = ask(eng, brain, "Which opened first, the Linden Bridge or the Rhine Bridge?", mode="R3",
               budget=ControlBudget(max_wall_s=1.0))
    assert resp.fallback and resp.clarification and "time budget" in resp.notes[0]
    t = eng.trace(resp.trace_id)
    assert [m["mode"] for m in t["outcome"]["modes_tried"]] == ["R3_DAG_PLAN"]
    assert "grade" not in brain.kinds


def test_each_verified_sentence_is_streamed_before_the_answer_is_ready(eng: Engine):
    bus = EventBus()
    seen: list = []
    bus.subscribe(seen.append)
    resp = ask(eng, Brain(), "When did the Linden Bridge open?", mode="R1", bus=bus)
    assert not resp.fallback
    names = [e.name for e in seen]
    assert names.index("SENTENCE_VERIFIED") < names.index("VERIFIED") < names.index("ANSWER_READY")
    streamed = [e.data for e in seen if e.name == "SENTENCE_VERIFIED"]
    # exactly the delivered sentences, each with the citation its marker names
    assert [d["sentence"] for d in streamed] == [c.sentence for c in resp.claims if c.kept]
    assert all(d["citations"] and d["citations"][0]["quote"] for d in streamed)


def test_an_unsupported_sentence_is_never_streamed(eng: Engine):
    def answer(q, text):
        n = block_with(text, "opened in 1811")
        return {"answer": f"The Linden Bridge opened in 1811 [{n}]. It is painted bright purple [{n}].",
                "citations": [{"id": n, "quote": "opened in 1811"}], "fallback": False}

    bus = EventBus()
    seen: list = []
    bus.subscribe(seen.append)
    resp = ask(eng, Brain(answer=answer), "When did the Linden Bridge open?", mode="R1", bus=bus)
    streamed = [e.data["sentence"] for e in seen if e.name == "SENTENCE_VERIFIED"]
    assert streamed and all("purple" not in s for s in streamed)
    assert all("purple" not in s for s in resp.answer.split("."))


def test_forced_r0_never_answers_a_factual_question_with_the_canned_reply(eng: Engine) -> None:
    resp = ask(eng, Brain(), "When did the Linden Bridge open?", mode="R0")
    assert resp.mode == "R1_ONE_SHOT_RETRIEVE" and resp.route == "DOC_GROUNDED"
    assert not resp.fallback and "1811" in resp.answer and resp.citations
    assert any("refused: the question needs facts" in r for r in resp.explain["reasons"])
    hello = ask(eng, Brain(), "Hello!", mode="R0")
    assert hello.mode == "R0_DIRECT_WRITE" and hello.route == "FAST_PATH"


def test_a_comparison_with_one_side_unfound_is_a_partial_reply_not_the_found_sides_yes(eng: Engine):
    """"Are A and B both …?" with B's look-up finding nothing: the reply must not be A's "Yes, …",
    which reads as the answer to the whole question; it states what was found about A, without
    the yes, and that B's part is not established."""
    def answer(q: str, text: str) -> dict:
        n = block_with(text, "opened in 1811")
        if "Linden" in q and n:
            return {"answer": f"Yes, the Linden Bridge opened in 1811 [{n}].", "citations": [{"id": n, "quote": ""}],
                    "fallback": False}
        return {"answer": "", "citations": [], "fallback": True}  # the Rhine look-up finds nothing

    brain = Brain(answer=answer)
    resp = ask(eng, brain, "Are the Linden Bridge and the Rhine Bridge both bridges that opened in 1811?",
               mode="R3", templates=True)
    t = eng.trace(resp.trace_id)
    assert t["plan"]["outcome"]["template"] == "comparison"
    nodes = {n["id"]: n for n in t["plan"]["nodes"]}
    assert [nodes[i]["status"] for i in (1, 2, 3)] == ["done", "failed", "skipped"]
    assert resp.fallback and not resp.answer.lower().startswith("yes")
    assert "The Linden Bridge opened in 1811 [1]." in resp.answer and "Yes" not in resp.answer
    rhine_lookup = t["plan"]["plan"]["sub_tasks"][1]["description"]
    assert "Rhine" in rhine_lookup and resp.answer.endswith("Not established: " + rhine_lookup)
    assert t["plan"]["synthesis"] == {"method": "partial", "missing": [2]}
    assert "synthesize" not in brain.kinds
    kept = [c for c in resp.claims if c.kept]
    assert [c.sentence for c in kept] == ["The Linden Bridge opened in 1811 [1]."] and kept[0].verdict == "SUPPORTED"


@pytest.mark.parametrize("sentence,expected", [
    ("Yes, King Vidor was an American director [1].", "King Vidor was an American director [1]."),
    ("No. Géza von Cziffra was Hungarian [2].", "Géza von Cziffra was Hungarian [2]."),
    ("Yes [1].", "[1]."),
    ("是的，银雾于1978年育成 [1]。", "银雾于1978年育成 [1]。"),
    ("Nobody designed it [1].", "Nobody designed it [1]."),
    ("Yesterday it opened [1].", "Yesterday it opened [1]."),
])
def test_a_yes_or_no_lead_is_removed_from_a_look_ups_statement(sentence: str, expected: str):
    from cograg.orchestrator.planned import without_yes_no_lead

    assert without_yes_no_lead(sentence) == expected


def test_a_bridge_whose_second_hop_finds_nothing_is_a_partial_reply_not_the_first_hops_fact(eng: Engine):
    """The first hop's fact ("the bridge is the Rhine Bridge") does not answer "who designed it":
    delivered as the answer it would read as one. The reply names the missing hop instead."""
    plan = {"sub_tasks": [
        {"id": 1, "description": "Which bridge opened in 1870?", "dependencies": [], "type": "retrieve"},
        {"id": 2, "description": "Who designed the bridge that opened in 1870?", "dependencies": [1],
         "type": "retrieve"}]}

    def answer(q: str, text: str) -> dict:
        n = block_with(text, "1870")
        if q.startswith("Which bridge") and n:
            return {"answer": f"The Rhine Bridge opened in 1870 [{n}].", "citations": [{"id": n, "quote": ""}],
                    "fallback": False}
        return {"answer": "", "citations": [], "fallback": True}  # no document names its designer

    brain = Brain(plan=plan, answer=answer)
    resp = ask(eng, brain, "Who designed the bridge that opened in 1870?", mode="R3")
    nodes = {n["id"]: n for n in eng.trace(resp.trace_id)["plan"]["nodes"]}
    assert [nodes[i]["status"] for i in (1, 2)] == ["done", "failed"]
    assert resp.fallback and resp.answer == ("The sources establish only part of the answer. The Rhine Bridge opened "
                                             "in 1870 [1]. Not established: Who designed the bridge that opened in 1870?")
    assert "synthesize" not in brain.kinds
