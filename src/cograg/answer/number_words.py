"""Numbers written as words, for the verifier's numbers check (SPEC C3).

The check compares the numbers a claim states with those of its cited text. Digits alone let a
wrong count through when either side spells it: "The Linden Bridge has nine arches [1]" against
"It has seven arches", or "银雾于一九八七年育成" against "银雾于1978年育成". Here such numbers are
read as the digits they stand for, so "nine" is 9 and "一九八七年" is 1987, and a claim is compared
with its source whichever way each writes a number.

What is read, deliberately narrow (a number read where none is meant rejects a true sentence):

* English: zero to nineteen, the tens, their hyphenated or spaced compounds, "hundred" and
  "thousand" combinations ("a hundred and fifty", "two thousand and five"), years said in pairs
  ("nineteen eighty-seven"), and ordinals from "third" on ("twenty-first" too). "million" and
  "billion" end a number as they do after digits: "two million" is 2, as "2 million" is.
* Chinese: positional numerals ("三十", "二十五", "一百零五", "两千"), years written digit by digit
  ("一九八七", three or more digits), and a single numeral only where a measure word follows
  ("七座", "十年", "两位") or 第 precedes it. Two bare digits ("三四个") are an estimate, not a
  number; 万 and 亿 at the end scale as after digits ("三万" is 3, as "3万" is).
* "one", "first", "second" and a lone 一 are articles, ranks or units as often as counts ("one of
  the founders", "一些", "a second"): they count only as `weak` numbers, which the cited side
  reads (a claim's "1" is then found in "one arch") and a claim's side does not; the cited side
  reads "both" as 2 as well.
"""

from __future__ import annotations

import re

from cograg.text import numbers_in

_UNITS = "zero one two three four five six seven eight nine".split()
_TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINAL_UNITS = "zeroth first second third fourth fifth sixth seventh eighth ninth".split()
_ORDINAL_TEENS = ("tenth eleventh twelfth thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth "
                  "nineteenth").split()
_ORDINAL_TENS = "twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth".split()

# word → (value, kind, ordinal)
_WORDS: dict[str, tuple[int, str, bool]] = {
    **{w: (i, "unit", False) for i, w in enumerate(_UNITS)},
    **{w: (10 + i, "teen", False) for i, w in enumerate(_TEENS)},
    **{w: (20 + 10 * i, "tens", False) for i, w in enumerate(_TENS)},
    **{w: (i, "unit", True) for i, w in enumerate(_ORDINAL_UNITS) if i},
    **{w: (10 + i, "teen", True) for i, w in enumerate(_ORDINAL_TEENS)},
    **{w: (20 + 10 * i, "tens", True) for i, w in enumerate(_ORDINAL_TENS)},
    "hundred": (100, "hundred", False), "hundredth": (100, "hundred", True),
    "thousand": (1000, "thousand", False), "thousandth": (1000, "thousand", True),
}
_WEAK_WORDS = frozenset({"one", "first", "second"})
# number words joined by spaces or hyphens, with "and" after a hundred or thousand
_WORD_ALT = "|".join(sorted(_WORDS, key=len, reverse=True))
_EN_RUN = re.compile(rf"\b(?:{_WORD_ALT})(?:(?:[\s-]+|\s+and\s+)(?:{_WORD_ALT}))*\b", re.I)


class _EnglishNumber:
    """One number being read from number words, left to right."""

    def __init__(self) -> None:
        self.thousands = 0
        self.below = 0  # the part under a thousand, or a year's digits
        self.last = ""  # kind of the last word read
        self.words: list[str] = []
        self.closed = False  # an ordinal ends it

    def takes(self, kind: str, value: int) -> bool:
        """Whether a word of `kind` goes on this number (else it starts another)."""
        if self.closed or not self.words:
            return not self.closed
        if kind == "hundred":
            return self.last in ("unit", "teen", "tens", "year") and self.below < 100
        if kind == "thousand":
            return self.last != "thousand" and self.thousands == 0
        if self.last in ("hundred", "thousand"):
            return True
        if self.last == "tens" and kind == "unit":
            return value > 0 and self.below % 10 == 0  # "twenty-one"
        # a pair of two-digit words is a year: "nineteen eighty", "twenty twenty"
        return (self.last in ("teen", "tens") and kind in ("teen", "tens") and 10 <= self.below < 100
                and self.thousands == 0)

    def add(self, word: str, kind: str, value: int, ordinal: bool) -> None:
        if kind == "hundred":
            self.below = (self.below or 1) * 100
        elif kind == "thousand":
            self.thousands, self.below = (self.below or 1) * 1000, 0
        elif self.last in ("teen", "tens") and kind in ("teen", "tens") and self.below < 100:
            self.below, kind = self.below * 100 + value, "tens" if kind == "tens" else "year"
        else:
            self.below += value
        self.last = kind
        self.words.append(word)
        self.closed = ordinal

    def value(self, weak: bool) -> str | None:
        if not self.words or (not weak and len(self.words) == 1 and self.words[0] in _WEAK_WORDS):
            return None
        return str(self.thousands + self.below)


def english_numbers(text: str, *, weak: bool = False) -> set[str]:
    """The numbers `text` writes as English words, as digits ("nine" → "9", "twenty-one" → "21",
    "nineteen eighty-seven" → "1987"). `weak`: "one", "first" and "second" alone count too."""
    out: set[str] = set()
    for run in _EN_RUN.finditer(text):
        current = _EnglishNumber()
        for word in re.findall(r"[a-z]+", run.group(0).lower()):
            if word == "and":
                continue
            value, kind, ordinal = _WORDS[word]
            if not current.takes(kind, value):
                out.add(current.value(weak) or "")
                current = _EnglishNumber()
            current.add(word, kind, value, ordinal)
        out.add(current.value(weak) or "")
    out.discard("")
    if weak and re.search(r"\bboth\b", text, re.I):  # "both" backs a claim's "two"
        out.add("2")
    return out


_ZH_DIGITS = {"〇": 0, "零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
_ZH_SCALES = {"万": 10_000, "亿": 100_000_000}
_ZH_RUN = re.compile("[〇零一二两三四五六七八九十百千万亿]+")
# what follows a single numeral that counts something: measure words and units
_ZH_MEASURE = re.compile("年|月|日|号|天|个|座|位|名|岁|次|种|条|人|家|项|件|所|层|米|公里|千米|厘米|吨|公斤|千克|克|元|"
                         "块|倍|章|部|本|首|场|届|期|季|周|星期|小时|分钟|秒|世纪|代|辆|架|艘|只|头|匹|张|支|间|栋|孔|"
                         "根|道|句|段|节|篇|册|卷|集|版|台|颗|棵|株|片|级|等|成|国|省|市|县|区|州|角|里|亩|度|%")
# words that hold a numeral without stating a number
_ZH_NOT_NUMBERS = frozenset({"千万", "万一", "万千", "一一"})


def _zh_positional(run: str) -> int | None:
    """The value of a positional numeral ("二十五" → 25, "一百零五" → 105, "三万五千" → 35000); a
    run ending in 万 or 亿 with nothing before the scale but one section is that section, as after
    digits ("三万" → 3, like "3万")."""
    total = section = digit = 0
    for i, ch in enumerate(run):
        if ch in _ZH_DIGITS:
            digit = _ZH_DIGITS[ch]
        elif ch in _ZH_UNITS:
            section += (digit or (1 if ch == "十" and i == 0 else 0)) * _ZH_UNITS[ch]
            digit = 0
        else:
            if i == len(run) - 1 and total == 0:
                return section + digit or None
            total += (section + digit) * _ZH_SCALES[ch]
            section = digit = 0
    return total + section + digit


def _zh_value(text: str, run: re.Match[str]) -> tuple[int, bool] | None:
    """(the number `run` states, whether it is a lone 一), or None where it states none."""
    s, after = run.group(0), text[run.end():run.end() + 2]
    if s in _ZH_NOT_NUMBERS or (s == "十" and after.startswith("分") and not after.startswith("分钟")):
        return None
    if not any(ch in _ZH_UNITS or ch in _ZH_SCALES for ch in s):
        if len(s) >= 3:  # a year or a code, digit by digit: "一九八七"
            return int("".join(str(_ZH_DIGITS[ch]) for ch in s)), False
        counted = len(s) == 1 and (_ZH_MEASURE.match(after) is not None or text[run.start() - 1:run.start()] == "第")
        return (_ZH_DIGITS[s], s == "一") if counted else None
    if s[0] in "百千万亿" and len(s) == 1:  # 百年, 千里, 万物: a great many, not a count
        return None
    if len(s) == 1 and _ZH_MEASURE.match(after) is None and text[run.start() - 1:run.start()] != "第":
        return None  # a lone 十 that counts nothing
    value = _zh_positional(s)
    return None if value is None else (value, False)


def chinese_numbers(text: str, *, weak: bool = False) -> set[str]:
    """The numbers `text` writes in Chinese numerals, as digits (see the module docstring).
    `weak`: a lone 一 counts too."""
    out: set[str] = set()
    for run in _ZH_RUN.finditer(text):
        read = _zh_value(text, run)
        if read is not None and (weak or not read[1]):
            out.add(str(read[0]))
    return out


def stated_numbers(text: str, *, weak: bool = False) -> set[str]:
    """The numbers `text` states, in digits or in words, each as digits (`numbers_in` for the
    digits). `weak`: read "one", "first", "second" and a lone 一 as numbers too — for the cited
    text, which may back a claim's "1"; never for the claim, where they are mostly no count."""
    return numbers_in(text) | english_numbers(text, weak=weak) | chinese_numbers(text, weak=weak)


__all__ = ["chinese_numbers", "english_numbers", "stated_numbers"]
