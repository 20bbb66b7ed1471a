"""What a question is about, found without a model: the entities it names and its other content
words. The verifier uses them to decide whether a sentence copied from a passage still answers the
question (`mentions_subject`); the self-corrective loop's grader is shown the entities, so a small
model grades a passage against what the question names, not against its wording."""

from __future__ import annotations

import logging
import re
from functools import lru_cache

from cograg.text import is_chinese, normalise_for_match

# question words and sentence openers that are capitalised but name nothing
_OPENERS = frozenset("""what who whom whose which when where why how is are was were did do does can could
would should will in on at of the a an name list give tell according for from by as and or if""".split())
_LINK = r"(?:of|and|the|de|del|della|da|du|la|le|von|van|der|den|for|on|in|&)"
_WORD = r"(?:[A-Z][\w'’.\-]*|\d[\w'’.\-]*)"
_CAPITALISED = re.compile(rf"\b{_WORD}(?:\s+(?:{_LINK}\s+)*{_WORD})*")
_QUOTED = re.compile(r"\"([^\"]{2,80})\"|“([^”]{2,80})”|«([^»]{2,80})»"
                     r"|《([^》]{1,60})》|「([^」]{1,60})」|『([^』]{1,60})』")
# jieba part-of-speech tags of proper nouns: person, place, organisation, other proper noun
_ZH_PROPER = ("nr", "ns", "nt", "nz")
_QUESTION_WORDS_ZH = frozenset("什么 哪 哪里 哪个 哪些 哪一年 哪一 是哪 谁 多少 几 怎么 怎样 如何 为什么 为何 "
                               "吗 呢 请问 是否 是 的 了 在 有 和 与 及 被 把 由 于 为".split())
_QUESTION_WORDS_EN = "how many much what when where who whom whose which why does did do name"


def _posseg() -> object:
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    return jieba.posseg


def _latin_entities(question: str) -> list[str]:
    out = []
    for m in _CAPITALISED.finditer(question):
        words = m.group(0).split()
        while words and words[0].lower() in _OPENERS:  # "What", "In the", "Who" open the sentence
            words.pop(0)
        while words and re.fullmatch(_LINK, words[-1]):
            words.pop()
        if words:
            out.append(" ".join(words).rstrip(".'’"))
    return out


@lru_cache(maxsize=256)
def question_entities(question: str) -> tuple[str, ...]:
    """The names a question mentions, in order, without repeats: quoted titles, capitalised word
    runs ("Corliss Archer", "Kiss and Tell") and, in Chinese, the proper nouns jieba tags."""
    found: list[str] = []
    for m in _QUOTED.finditer(question):
        found.append(next(g for g in m.groups() if g).strip())
    unquoted = _QUOTED.sub(" ", question)
    found += _latin_entities(unquoted)
    if is_chinese(question):
        posseg = _posseg()
        for word, flag in posseg.cut(unquoted):  # type: ignore[attr-defined]
            if flag.startswith(_ZH_PROPER) and len(word.strip()) >= 2 and re.search(r"[\u4e00-\u9fff]", word):
                found.append(word.strip())
    seen: dict[str, str] = {}
    for e in found:
        key = normalise_for_match(e)
        if key and not any(key in k for k in seen):
            seen[key] = e
    return tuple(seen.values())


@lru_cache(maxsize=1)
def _question_word_terms() -> frozenset[str]:
    from cograg.index.analyzer import analyze

    return frozenset(analyze(_QUESTION_WORDS_EN))


def content_words(text: str) -> set[str]:
    """The words of `text` that carry meaning: jieba words for Chinese (no bigrams), stemmed
    English terms, without stop words and question words."""
    from cograg.index.analyzer import analyze

    words: set[str] = set()
    if is_chinese(text):
        import jieba

        words |= {w for w in (x.strip() for x in jieba.lcut(text))
                  if re.search(r"[\u4e00-\u9fff]", w) and w not in _QUESTION_WORDS_ZH}
    latin = re.sub(r"[\u4e00-\u9fff]+", " ", text)
    words |= set(analyze(latin)) - _question_word_terms()
    return words


_NOT_NAMES = frozenset({"yes", "no"})  # "Yes, A and B are both …" opens a sentence capitalised


def latin_names(text: str) -> set[str]:
    """The content words of the names `text` writes in Latin script (capitalised runs and quoted
    titles, as `question_entities` finds them; Chinese text is left out), without a word that has
    a digit (numbers are checked on their own) and without "yes" and "no"."""
    latin = re.sub(r"[\u4e00-\u9fff]+", " ", text)
    words = content_words(" ".join(question_entities(latin)))
    return {w for w in words if not any(ch.isdigit() for ch in w)} - _NOT_NAMES


def mentions_subject(sentence: str, question: str, min_other_coverage: float = 0.5) -> bool:
    """Whether `sentence` is about what `question` asks: it names every entity the question names
    and contains at least `min_other_coverage` of the question's other content words (the
    predicate: "designed", "built", "设计"). A true sentence about something else fails."""
    have = normalise_for_match(sentence)
    entities = question_entities(question)
    if any(normalise_for_match(e) not in have for e in entities):
        return False
    entity_words = set().union(*(content_words(e) for e in entities)) if entities else set()
    other = content_words(question) - entity_words
    if not other:
        return bool(entities)
    covered = other & content_words(sentence)
    return len(covered) / len(other) >= min_other_coverage
