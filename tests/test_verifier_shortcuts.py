"""The verifier's verbatim shortcut (SPEC C3, answer/verbatim.py): a claim skips the judge only
where ONE sentence and clause of the cited text holds it and asserts it there. Letters alone
glued sentences together ("… is closed. On weekdays …" held "is closed on weekdays") and read a
denied legend as a fact; the judge was never asked."""

from __future__ import annotations

import pytest

from cograg.answer.contract import insert_markers
from cograg.answer.verifier import Verifier
from cograg.models.judge import LLMJudge
from cograg.retrieval.packing import ContextBlock
from cograg.testing import ScriptedLLM
from cograg import text as text_module
from cograg.text import is_verbatim


def _judge_says(verdict: str, reason: str) -> tuple[LLMJudge, ScriptedLLM]:
    """A judge that has read the case: its verdict is the case's truth, said as many times as asked."""
    llm = ScriptedLLM([f'{{"verdict": "{verdict}", "reason": "{reason}"}}'] * 3, name="case-judge")
    return LLMJudge(llm), llm


# (claim, cited text): the claim's letters are a span of the text, but the text does not assert it
UNASSERTED = [
    # across a sentence boundary: the museum opens on weekdays
    ("The Harbour Museum is closed on weekdays [1].",
     "Every winter the Harbour Museum is closed. On weekdays in summer it opens at nine."),
    ("海港博物馆每年冬季全天闭馆周一至周五[1]。", "海港博物馆每年冬季全天闭馆。周一至周五夏季上午九点开放。"),
    # across a clause break
    ("The Harbour Museum is closed on weekdays [1].",
     "In winter the Harbour Museum is closed, on weekdays in summer it opens at nine."),
    # reported and denied in the same sentence
    ("The Linden Bridge was designed by Napoleon Bonaparte [1].",
     "A popular legend says that the Linden Bridge was designed by Napoleon Bonaparte, but historians have "
     "shown this is false. Its real designer was Tobias Marrick."),
    ("林登桥是由法国皇帝拿破仑·波拿巴亲自设计的[1]。", "据说林登桥是由法国皇帝拿破仑·波拿巴亲自设计的，但这并非事实。"),
    # supposed
    ("The Linden Bridge will be closed to all traffic in 2026 [1].",
     "If the council approves the plan, the Linden Bridge will be closed to all traffic in 2026."),
    ("林登桥将于2026年起对所有车辆关闭[1]。", "如果议会批准该计划，林登桥将于2026年起对所有车辆关闭。"),
    # denied by the next sentence
    ("The Linden Bridge was designed by Napoleon Bonaparte [1].",
     "The Linden Bridge was designed by Napoleon Bonaparte. This is a myth: its designer was Tobias Marrick."),
]


@pytest.mark.parametrize(("claim", "text"), UNASSERTED)
def test_a_span_the_cited_text_does_not_assert_goes_to_the_judge(claim: str, text: str) -> None:
    judge, llm = _judge_says("CONTRADICTED", "the passage does not state this")
    check = Verifier(judge).check(claim, {"1": text})
    assert len(llm.calls) == 1 and check.method == "llm:case-judge"
    assert check.verdict == "CONTRADICTED" and not check.kept


@pytest.mark.parametrize(("claim", "text"), [
    ("It has seven arches of grey stone [1].", "The Linden Bridge opened in 1811. It has seven arches of grey stone."),
    # the claim may add a comma the text does not have, and keep one it has
    ("The Linden Bridge, was designed by Tobias Marrick [1].", "The Linden Bridge was designed by Tobias Marrick."),
    ("银雾于1978年育成，至今仍是本地种植[1]。", "研究所育成了耐寒品种银雾。银雾于1978年育成，至今仍是本地种植面积最大的品种。"),
])
def test_a_span_one_asserted_sentence_holds_needs_no_judge(claim: str, text: str) -> None:
    judge, llm = _judge_says("CONTRADICTED", "never asked")
    check = Verifier(judge).check(claim, {"1": text})
    assert check.method == "verbatim" and check.kept and llm.calls == []


def test_a_span_lies_in_one_sentence_and_clause_of_whole_words() -> None:
    text = "Every winter the Harbour Museum is closed. On weekdays in summer it opens at nine."
    assert not is_verbatim("the Harbour Museum is closed on weekdays", text)
    assert not is_verbatim("the museum is closed in Rome", "In Paris, the museum is closed; in Rome it opens.")
    assert not is_verbatim("ten arches of grey stone", "It has often arches of grey stone.")  # "ten" of "often"
    assert is_verbatim("the bridge cost 4,200 euros to repair", "In 1998 the bridge cost 4,200 euros to repair.")
    (m,) = text_module.verbatim_matches("the Linden Bridge was designed by Napoleon Bonaparte",
                            "A legend says that the Linden Bridge was designed by Napoleon Bonaparte, "
                            "but this is false. It has seven arches.")
    assert m.before == "a legend says that " and m.after.startswith(", but") and m.following == "it has seven arches."


def _block(n: int, text: str) -> ContextBlock:
    return ContextBlock(citation_id=n, doc_id=f"d{n}", chunk_ids=[f"c{n}"], chunk_texts=[text], text=text,
                        token_count=len(text.split()), best_rank=n, title=f"t{n}", source=f"/docs/{n}.md")


def test_the_contract_attaches_no_block_for_letters_glued_across_its_sentences() -> None:
    museum = _block(1, "Every winter the Harbour Museum is closed. On weekdays in summer it opens at nine.")
    legend = _block(2, "A popular legend says that the Linden Bridge was designed by Napoleon Bonaparte, but "
                       "historians have shown this is false.")
    plain = _block(3, "The Linden Bridge was designed by Tobias Marrick.")
    answer = ("The Harbour Museum is closed on weekdays. The Linden Bridge was designed by Napoleon Bonaparte. "
              "The Linden Bridge was designed by Tobias Marrick.")
    marked, inserted = insert_markers(answer, [museum, legend, plain])
    assert inserted == 1
    assert marked == ("The Harbour Museum is closed on weekdays. The Linden Bridge was designed by Napoleon "
                      "Bonaparte. The Linden Bridge was designed by Tobias Marrick [3].")
