"""Compaction's LLM step may shorten the rule-built summary but never turn it around (SPEC E4,
"the model proposes, the system decides"): a condensed sentence that drops or moves a negation, or
swaps who did what, is refused by a deterministic rule; a real condensation (words dropped, a
line's clauses merged, lines merged) still replaces the rule lines. English and Chinese."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from cograg.memory.compaction import condense
from cograg.models.llm import ChatMessage
from cograg.testing import ScriptedLLM

EN = ["Did the 1902 flood destroy the Linden Bridge? — The 1902 flood did not destroy the Linden Bridge.",
      "Was Tobias Marrick paid for the design? — Tobias Marrick was not paid for the design of the Linden Bridge.",
      "Who founded the Marrick company? — Tobias Marrick founded the Marrick company in 1809."]
ZH = ["1902年的洪水摧毁了林登桥吗？ — 1902年的洪水没有摧毁林登桥。",
      "马里克获得设计报酬了吗？ — 马里克未获得林登桥的设计报酬。",
      "谁创立了马里克公司？ — 马里克创立了马里克公司。"]  # the founder and his company share a name


def words(text: str) -> int:
    return len(text.split()) + len(re.findall(r"[\u4e00-\u9fff]", text))


def summarizer(rewrite: Callable[[str], str]) -> ScriptedLLM:
    """A model that condenses the notes it is given: each note's answer, rewritten by `rewrite`."""
    def reply(messages: list[ChatMessage]) -> str:
        notes = re.search(r"<notes>\n(.*?)\n</notes>", messages[-1].content, re.S).group(1)
        answers = [ln.split(" — ", 1)[-1] for ln in notes.splitlines()]
        return json.dumps({"sentences": [rewrite(a) for a in answers]}, ensure_ascii=False)
    return ScriptedLLM([reply])


def drop_negations(answer: str) -> str:
    return re.sub(r"\s*\b(?:not|never|no)\b|没有|[不没未]", "", answer)


def swap_roles(answer: str) -> str:
    m = re.fullmatch(r"(.+?) founded (.+?)( in \d+)?\.", answer) or re.fullmatch(r"(.+?)创立了(.+?)()。", answer)
    if not m:
        return answer
    return f"{m.group(2)} founded {m.group(1)}{m.group(3)}." if "founded" in answer else f"{m.group(2)}创立了{m.group(1)}。"


@pytest.mark.parametrize("lines", [EN[:2], ZH[:2]], ids=["en", "zh"])
def test_a_summary_that_drops_the_negations_keeps_the_rule_lines(lines: list[str]):
    summary, report = condense(lines, summarizer(drop_negations), count_tokens=words)
    assert report["method"] == "rules" and summary == "\n".join(lines)


@pytest.mark.parametrize("lines", [EN, ZH], ids=["en", "zh"])
def test_only_the_sentences_whose_negation_was_dropped_are_refused(lines: list[str]):
    summary, report = condense(lines, summarizer(drop_negations), count_tokens=words)
    assert report["kept"] == 1 and summary == lines[2].split(" — ")[1]  # the line with no negation


@pytest.mark.parametrize("lines", [EN, ZH], ids=["en", "zh"])
def test_a_summary_that_swaps_who_founded_what_loses_that_sentence(lines: list[str]):
    summary, report = condense(lines, summarizer(swap_roles), count_tokens=words)
    swapped = swap_roles(lines[2].split(" — ")[1])
    assert swapped not in summary
    assert report["kept"] == 2 and report["method"] == "llm"  # the other two answers are faithful


@pytest.mark.parametrize("lines", [EN, ZH], ids=["en", "zh"])
def test_a_faithful_condensation_of_the_answers_replaces_the_rule_lines(lines: list[str]):
    summary, report = condense(lines, summarizer(lambda a: a), count_tokens=words)
    assert report == {"prompt": "summarize_session@1", "method": "llm", "proposed": 3, "kept": 3}
    assert summary == " ".join(ln.split(" — ")[1] for ln in lines)


def test_the_negation_of_a_line_must_stay_with_its_own_words():
    from cograg.memory.compaction import faithful

    lines = ["When did the Linden Bridge open? — The Linden Bridge opened in 1811.",
             "Did the 1902 flood destroy the Linden Bridge? — The 1902 flood did not destroy the Linden Bridge."]
    assert faithful("The 1902 flood did not destroy the Linden Bridge, which opened in 1811.", lines)
    assert faithful("The 1902 flood never destroyed the Linden Bridge.", lines)  # another negation word
    assert not faithful("The Linden Bridge did not open in 1811.", lines)  # a negation added
    assert not faithful("The 1902 flood destroyed the Linden Bridge.", lines)  # a negation dropped
    assert not faithful("The 1902 flood did not open the Linden Bridge in 1811.", lines)  # moved onto line 1
    assert not faithful("The Linden Bridge destroyed the 1902 flood.", lines)
    zh = ["林登桥是哪一年建成的？ — 林登桥未被1902年的洪水摧毁，由马里克设计。"]
    assert faithful("林登桥没有被1902年洪水摧毁。", zh) and faithful("林登桥由马里克设计。", zh)
    assert not faithful("林登桥被1902年的洪水摧毁。", zh)
    assert not faithful("林登桥不是由马里克设计。", zh)


def test_a_questions_negation_asserts_nothing():
    from cograg.memory.compaction import faithful

    lines = ["Was the bridge not destroyed in 1902? — The bridge was destroyed in 1902."]
    assert faithful("The bridge was destroyed in 1902.", lines)
    assert not faithful("The bridge was not destroyed in 1902.", lines)
    # the question's words are governed by its answer's negation: they cannot restate it unnegated
    asked = ["Was Tobias Marrick paid for the design? — He was not."]
    assert not faithful("Tobias Marrick was paid for the design.", asked)


def test_real_condensations_drop_words_and_merge_a_lines_clauses():
    from cograg.memory.compaction import faithful

    lines = ["Who designed the Linden Bridge? — The Linden Bridge was designed by Tobias Marrick, "
             "and it was not damaged by the 1902 flood.",
             "When did the Linden Bridge open? — The Linden Bridge opened in 1811."]
    assert faithful("The Linden Bridge, designed by Tobias Marrick, was not damaged by the 1902 flood.", lines)
    assert faithful("The Linden Bridge was designed by Tobias Marrick.", lines)  # the negated clause dropped
    assert faithful("The Linden Bridge was not damaged by the 1902 flood.", lines)
    assert faithful("The Linden Bridge opened in 1811 and was designed by Tobias Marrick.", lines)
    # a question's words do not complete its answer: "In 1811." alone states no opening
    assert not faithful("The Linden Bridge opened in 1811.", ["When did the Linden Bridge open? — In 1811."])
    zh = ["茶叶研究所育成了什么？ — 茶叶研究所育成了新的茶树品种，但没有推广。"]
    assert faithful("茶叶研究所育成新品种。", zh) and faithful("茶叶研究所育成的品种没有推广。", zh)
    assert not faithful("茶叶研究所推广了新品种。", zh)


def test_compacting_with_a_model_that_drops_negations_keeps_the_verified_lines(tmp_path: Path):
    from cograg.config import MemoryConfig
    from cograg.memory import SessionMemory, SQLiteMemoryStore
    from cograg.memory.models import TurnRecord

    store = SQLiteMemoryStore(tmp_path)
    mem = SessionMemory(store, MemoryConfig(keep_raw_turns=1), doc_hash=lambda d: None, generation=lambda: "0")
    store.create_session("s")
    for i, line in enumerate(EN):
        question, _ = line.split(" — ")
        store.commit_turn(TurnRecord(turn_id=f"t{i}", session_id="s", question=question, summary_short=line,
                                     tokens=20), [])
    result = mem.compact("s", llm=summarizer(drop_negations))
    rolling = mem.session("s").summary.rolling
    assert result.folded == 2 and result.summary["method"] == "rules"
    assert "did not destroy" in rolling and "was not paid" in rolling
    store.close()
