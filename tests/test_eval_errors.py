"""A turn that failed is an error row, never a correct refusal (SPEC H): the model timing out on an
unanswerable question must not score as the engine declining it, and the summary says how many
turns failed, keeping them in every denominator as wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cograg.answer.response import AnswerResponse
from cograg.answer.verifier import ClaimCheck
from cograg.eval.answers import QAItem, answer_row, evaluate_answers, summarise_answers

ANSWERABLE = QAItem(id="arches", question="How many arches does the Linden Bridge have?", answers=["seven"])
UNANSWERABLE = QAItem(id="moon", question="Who built the bridge on the moon?", answerable=False)


def response(**fields: Any) -> AnswerResponse:
    base: dict[str, Any] = {"answer": "No verified answer could be written this time.", "fallback": True,
                            "confidence": 0.0, "grounded": False, "route": "REFUSED", "trace_id": "tr_x",
                            "mode": "R1_ONE_SHOT_RETRIEVE",
                            "explain": {"modes_tried": [{"mode": "R1_ONE_SHOT_RETRIEVE", "ok": True}]}}
    return AnswerResponse(**(base | fields))


def row(item: QAItem, resp: AnswerResponse) -> dict[str, Any]:
    return answer_row(item, resp, latency_s=0.1, tokens=0, judge=None, chunk_text=lambda _: "text")


FAILED_CHAIN = {"modes_tried": [{"mode": "R2_MULTI_RETRIEVE", "ok": False, "reason": "grader: LLMTimeout"},
                                {"mode": "R1_ONE_SHOT_RETRIEVE", "ok": False, "reason": "cancelled: deadline"}]}
JUDGE_FAILED = ClaimCheck(sentence="It has seven arches [1].", citation_ids=["1"], verdict="UNRELATED",
                          method="llm", reason="judge failed: LLMTimeout", kept=False)
FAILURES = {
    "model failed while drafting": response(notes=["model failed: LLMTimeout"]),
    "fallback chain ended after failed modes": response(route="CLARIFY", explain=FAILED_CHAIN,
                                                        notes=["cancelled: deadline"]),
    "verifier judge failed": response(notes=["only 0 of 1 sentences verified"], claims=[JUDGE_FAILED]),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
@pytest.mark.parametrize("item", [ANSWERABLE, UNANSWERABLE], ids=["answerable", "unanswerable"])
def test_a_failed_turn_is_an_error_row_not_a_refusal(case: str, item: QAItem) -> None:
    r = row(item, FAILURES[case])
    assert r["ok"] is False
    assert r.get("error")
    assert not r["answered"]


def test_the_error_names_its_reason() -> None:
    assert "LLMTimeout" in row(UNANSWERABLE, FAILURES["model failed while drafting"])["error"]
    chain = row(UNANSWERABLE, FAILURES["fallback chain ended after failed modes"])["error"]
    assert "R2_MULTI_RETRIEVE" in chain and "grader: LLMTimeout" in chain
    assert "judge failed" in row(UNANSWERABLE, FAILURES["verifier judge failed"])["error"]


def test_a_refusal_by_design_is_no_error() -> None:
    refused = response(notes=["insufficient evidence: best score 0.2 (cosine)"])
    assert row(UNANSWERABLE, refused)["ok"] is True and "error" not in row(UNANSWERABLE, refused)
    # a clarifying question with no failed mode (an ambiguous reference) is the engine's choice
    clarify = response(route="CLARIFY", notes=["ambiguous reference"])
    assert "error" not in row(UNANSWERABLE, clarify)
    # a mode failed, and the next one refused by design: the chain did not end in failure
    fell_back = response(notes=["insufficient evidence"], explain={"modes_tried": [
        {"mode": "R2_MULTI_RETRIEVE", "ok": False, "reason": "no document graded relevant"},
        {"mode": "R1_ONE_SHOT_RETRIEVE", "ok": True}]})
    assert "error" not in row(UNANSWERABLE, fell_back)


def test_a_delivered_answer_is_no_error_whatever_failed_on_the_way() -> None:
    answered = response(answer="It has seven arches [1].", fallback=False, grounded=True, route="DOC_GROUNDED",
                        notes=["model failed: LLMTimeout"], claims=[JUDGE_FAILED])
    r = row(ANSWERABLE, answered)
    assert "error" not in r and r["ok"] is True


def test_a_turn_that_raises_is_an_error_row_and_the_eval_goes_on() -> None:
    def ask(question: str) -> AnswerResponse:
        if "moon" in question:
            raise TimeoutError("the engine gave up")
        return response(notes=["insufficient evidence"])

    rows = evaluate_answers([UNANSWERABLE, QAItem(id="mars", question="Who designed the tram on Mars?",
                                                  answerable=False)],
                            ask, lambda _: {}, lambda _: None, judge=None)
    assert [r["id"] for r in rows] == ["moon", "mars"]
    assert rows[0]["ok"] is False and "TimeoutError" in rows[0]["error"] and not rows[0]["answered"]
    assert rows[1]["ok"] is True and "error" not in rows[1]


def test_the_summary_counts_errors_as_wrong() -> None:
    rows = [row(ANSWERABLE, FAILURES["model failed while drafting"]),
            row(UNANSWERABLE, FAILURES["model failed while drafting"]),
            row(UNANSWERABLE, response(notes=["insufficient evidence"]))]
    s = summarise_answers(rows)
    assert s["errors"] == 2 and s["error_rate"] == round(2 / 3, 4)
    assert s["refusal_unanswerable"] == 0.5  # the failed one is no correct refusal, and stays in the denominator
    assert s["answered_rate"] == 0.0 and s["contains_gold"] == 0.0


def test_a_model_that_always_times_out_scores_no_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end through the answers eval and an engine whose model times out on every call."""
    from cograg.config import Settings
    from cograg.engine import Engine
    from cograg.eval.kinds import EvalContext, get_kind
    from cograg.models import LLMTimeout
    from cograg.testing import ScriptedLLM
    from tests.fakes import HashingEmbedder

    for key in list(os.environ):
        if key.startswith("COGRAG_"):
            monkeypatch.delenv(key)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "bridge.md").write_text(
        "# Linden Bridge\n\nThe Linden Bridge was designed by Tobias Marrick. It has seven arches.\n", encoding="utf-8")
    qa = [ANSWERABLE.model_dump(), UNANSWERABLE.model_dump(),
          {"id": "mars", "question": "Who designed the tram on Mars?", "answers": [], "answerable": False}]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qa), encoding="utf-8")
    settings = Settings(store=tmp_path / "store").with_overrides({
        "models.embedder": "none", "verification.judge": "lexical", "verification.min_claim_similarity": -1,
        "answer.min_evidence_cosine": -1, "answer.min_evidence_cosine_zh": -1})
    llm = ScriptedLLM([LLMTimeout("deadline passed")] * 100)

    def factory(s: Settings, **parts: Any) -> Engine:
        return Engine.open(settings=s, **{"embedder": HashingEmbedder(), "llm": llm, **parts})

    ctx = EvalContext(settings=settings, engine_factory=factory, split="all")
    report = get_kind("answers").run({"qa": [str(tmp_path / "qa.jsonl")], "corpus": str(tmp_path / "corpus"),
                                      "store": str(tmp_path / "store"), "citation_judge": "lexical",
                                      "name": "timeouts"}, ctx)
    assert llm.calls  # the model was asked, and failed
    assert report.summary["refusal_unanswerable"] == 0.0
    assert report.summary["errors"] == 3 and report.summary["error_rate"] == 1.0
    assert all(r["ok"] is False and r["error"].startswith("model failed") for r in report.rows)
