"""The numbers check (SPEC C3) reads numbers written as words, English and Chinese, as the digits
they stand for (answer/number_words.py): "nine arches" against "seven arches", or "一九八七年"
against "1978年", is a wrong number whatever the judge says."""

from __future__ import annotations

from pathlib import Path

import pytest

from cograg.answer.verifier import Verifier
from cograg.models.judge import LLMJudge
from cograg.testing import ScriptedLLM
from tests.test_answer import answering, ask, make_engine


def _yes_judge() -> tuple[LLMJudge, ScriptedLLM]:
    """A weak judge: SUPPORTED whatever it is shown."""
    llm = ScriptedLLM(['{"verdict": "SUPPORTED", "reason": "ok"}'] * 3, name="yes-judge")
    return LLMJudge(llm), llm


@pytest.mark.parametrize(("text", "expected"), [
    ("It has nine arches.", {"9"}), ("twenty-one", {"21"}), ("Twenty seven", {"27"}),
    ("a hundred and fifty", {"150"}), ("two thousand and five", {"2005"}), ("one hundred thousand", {"100000"}),
    ("nineteen eighty-seven", {"1987"}), ("twenty twenty", {"2020"}), ("the twenty-first century", {"21"}),
    ("the third pier", {"3"}), ("two million euros", {"2"}),  # as "2 million" reads 2
    # articles and ranks, not counts
    ("one of the founders", set()), ("no one came", set()), ("the second bridge", set()),
    ("the tenant often came", set()),
])
def test_english_number_words_read_as_digits(text: str, expected: set[str]) -> None:
    from cograg.answer.number_words import english_numbers  # here: each check fails on its own without it

    assert english_numbers(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("银雾于一九八七年育成", {"1987"}), ("二〇二〇年", {"2020"}), ("三十座桥", {"30"}), ("二十五", {"25"}),
    ("一百零五", {"105"}), ("两千人", {"2000"}), ("三万五千", {"35000"}), ("三万人", {"3"}),  # as "3万" reads 3
    ("七座拱", {"7"}), ("第三", {"3"}), ("十年", {"10"}), ("十分钟", {"10"}),
    # words that hold a numeral without stating a number
    ("四川", set()), ("十分重要", set()), ("一些", set()), ("三四个人", set()), ("千万不要", set()), ("万一", set()),
    ("百年老店", set()), ("一座桥", set()),
])
def test_chinese_numerals_read_as_digits(text: str, expected: set[str]) -> None:
    from cograg.answer.number_words import chinese_numbers

    assert chinese_numbers(text) == expected


def test_the_cited_side_reads_one_and_both_as_numbers() -> None:
    from cograg.answer.number_words import stated_numbers

    assert stated_numbers("It has one arch.") == set()
    assert stated_numbers("It has one arch.", weak=True) == {"1"}
    assert stated_numbers("Both bridges opened in 1811.", weak=True) == {"1811", "2"}


@pytest.mark.parametrize(("claim", "text", "missing"), [
    ("The Linden Bridge has nine arches [1].", "The Linden Bridge opened in 1811. It has seven arches.", "9"),
    ("The Linden Bridge has 9 arches [1].", "The Linden Bridge opened in 1811. It has seven arches.", "9"),
    ("银雾于一九八七年育成[1]。", "研究所育成了耐寒品种银雾。银雾于1978年育成。", "1987"),
    ("林登桥有九座拱[1]。", "林登桥于1811年建成，有七座拱。", "9"),
])
def test_a_wrong_number_in_words_fails_the_numbers_check_whatever_the_judge_says(claim: str, text: str,
                                                                                 missing: str) -> None:
    judge, llm = _yes_judge()
    check = Verifier(judge).check(claim, {"1": text})
    assert check.method == "numbers" and not check.kept and llm.calls == []
    assert missing in check.reason


@pytest.mark.parametrize(("claim", "text"), [
    ("The Linden Bridge has 7 arches [1].", "The Linden Bridge opened in 1811. It has seven arches."),
    ("The Linden Bridge has seven arches [1].", "The Linden Bridge opened in 1811 and has 7 arches."),
    ("银雾于一九七八年育成[1]。", "研究所育成了耐寒品种银雾。银雾于1978年育成。"),
    ("Marrick was one of the engineers of the bridge [1].", "Marrick and Kovacs were the engineers of the bridge."),
])
def test_the_same_number_in_words_or_digits_goes_on_to_the_judge(claim: str, text: str) -> None:
    judge, llm = _yes_judge()
    check = Verifier(judge).check(claim, {"1": text})
    assert check.method == "llm:yes-judge" and check.kept and len(llm.calls) == 1


def test_an_answer_with_a_wrong_number_in_words_is_not_delivered(tmp_path: Path) -> None:
    eng = make_engine(tmp_path)
    judge, _ = _yes_judge()
    reply = answering("The Linden Bridge has nine arches [{n}].", "seven arches", "It has seven arches.")
    r = ask(eng, ScriptedLLM([reply]), "How many arches does the Linden Bridge have?", judge=judge)
    assert "nine arches" not in r.answer
    assert [(c.verdict, c.method) for c in r.claims] == [("UNRELATED", "numbers")]
    eng.close()
