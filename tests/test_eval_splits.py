"""Calibration and evaluation splits (src/cograg/eval/splits.py) and the grader calibration's
choices (benchmarks/calibrate_grader.py): disjoint halves by a fixed hash rule, thresholds picked
from the calibration rows only."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from cograg.eval.splits import hotpotqa_train100, split_items, split_key

HOTPOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa_train100" / "hipporag_hotpotqa_train100.json"


def test_split_is_half_by_sha256_of_set_and_id_disjoint_and_order_free():
    items = [{"_id": f"q{i}"} for i in range(11)]
    cal = split_items(items, "demo", "calibration", lambda q: q["_id"])
    ev = split_items(items, "demo", "evaluation", lambda q: q["_id"])
    assert len(cal) == 5 and len(ev) == 6 and not {q["_id"] for q in cal} & {q["_id"] for q in ev}
    assert split_items(list(reversed(items)), "demo", "calibration", lambda q: q["_id"]) == cal
    assert split_key("demo", "q1") == hashlib.sha256(b"demo:q1").hexdigest()
    ranked = sorted(items, key=lambda q: hashlib.sha256(f"demo:{q['_id']}".encode()).hexdigest())
    assert cal == ranked[:5]


@pytest.mark.skipif(not HOTPOT.exists(), reason="needs ../shared/data/hotpotqa_train100")
def test_hotpotqa_train100_splits_are_the_documented_halves():
    cal = hotpotqa_train100(HOTPOT, "calibration")
    ev = hotpotqa_train100(HOTPOT, "evaluation")
    assert len(cal) == len(ev) == 50
    assert {q["_id"] for q in cal}.isdisjoint(q["_id"] for q in ev)
    assert cal[0]["_id"] == "5ab3c131554299233954ff9c" and ev[0]["_id"] == "5ac3a60f5542993915413880"
    assert len(json.loads(HOTPOT.read_text(encoding="utf-8"))) == 100


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
