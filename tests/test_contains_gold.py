"""contains_gold credits an answer that commits to the gold, not one that names it while denying
it, hedging between alternatives, listing candidates or saying both yes and no (SPEC H; the rule
is in `cograg.eval.scoring.contains_gold`). Stored reports re-score with benchmarks/rescore_answers.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from cograg.eval.scoring import contains_gold

REPO = Path(__file__).resolve().parents[1]

NOT_CREDITED = [
    # one of alternatives joined by or / 或 / 还是
    (["Tobias Marrick"], "Tobias Marrick, Anna Marrick, John Smith or Peter Jones"),
    (["1984"], "1981, 1982, 1983, 1984 or 1985"),
    (["seven"], "The Linden Bridge has six, seven or eight arches [1]."),
    (["Tobias Marrick"], "The Linden Bridge was designed by Tobias Marrick or by the city [1]."),
    (["Tobias Marrick"], "It was either Tobias Marrick or Anna Kovacs."),
    (["光荣和ω-force"], "可能是光荣和ω-force，也可能是任天堂、卡普空或世嘉"),
    (["任天堂"], "开发商是任天堂还是世嘉尚不清楚。"),
    # negated
    (["Tobias Marrick"], "It was not Tobias Marrick."),
    (["seven"], "The Linden Bridge does not have seven arches [1]."),
    (["seven"], "The Linden Bridge was designed by Tobias Marrick, not seven engineers [1]."),
    (["Tobias Marrick"], "The bridge wasn't designed by Tobias Marrick."),
    (["光荣"], "这款游戏不是光荣开发的。"),
    (["1984"], "该公司并非创立于1984年。"),
    # one of a list of three or more candidates, the question asking for one
    (["Tobias Marrick"], "Tobias Marrick, Anna Marrick and John Smith designed it."),
    (["Tobias Marrick"], "The bridge was designed by Anna Marrick, John Smith and Tobias Marrick."),
    (["William Winter"],
     "It was founded by William Winter, Dr. Cora Norman, Dr. Aubrey Lucas, and Dr. Noel Polk in 1978."),
    (["光荣"], "开发商是任天堂、光荣、世嘉。"),
    # a yes/no gold, the answer saying both
    (["yes"], "I cannot say yes or no."),
    (["yes"], "Whether yes or no, a single tram ticket costs EUR 2.10 [1]."),
    (["yes"], "Yes. No, it is not."),
    (["no"], "Yes and no."),
]

CREDITED = [
    (["Tobias Marrick"], "Tobias Marrick designed the bridge with Anna Kovacs [1]."),  # another name in passing
    (["Tobias Marrick"], "Tobias Marrick and Anna Kovacs designed the bridge."),  # a pair is no candidate list
    (["Sid Haig"], "Sid Haig is older than Vic Darchinyan [1]."),  # HotpotQA comparisons name both
    (["Sid Haig"], "Sid Haig is the oldest: on July 14, 1939 [1], and Vic Darchinyan on January 7, 1976 [2]."),
    (["Irwin Shaw"], "Iain Banks is not older than Irwin Shaw."),
    (["Tobias Marrick"], "It was designed not by the city but by Tobias Marrick."),
    (["Tobias Marrick"], "Not only Tobias Marrick worked on it."),
    (["Tobias Marrick"], "Of Anna Kovacs or Tobias Marrick, Tobias Marrick designed it."),  # asserted once
    (["seven"], "It has seven arches, three towers and two ramps."),  # other things, not candidates
    (["yes"], "Yes, Christopher Nolan and Sathish Kalathil are both film directors [1][2]."),
    (["yes"], "Yes, there is no doubt about it."),
    (["no"], "No, Escape from the Dark is not an animated feature [2]."),
    (["Columbus, Ohio"], "It is based in Columbus, Ohio [1]."),
    (["Ohio"], "It is in Columbus, Ohio, United States."),
    (["Jack Owens"], "Jack Owens, a songwriter, and his band wrote it."),
    (["Tobias Marrick"], "Tobias Marrick, who lived in Linden or nearby, designed it."),
    (["ω-force"], "是由光荣和Ω－FORCE 开发的"),
    (["1984"], "创立于1984年"),
    (["非露天的垃圾站通常是政府建筑物，非公共空间"],
     "非露天的垃圾站通常是政府建筑物，非公共空间，所以「拾荒者」和「垃圾搜寻者」是不许进入 [1]。"),
    (["Walt Disney Pictures."], "Walt Disney Pictures [1]"),
]


@pytest.mark.parametrize(("gold", "answer"), NOT_CREDITED)
def test_no_credit_for_a_gold_the_answer_does_not_commit_to(gold: list[str], answer: str) -> None:
    assert not contains_gold(gold, answer)


@pytest.mark.parametrize(("gold", "answer"), CREDITED)
def test_credit_for_an_answer_that_asserts_the_gold(gold: list[str], answer: str) -> None:
    assert contains_gold(gold, answer)


def test_a_list_counts_when_the_question_asks_for_several() -> None:
    answer = "Tobias Marrick, Anna Marrick and John Smith designed it."
    assert contains_gold(["Tobias Marrick"], answer, "Which three people designed the Linden Bridge?")
    assert not contains_gold(["Tobias Marrick"], answer, "Who designed the Linden Bridge?")
    # alternatives stay a hedge whatever the question asks
    assert not contains_gold(["Tobias Marrick"], "Tobias Marrick or John Smith", "Who were the designers?")


def test_the_mention_rule_is_kept_for_re_scoring() -> None:
    from cograg.eval.scoring import gold_mentioned

    assert gold_mentioned(["Tobias Marrick"], "It was not Tobias Marrick.")
    assert not gold_mentioned(["seven"], "seventeen arches")


def _rescore_module():
    spec = importlib.util.spec_from_file_location("rescore_answers", REPO / "benchmarks" / "rescore_answers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rescore_counts_old_and_new_rule_from_a_stored_report(tmp_path: Path) -> None:
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "a", "question": "Who designed the Linden Bridge?", "answers": ["Tobias Marrick"]},
        {"id": "b", "question": "How many arches?", "answers": ["seven"]},
        {"id": "c", "question": "Who built it?", "answers": ["Anna Kovacs"]}]), encoding="utf-8")
    rows = [{"id": "a", "question": "Who designed the Linden Bridge?", "answerable": True, "answered": True,
             "contains_gold": True, "answer": "Tobias Marrick or John Smith [1]."},
            {"id": "b", "question": "How many arches?", "answerable": True, "answered": True,
             "contains_gold": True, "answer": "It has seven arches [1]."},
            {"id": "c", "question": "Who built it?", "answerable": True, "answered": False,
             "contains_gold": False, "answer": "The sources do not establish it. Closest: “Anna Kovacs built it.” [1]"},
            {"id": "u", "question": "Who built the moon bridge?", "answerable": False, "answered": False, "answer": ""}]
    report = {"kind": "answers", "name": "answers-tiny-default", "split": "evaluation",
              "dataset": f"{qa} over corpus.jsonl", "rows": rows}
    rescore = _rescore_module()
    out = rescore.rescore(report, rescore.golds(rescore.qa_files(report)))
    assert (out["answerable"], out["stored"], out["old_rule"], out["new_rule"]) == (3, 2, 2, 1)
    assert [c["id"] for c in out["changed"]] == ["a"]
    assert rescore.profile_of(report) == "default"
