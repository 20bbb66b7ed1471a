"""Calibration and evaluation splits (src/cograg/eval/splits.py) and the grader calibration's
choices (benchmarks/calibrate_grader.py): disjoint halves by a fixed hash rule, thresholds picked
from the calibration rows only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cograg.eval.splits import hotpotqa_train100, split_of

HOTPOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa_train100" / "hipporag_hotpotqa_train100.json"


@pytest.mark.skipif(not HOTPOT.exists(), reason="needs ../shared/data/hotpotqa_train100")
def test_hotpotqa_train100_splits_follow_the_one_rule_and_are_disjoint():
    cal = hotpotqa_train100(HOTPOT, "calibration")
    ev = hotpotqa_train100(HOTPOT, "evaluation")
    assert len(cal) + len(ev) == len(json.loads(HOTPOT.read_text(encoding="utf-8"))) == 100
    assert {q["_id"] for q in cal}.isdisjoint(q["_id"] for q in ev)
    assert all(split_of(q) == "calibration" for q in cal) and all(split_of(q) == "evaluation" for q in ev)
    assert 20 <= len(cal) <= 45  # about a third
    assert hotpotqa_train100(HOTPOT, "evaluation") == ev  # stable order


def test_calibration_picks_the_confidence_with_the_best_f1_and_the_pass_rate_that_predicts_missing_gold():
    from benchmarks.calibrate_grader import choose_confidence, choose_pass_rate

    # gold paragraphs get relevant verdicts at 0.7-0.8, others relevant at 0.6 or irrelevant
    grades = ([{"gold": True, "is_relevant": True, "confidence": c, "error": None} for c in (0.7, 0.8, 0.75)]
              + [{"gold": False, "is_relevant": True, "confidence": 0.6, "error": None}] * 3
              + [{"gold": False, "is_relevant": False, "confidence": 0.9, "error": None}] * 3)
    conf, table = choose_confidence(grades)
    assert conf == 0.65 and max(r["f1"] for r in table) == 1.0
    complete = {"gold_total": 2, "gold_graded": 2, "grades": grades[:2] + grades[6:9]}  # pass rate 0.4
    missing = {"gold_total": 2, "gold_graded": 0, "grades": grades[6:9] + grades[6:8]}  # pass rate 0.0
    rate, _ = choose_pass_rate([complete, missing], conf)
    assert 0.0 < rate <= 0.4


SCIFACT = HOTPOT.parents[1] / "verification" / "scifact_nli_train.jsonl"


@pytest.mark.skipif(not SCIFACT.exists(), reason="needs ../shared/data/verification")
def test_no_scifact_claim_is_in_both_parts():
    # split by (claim, abstract) pair, 25 claims had pairs in both parts: the evaluation half
    # judged claims whose wording the calibration half had shown
    from cograg.eval.splits import select

    records = [json.loads(line) for line in SCIFACT.read_text(encoding="utf-8").splitlines() if line.strip()]
    cal, ev = select(records, "calibration"), select(records, "evaluation")
    assert len(cal) + len(ev) == len(records)
    assert {r["claim_id"] for r in cal}.isdisjoint(r["claim_id"] for r in ev)
    assert 0.25 <= len({r["claim_id"] for r in cal}) / len({r["claim_id"] for r in records}) <= 0.42


def test_items_sharing_a_claim_share_a_part_and_keep_their_own_ids():
    from cograg.eval.splits import item_id

    pairs = [{"claim_id": 7, "doc_id": d, "claim": "c", "abstract": "a", "label": "SUPPORT"} for d in range(40)]
    assert len({split_of(p) for p in pairs}) == 1
    assert len({item_id(p) for p in pairs}) == 40
