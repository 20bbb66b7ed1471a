"""Deterministic checks on a question, shared by the router (which decides the route) and the
answerer (which shapes the reply): an unresolved reference that needs clarifying (SPEC C4), and
whether the question asks for a number, year or date; and whether a question can be taken at all."""

from __future__ import annotations

import re

from cograg.errors import CogragError
from cograg.messages import message
from cograg.text import has_word_characters, language_of

_AMBIGUOUS_EN = re.compile(r"\b(this|that|these|those|the above|said|aforementioned)\s+(method|approach|one|thing|document|paper|file|result|issue|problem|function|option|version|case|idea)\b|^\s*(what|how|why)\s+about\s+(it|that|this|them)\b", re.I)
_AMBIGUOUS_ZH = re.compile(r"(这个|那个|该|上述|上面的?|刚才的?|前面的?)(方法|方案|文档|文件|问题|结果|函数|版本|东西|情况)|^(它|那|这)(呢|的)")


_EXPECTS_NUMBER = re.compile(
    r"\b(how\s+(many|much|long|old|far|tall|high|big)|what\s+(year|date|time|percentage)|which\s+year|when\s+(was|were|did|is|does|will))\b"
    r"|哪一年|哪年|何年|哪一天|什么时候|何时|多少|几[个年月日天次条种位座岁人名家项件所]|多大|多长|多高|多远|多久", re.I)
_HAS_NUMBER = re.compile(r"\d|[一二三四五六七八九十百千万两零〇]|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
                         r"twenty|thirty|forty|fifty|hundred|thousand|million|billion|dozen|half|once|twice)\b", re.I)


def expects_number(question: str) -> bool:
    """The question asks for a quantity, year or date (deterministic answer-type check)."""
    return bool(_EXPECTS_NUMBER.search(question))


def has_number(text: str) -> bool:
    """`text` states a number: digits, Chinese numerals or an English number word."""
    return bool(_HAS_NUMBER.search(text))


def needs_clarification(question: str, has_context: bool) -> str | None:
    """C4: a reference like "this method" with nothing in the conversation to point at."""
    if has_context:
        return None
    m = _AMBIGUOUS_EN.search(question) or _AMBIGUOUS_ZH.search(question)
    if not m:
        return None
    return message("clarify.which_reference", language_of(question),
                   reference=m.group(0), noun=m.group(0).split()[-1])


def checked_question(question: str, max_chars: int) -> str:
    """The stripped question, or QuestionError for an empty or oversized one or one with no word
    to search for (checked before any model is loaded for it, and again by the answerer)."""
    q = (question or "").strip()
    if not q:
        raise QuestionError("empty question")
    if len(q) > max_chars:
        raise QuestionError(f"question too long ({len(q)} characters; the limit is {max_chars})")
    if not has_word_characters(q):
        raise QuestionError("the question has no words, only punctuation or symbols")
    return q


class QuestionError(CogragError):
    """The question cannot be answered as given (empty, too long, no words)."""


__all__ = ["QuestionError", "checked_question", "expects_number", "has_number", "needs_clarification"]
