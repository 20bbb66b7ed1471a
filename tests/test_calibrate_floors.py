"""The refusal-floor calibration (benchmarks/calibrate_floors.py): the floor it picks from score lists,
that it decides as the answerer's gate does, and that only calibration ids reach the choice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.calibrate_floors import (FLOOR_GRID, SOURCES, Scored, choose_floor, choose_floors, gated,
                                         gold_removed_store, probes, supporting_titles, write_gold_removed_corpus)
from cograg.answer.answerer import Answerer
from cograg.config import AnswerConfig
from cograg.eval.splits import split_of_id
from cograg.retrieval.models import SearchHit, SearchResult

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA / "cmrc2018" / "original" / "cmrc2018_trial.json").exists()
                                or not (DATA / "hotpotqa_train100").exists(),
                                reason="needs ../shared/data (cmrc2018, hotpotqa_train100)")


def test_separable_scores_give_the_lowest_floor_that_separates_them():
    choice = choose_floor([0.85, 0.86, 0.90], {"written": [0.80, 0.82], "other": [0.70]})
    assert choice.floor == 0.825 and choice.balanced_accuracy == 1.0
    assert choice.admitted == 1.0 and choice.refused == {"written": 1.0, "other": 1.0}


def test_each_unanswerable_source_weighs_the_same_however_many_questions_it_has():
    # one hard written question at 0.86 and a hundred easy ones at 0.70; pooled, the hard one would
    # not count and the floor would drop below it
    answerable = [0.90] * 10 + [0.84]
    choice = choose_floor(answerable, {"written": [0.86], "easy": [0.70] * 100})
    assert choice.floor == 0.865
    assert choice.refused == {"written": 1.0, "easy": 1.0} and choice.admitted == pytest.approx(10 / 11)


def test_overlapping_scores_pick_the_best_balanced_accuracy_and_ties_go_toward_admitting():
    # floors in (0.78, 0.80] and in (0.83, 0.85] both reach (1 + 1/2) / 2 = (1/2 + 1) / 2; the lower wins
    choice = choose_floor([0.80, 0.85], {"written": [0.78, 0.83]})
    assert choice.floor == 0.785 and choice.balanced_accuracy == pytest.approx(0.75)
    everything_admitted = choose_floor([0.95], {"written": [0.96]})  # nothing separates: admit
    assert everything_admitted.floor == FLOOR_GRID[0]


def test_a_choice_needs_both_kinds_of_scores():
    with pytest.raises(ValueError):
        choose_floor([0.9], {"written": []})
    with pytest.raises(ValueError):
        choose_floor([], {"written": [0.8]})


def _row(question: str, source: str, score: float | None, split: str = "calibration", rid: str | None = None) -> Scored:
    rid = rid or next(f"q{i}" for i in range(10_000) if split_of_id(f"q{i}") == split)
    return Scored(id=rid, question=question, source=source, store="s", split=split, score=score,
                  evidence_source="vector_cosine" if score is not None else None, hits=1)


@pytest.mark.parametrize("score", [0.80, 0.8299, 0.83, 0.86, 0.8699, 0.87, 0.95])
@pytest.mark.parametrize("question", ["Who designed the bridge?", "这座桥是谁设计的？"])
def test_the_script_admits_exactly_what_the_answerers_gate_admits(question, score):
    config = AnswerConfig(min_evidence_cosine=0.83, min_evidence_cosine_zh=0.87)
    answerer = Answerer(search=lambda q: None, llm=None, verifier=None, config=config)  # type: ignore[arg-type]
    hit = SearchHit.model_construct(chunk_id="c1", doc_id="d1", text="t", score=score)
    result = SearchResult(query=question, mode="hybrid", hits=[hit], evidence_score=score,
                          evidence_source="vector_cosine")
    assert gated(_row(question, "answerable", score), config) == answerer._evidence_ok(result)


@pytest.mark.parametrize(("rerank", "cosine", "admitted"), [
    (0.9, 0.70, False),  # the rater likes it, the embedder finds nothing close: refused
    (0.9, 0.86, True),
    (0.2, 0.95, False),  # below the reranker floor
    (0.9, None, True),  # no vector score (BM25 only): the reranker floor alone
])
def test_a_reranked_search_must_clear_the_reranker_floor_and_the_cosine_floor(rerank, cosine, admitted):
    config = AnswerConfig(min_evidence_cosine=0.845, min_evidence_rerank=0.3)
    answerer = Answerer(search=lambda q: None, llm=None, verifier=None, config=config)  # type: ignore[arg-type]
    hit = SearchHit.model_construct(chunk_id="c1", doc_id="d1", text="t", score=0.5)
    result = SearchResult(query="Which band headlined the first festival on Mars?", mode="hybrid", hits=[hit],
                          evidence_score=rerank, evidence_source="reranker:llm:fast", best_cosine=cosine)
    assert answerer._evidence_ok(result) is admitted


def test_floors_are_chosen_per_language_and_never_from_evaluation_rows():
    rows = ([_row("Who designed the bridge?", "answerable", s) for s in (0.84, 0.86)]
            + [_row("Who won the 2035 prize?", "written", 0.81)]
            + [_row("这座桥是谁设计的？", "answerable", s) for s in (0.88, 0.90)]
            + [_row("月球咖啡馆何时开业？", "unseen_passages", 0.86)])
    chosen = choose_floors(rows)
    assert chosen["en"].floor == 0.815 and chosen["zh"].floor == 0.865
    with pytest.raises(ValueError, match="calibration rows only"):
        choose_floors(rows + [_row("Who designed it?", "answerable", 0.9, split="evaluation")])
    # a row labelled calibration whose id the split rule puts in evaluation is refused too
    evaluation_id = next(f"q{i}" for i in range(10_000) if split_of_id(f"q{i}") == "evaluation")
    with pytest.raises(ValueError, match="calibration rows only"):
        choose_floors(rows + [_row("Who designed it?", "answerable", 0.9, rid=evaluation_id)])


@needs_data
def test_calibration_questions_come_from_the_calibration_split_only():
    cal, ev = probes(DATA, "calibration"), probes(DATA, "evaluation")
    assert {p.source for p in cal} == set(SOURCES) == {p.source for p in ev}
    assert all(split_of_id(p.id) == "calibration" for p in cal)
    assert all(split_of_id(p.id) == "evaluation" for p in ev)
    assert {p.id for p in cal}.isdisjoint(p.id for p in ev)
    assert 0.25 < len(cal) / (len(cal) + len(ev)) < 0.42  # about a third
    # the gold-removed questions of a split are asked of the store built for that split
    assert {p.store for p in cal if p.source == "gold_removed"} == {gold_removed_store("calibration")}
    # the written set has no ids: its question text is the id the rule hashes
    written_file = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "unanswerable.jsonl"
    written = [json.loads(x)["question"] for x in written_file.read_text("utf-8").splitlines()]
    assert {p.id for p in cal + ev if p.source == "written"} == set(written)


@needs_data
def test_the_gold_removed_corpus_drops_the_supporting_paragraphs_of_its_split_only(tmp_path):
    full = tmp_path / "full.jsonl"
    full.write_text("".join(json.dumps({"_id": f"P{i}", "title": t, "text": "x"}) + "\n"
                            for i, t in enumerate(["A", "B", "C"])), encoding="utf-8")
    out = write_gold_removed_corpus(full, {"B"}, tmp_path / "out" / "corpus.jsonl")
    assert [json.loads(x)["title"] for x in out.read_text(encoding="utf-8").splitlines()] == ["A", "C"]
    questions = json.loads((DATA / "hotpotqa_train100" / "hipporag_hotpotqa_train100.json").read_text("utf-8"))
    cal_titles = supporting_titles(DATA, "calibration")
    assert cal_titles == {t for q in questions if split_of_id(q["_id"]) == "calibration"
                          for t, _ in q["supporting_facts"]}
