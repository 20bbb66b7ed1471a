"""When a verbatim span of the cited text may stand for the judge (SPEC C3).

A claim the cited text holds word for word is SUPPORTED without asking the judge — if the text
asserts it there. Letter for letter is not enough: "A popular legend says that the Linden Bridge
was designed by Napoleon Bonaparte, but historians have shown this is false" holds "the Linden
Bridge was designed by Napoleon Bonaparte" and denies it. So the span must lie within one sentence
and one clause (`cograg.text.verbatim_matches`), and that sentence must not frame it: no word
outside the span that reports it (says, legend, 据说), supposes it (if, might, 如果) or denies or
narrows it (false, not, except, 并非), and no denial in the sentence before or after ("This is a
myth.", "其实……"). Where such a word stands, the judge decides: a needless judge call costs
latency, a span read out of its context makes the answer unfaithful. The cue lists are wide on
purpose; they only ever send a claim to the judge, never reject one.
"""

from __future__ import annotations

import re

from cograg.answer.markers import strip_markers
from cograg.answer.number_words import stated_numbers
from cograg.text import CJK_RANGE, VerbatimMatch, verbatim_matches

# said, supposed, denied or narrowed, anywhere in the sentence outside the span (normalised text)
_FRAMING_EN = re.compile(
    r"\b(?:says?|said|saying|claim(?:s|ed|ing)?|alleg\w*|reported(?:ly)?|supposed(?:ly)?|purported(?:ly)?"
    r"|rumou?r\w*|legend\w*|myth\w*|according|believ\w*|belief|thought|apparently|folklore|tales?|hearsay"
    r"|suggest\w*|tradition\w*|if|whether|unless|would|could|might|should|(?<!\d )may(?! ?\d)|perhaps"
    r"|possibl[ey]|probabl[ey]|maybe|(?:un)?likely|hypothe\w*|suppos\w*|assum\w*|imagin\w*|propos\w*"
    r"|plann?\w*|intend\w*|expect\w*|speculat\w*|theor\w*|conjectur\w*|pretend\w*|fals\w*|untrue|wrong\w*"
    r"|incorrect\w*|mistak\w*|erroneous\w*|disprov\w*|debunk\w*|refut\w*|den(?:y|ies|ied)|disput\w*"
    r"|doubt\w*|unfounded|apocryphal|fake|hoax|fabricat\w*|misattribut\w*|contrary|actually|instead"
    r"|rather|except\w*|until|not|no(?!\. ?\d)|never|none|nor|neither|cannot|\w+n['’]t|without|other than)\b")
# a sentence next to the span's that denies or corrects what it says
_DENIAL_EN = re.compile(
    r"\b(?:fals\w*|untrue|not true|not the case|never happened|myth\w*|legend\w*|rumou?r\w*|incorrect\w*"
    r"|wrong\w*|mistak\w*|erroneous\w*|disprov\w*|debunk\w*|refut\w*|den(?:y|ies|ied)|no evidence"
    r"|unfounded|apocryphal|hoax|fabricat\w*|misattribut\w*|in fact|actually|in reality|contrary)\b")
_FRAMING_ZH = ("据说", "传说", "相传", "传闻", "据传", "据称", "据报道", "据悉", "谣传", "谣言", "传言", "有人说",
               "认为", "以为", "一说", "声称", "号称", "宣称", "自称", "误传", "坊间", "神话", "如果", "假如", "假设",
               "倘若", "要是", "如若", "若是", "可能", "或许", "也许", "大概", "恐怕", "计划", "打算", "预计", "预期",
               "设想", "应该", "应当", "是否", "能否", "并非", "不是", "不实", "错误", "虚假", "假的", "否认", "否定",
               "驳斥", "辟谣", "澄清", "质疑", "怀疑", "根据", "其实", "实际上", "事实上", "除了", "除外", "以外", "直到")
_DENIAL_ZH = ("不实", "谣言", "谣传", "误传", "传说", "并非", "不是真的", "错误", "虚构", "否认", "辟谣", "没有根据",
              "毫无根据", "其实", "实际上", "事实上", "神话")
# single-character words that deny or suppose, as jieba cuts them (not the 不 of 不久 or the 非 of 非常)
_FRAMING_ZH_WORDS = frozenset("不 没 没有 未 无 非 别 否 若 并不 并无 从未 尚未 未曾 绝非 不会 不能 无法".split())
_HAN = re.compile(f"[{CJK_RANGE}]")


def _chinese_framing(text: str, cues: tuple[str, ...], words: bool) -> bool:
    if not _HAN.search(text):
        return False
    if any(c in text for c in cues):
        return True
    if not words:
        return False
    import jieba  # loaded only for Chinese text, as the verifier's negation check does

    return any(w in _FRAMING_ZH_WORDS for w in jieba.lcut(text))


def framed(match: VerbatimMatch) -> bool:
    """Whether the sentence holding the span reports, supposes, denies or narrows it, or a
    sentence next to it denies it (see the module docstring): then the span is no proof."""
    outside = f"{match.before} … {match.after}"
    neighbours = f"{match.previous} … {match.following}"
    return bool(_FRAMING_EN.search(outside) or _DENIAL_EN.search(neighbours)
                or _chinese_framing(outside, _FRAMING_ZH, words=True)
                or _chinese_framing(neighbours, _DENIAL_ZH, words=False))


def asserted_verbatim(claim: str, evidence: str) -> bool:
    """The claim is a verbatim span of one sentence and clause of `evidence` that the text
    asserts, not reports, supposes or denies: SUPPORTED by construction (after the numbers, names
    and negation checks), with no judge."""
    return any(not framed(m) for m in verbatim_matches(claim, evidence))


def backs_verbatim(sentence: str, texts: list[str]) -> bool:
    """The verifier's deterministic test (C3) for the contract, which attaches an unmarked
    sentence to the block that backs it (C2): the sentence, its numbers included (in digits or
    words), is a span one of `texts` asserts."""
    claim = strip_markers(sentence).rstrip("。！？!?.")
    return any(stated_numbers(claim) <= stated_numbers(t, weak=True) and asserted_verbatim(claim, t) for t in texts)


__all__ = ["asserted_verbatim", "backs_verbatim", "framed"]
