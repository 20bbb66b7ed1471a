"""Deterministic question checks shared by the router and the answerer (cograg.questions)."""

from __future__ import annotations

import pytest

from cograg.questions import expects_number, has_number, needs_clarification


@pytest.mark.parametrize(("question", "expected"), [
    ("How many arches does the bridge have?", True),
    ("When was the bridge built?", True),
    ("银雾是哪一年育成的？", True),
    ("这座桥有几个桥拱？", True),
    ("Who designed the bridge?", False),
    ("银雾茶的口感如何？", False),
])
def test_expects_number(question: str, expected: bool) -> None:
    assert expects_number(question) is expected


@pytest.mark.parametrize(("text", "expected"), [
    ("It was built in 1820.", True),
    ("It has seven arches.", True),
    ("它有三个桥拱。", True),
    ("It was designed by Tobias Marrick.", False),
    ("它由马里克设计。", False),
])
def test_has_number(text: str, expected: bool) -> None:
    assert has_number(text) is expected


def test_needs_clarification_in_both_languages() -> None:
    en = needs_clarification("How fast is this method?", has_context=False)
    assert en is not None and "this method" in en and en.startswith("Which method")
    zh = needs_clarification("这个方法的效果怎么样？", has_context=False)
    assert zh is not None and "这个方法" in zh
    assert needs_clarification("How fast is this method?", has_context=True) is None
    assert needs_clarification("Who designed the Linden Bridge?", has_context=False) is None
