"""How R3's partial reply names what its plan could not establish (SPEC C1, C3, C4).

The planner is a model, so its sub-task descriptions are proposals: the reply is the system's
text and must not carry a claim, a citation marker, a phone number or a page of padding the
planner wrote. The rule, deterministic and the same in English and Chinese:

- A description is shown as written when it is one question (it ends in "?" / "？"), at most
  `MAX_CHARS` long, with no citation marker and no character outside words and plain punctuation
  (unless the user's question has it), and it says nothing the user did not: every English term
  (stemmed) is one of the question's or a look-up word (`LOOKUP_WORDS`), every number is one of
  the question's, every Chinese character is one of the question's or a function character
  (`FUNCTION_ZH`). A template's plan (written by code from the question, no model call) needs only
  the shape: its wording is the system's.
- Otherwise the missing part is named by the user's own words it shares: "the part of the
  question about “Rhine Bridge”" — phrases cut from the question, never from the description.
- Sharing none, it is "a part of the question".
"""

from __future__ import annotations

import re
from functools import lru_cache

from cograg.answer.contract import strip_markers
from cograg.messages import message
from cograg.text import CJK_RANGE, numbers_in, split_sentences

MAX_CHARS = 200  # a sub-question shown as written
MAX_PHRASES = 4  # the user's phrases that name one missing part
MAX_PHRASE_CHARS = 60
MAX_PARTS = 4  # missing parts named in one reply

# words a look-up question adds to the user's without saying anything new ("When was X born?")
LOOKUP_WORDS = "find identify determine look check compare year date name born die died known fact"
# Chinese characters a question is built with, whatever it asks about
FUNCTION_ZH = frozenset("是的了吗呢哪谁什么几多少何时在有个和与或及于被为把从到对这那其一年位些之所")

_PLAIN = re.compile(rf"[^\W_]|[\s,.?;:'’\"“”‘\-–—，。？；：、（）()！!]")
_CJK = re.compile(f"[{CJK_RANGE}]")
# a question's tokens, in order: a Chinese character, a word (with inner apostrophes/hyphens), a number
_TOKEN = re.compile(rf"[{CJK_RANGE}]|[^\W\d_]+(?:['’-][^\W\d_]+)*|\d+(?:[.,]\d+)*")


def missing_text(descriptions: list[str], question: str, lang: str, *, trusted: bool) -> str:
    """What the reply names as not established: each description by `name_missing`, duplicates
    once, at most MAX_PARTS, ending as a sentence."""
    zh = lang == "zh"
    parts = list(dict.fromkeys(name_missing(d, question, lang, trusted=trusted) for d in descriptions))
    parts = parts[:MAX_PARTS]
    if zh:
        text = "；".join(parts)
    else:  # questions run on as sentences; named parts are phrases, kept apart
        text = (" " if all(p.endswith(("?", ".", "!")) for p in parts) else "; ").join(parts)
    return text if text.endswith(("?", ".", "!", "？", "。", "！")) else text + ("。" if zh else ".")


def name_missing(description: str, question: str, lang: str, *, trusted: bool) -> str:
    """One missing sub-task, named by the rule of the module docstring."""
    text = " ".join(description.split())
    if _shown_as_written(text, question, trusted):
        return text
    phrases = shared_phrases(text, question)
    if not phrases:
        return message("refusal.missing_unnamed", lang)
    joined = ("、" if lang == "zh" else ", ").join(f"“{p}”" for p in phrases)
    return message("refusal.missing_about", lang, terms=joined)


def _shown_as_written(text: str, question: str, trusted: bool) -> bool:
    if not text or len(text) > MAX_CHARS or not text.endswith(("?", "？")):
        return False
    if strip_markers(text) != text or len(split_sentences(text)) != 1:
        return False
    if any(not _PLAIN.match(ch) and ch not in question for ch in text):
        return False
    return trusted or _says_nothing_new(text, question)


def _says_nothing_new(text: str, question: str) -> bool:
    terms = _latin_terms(text)
    chars = {ch for ch in text if _CJK.match(ch)}
    if not terms and not chars - FUNCTION_ZH:
        return False  # "What is it?" names nothing
    if not terms <= _latin_terms(question) | _lookup_terms():
        return False
    if not numbers_in(text) <= numbers_in(question):
        return False
    return chars <= set(question) | FUNCTION_ZH


def shared_phrases(text: str, question: str) -> list[str]:
    """The runs of the question's own tokens that the description shares, in question order,
    without function words at their edges (at most MAX_PHRASES, each at most MAX_PHRASE_CHARS)."""
    words = {w.lower() for w in _TOKEN.findall(text)}
    terms, numbers = _latin_terms(text), numbers_in(text)
    runs: list[list[re.Match[str]]] = []
    last_end = -1
    for m in _TOKEN.finditer(question):
        tok = m.group(0)
        if not _shared(tok, text, words, terms, numbers):
            last_end = -1
            continue
        gap = question[last_end:m.start()] if last_end >= 0 else None
        # a phrase runs on over spaces between words, never over punctuation or between Chinese and a space
        joined = gap is not None and (gap == "" or (gap.isspace() and not _CJK.match(tok)))
        if joined:
            runs[-1].append(m)
        else:
            runs.append([m])
        last_end = m.end()
    phrases: list[str] = []
    for run in runs:
        while run and _function(run[0].group(0)):
            run = run[1:]
        while run and _function(run[-1].group(0)):
            run = run[:-1]
        if not run or (all(_CJK.match(m.group(0)) for m in run) and len(run) < 2):
            continue  # one Chinese character names nothing
        phrases.append(_bounded(question[run[0].start():run[-1].end()]))
    # "Bridge" says nothing "Rhine Bridge" does not: each phrase once, and none inside another
    lowered = [p.lower() for p in phrases]
    kept = [p for i, p in enumerate(phrases)
            if lowered.index(lowered[i]) == i and not any(_inside(lowered[i], o) for o in lowered)]
    return kept[:MAX_PHRASES]


def _inside(part: str, whole: str) -> bool:
    """`part` is a shorter run of `whole`: words for English ("art" is not in "party"), characters for Chinese."""
    if part == whole:
        return False
    return part in whole if _CJK.search(part) else f" {part} " in f" {whole} "


def _shared(token: str, text: str, words: set[str], terms: set[str], numbers: set[str]) -> bool:
    """Whether the description has this token of the question: the character, the number, the
    word's stem, or (a stop word) the word itself."""
    if _CJK.match(token):
        return token in text
    if token[0].isdigit():
        return numbers_in(token) <= numbers
    stems = _latin_terms(token)
    return stems <= terms if stems else token.lower() in words


def _function(token: str) -> bool:
    """A token that names nothing: a Chinese function character, an English stop word."""
    if _CJK.match(token):
        return token in FUNCTION_ZH
    return not token[0].isdigit() and not _latin_terms(token)


def _bounded(phrase: str) -> str:
    if len(phrase) <= MAX_PHRASE_CHARS:
        return phrase
    cut = phrase[:MAX_PHRASE_CHARS]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "…"


def _latin_terms(text: str) -> set[str]:
    """Stemmed index terms without stop words; Chinese is compared character by character instead."""
    from cograg.index.analyzer import analyze

    return {t for t in analyze(text) if not _CJK.search(t)}


@lru_cache(maxsize=1)
def _lookup_terms() -> frozenset[str]:
    return frozenset(_latin_terms(LOOKUP_WORDS))


__all__ = ["FUNCTION_ZH", "LOOKUP_WORDS", "MAX_CHARS", "MAX_PARTS", "missing_text", "name_missing", "shared_phrases"]
