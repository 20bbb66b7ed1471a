"""Answer and label scoring shared by the evals (SPEC H).

Chinese answers: the official CMRC 2018 evaluation (ymcui/cmrc2018, `cmrc2018_evaluate.py`, v5):
mixed segmentation (each CJK character and each listed punctuation mark is a segment, the runs
between are word-tokenised), F1 from the longest common *substring* of the two segment lists,
exact match after removing the listed punctuation; the best score over the gold answers counts.
The official script calls `nltk.word_tokenize`, which first splits sentences with the punkt
model; here the runs go straight to the same word tokenizer (`NLTKWordTokenizer`), which needs
no downloaded data — a difference only for a run holding several English sentences.

English answers: SQuAD v1.1's `evaluate-v1.1.py`: lower case, punctuation and the articles
a/an/the removed, whitespace tokens; F1 from the multiset overlap; the best over the gold answers.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

# the official list, "……" included as written (a two-character entry, so it never matches a character)
CMRC_PUNCTUATION = ['-', ':', '_', '*', '^', '/', '\\', '~', '`', '+', '=',
                    '，', '。', '：', '？', '！', '“', '”', '；', '’', '《', '》', '……', '·', '、',
                    '「', '」', '（', '）', '－', '～', '『', '』']
_CMRC_CJK = re.compile(r"[\u4e00-\u9fa5]")


@lru_cache(maxsize=1)
def _word_tokenizer() -> Any:
    from nltk.tokenize import NLTKWordTokenizer

    return NLTKWordTokenizer()


def mixed_segmentation(text: str, rm_punc: bool = False) -> list[str]:
    text = str(text).lower().strip()
    segments: list[str] = []
    run = ""
    for char in text:
        if rm_punc and char in CMRC_PUNCTUATION:
            continue
        if _CMRC_CJK.search(char) or char in CMRC_PUNCTUATION:
            if run:
                segments.extend(_word_tokenizer().tokenize(run))
                run = ""
            segments.append(char)
        else:
            run += char
    if run:
        segments.extend(_word_tokenizer().tokenize(run))
    return segments


def remove_punctuation(text: str) -> str:
    return "".join(c for c in str(text).lower().strip() if c not in CMRC_PUNCTUATION)


def longest_common_substring(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common contiguous run of segments (the official `find_lcs`)."""
    best = 0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                current[j + 1] = previous[j] + 1
                best = max(best, current[j + 1])
        previous = current
    return best


def cmrc_f1(answers: Sequence[str], prediction: str) -> float:
    scores = [0.0]
    for answer in answers:
        gold, pred = mixed_segmentation(answer, rm_punc=True), mixed_segmentation(prediction, rm_punc=True)
        common = longest_common_substring(gold, pred)
        if common == 0:
            continue
        precision, recall = common / len(pred), common / len(gold)
        scores.append(2 * precision * recall / (precision + recall))
    return max(scores)


def cmrc_em(answers: Sequence[str], prediction: str) -> float:
    pred = remove_punctuation(prediction)
    return float(any(remove_punctuation(a) == pred for a in answers))


def squad_normalize(text: str) -> str:
    text = text.lower()
    text = "".join(c for c in text if c not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_f1(answers: Sequence[str], prediction: str) -> float:
    best = 0.0
    pred = squad_normalize(prediction).split()
    for answer in answers:
        gold = squad_normalize(answer).split()
        same = sum((Counter(pred) & Counter(gold)).values())
        if same:
            precision, recall = same / len(pred), same / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def squad_em(answers: Sequence[str], prediction: str) -> float:
    pred = squad_normalize(prediction)
    return float(any(squad_normalize(a) == pred for a in answers))


def exact_match(answers: Sequence[str], prediction: str, lang: str) -> float:
    return cmrc_em(answers, prediction) if lang == "zh" else squad_em(answers, prediction)


def f1(answers: Sequence[str], prediction: str, lang: str) -> float:
    return cmrc_f1(answers, prediction) if lang == "zh" else squad_f1(answers, prediction)


def _fold(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).lower().split())


_ALNUM = "a-z0-9\u00c0-\u024f"  # a gold answer's Latin letters and digits: whole words only


def _without_edge_punctuation(answer: str) -> str:
    """The gold answer without punctuation at its ends: HotpotQA's "Walt Disney Pictures." ends a
    sentence, and an answer that names "Walt Disney Pictures [1]" holds it (SQuAD's normalisation,
    which EM and F1 use, removes all punctuation). Punctuation inside stays ("Hank Williams, Jr")."""
    return answer.strip().strip("".join(c for c in answer if unicodedata.category(c).startswith("P"))).strip()


def _gold_pattern(answer: str) -> re.Pattern[str]:
    """The folded gold answer as a pattern over the folded prediction: any whitespace between its
    characters, and where it begins or ends with a Latin letter or digit, no letter or digit
    beside it (the gold "no" is not in "not", nor "seven" in "seventeen"; "1984" is in "1984年").
    Punctuation at the gold's ends is not required (`_without_edge_punctuation`)."""
    chars = _fold(_without_edge_punctuation(answer) or answer)
    body = r"\s*".join(re.escape(c) for c in chars)
    head = rf"(?<![{_ALNUM}])" if re.match(rf"[{_ALNUM}]", chars) else ""
    tail = rf"(?![{_ALNUM}])" if re.search(rf"[{_ALNUM}]$", chars) else ""
    return re.compile(head + body + tail)


def gold_mentioned(answers: Sequence[str], prediction: str) -> bool:
    """A gold answer appears anywhere in the prediction (NFKC, case and whitespace folded), as whole
    words where it starts or ends with a Latin letter or digit. The contains-gold rule until it
    asked how the answer commits to the gold; kept to re-score stored reports with both
    (benchmarks/rescore_answers.py)."""
    text = unicodedata.normalize("NFKC", prediction).lower()
    return any(_gold_pattern(a).search(text) for a in answers if a.strip())


def contains_gold(answers: Sequence[str], prediction: str, question: str | None = None) -> bool:
    """The prediction commits to a gold answer: the gold appears (as in `gold_mentioned`, citation
    markers left out) in at least one place where the answer asserts it. No place counts where

    - it is negated: a negation ("not", "never", "neither"/"nor", "cannot", "…n't"; "不是", "并非",
      "而非", "没有", …) stands at most two words (three CJK characters) before it in the same
      clause ("It was not Tobias Marrick", "does not have seven arches", "不是光荣"); "not only" and
      "not … than" do not negate ("X is not older than Y" leaves Y asserted);
    - it is offered as one of alternatives: joined to another item by or/或/或者/还是, directly or
      through a comma list ("1981, 1982, 1983, 1984 or 1985", "Tobias Marrick or the city"), or
      after "either"/"whether";
    - it is one of a list of three or more short items joined by and/和/与/及 (or by 、 alone),
      unless `question` asks for several things ("Which two…", "List…", "哪些"). A list item is at
      most two words longer than the gold and is no relative or appositive clause.

    A yes/no gold also gets no credit when the answer gives the other answer word as well (a
    sentence opening "No," beside "Yes, …", or "yes or no"), and only "or" right beside it makes it
    an alternative: "Yes, A and B are both directors" lists A and B, not three answers.

    An answer that names other entities in passing still counts: "Tobias Marrick designed the
    bridge with Anna Kovacs", "X is older than Y" (HotpotQA's comparison questions name both
    candidates), "A and B designed it" (a pair is no candidate list). The rule reads surface
    patterns only; it is deterministic and needs no model."""
    text = unicodedata.normalize("NFKC", _strip_markers(prediction)).lower()
    several = question is not None and bool(_ASKS_FOR_SEVERAL.search(question.lower()))
    return any(_credited(a, text, several) for a in answers if a.strip())


def _strip_markers(text: str) -> str:
    from cograg.answer.markers import strip_markers

    return strip_markers(text)


# --- how an answer commits to a gold mention (contains_gold) ---------------------------------------
_YES_NO = {"yes": "no", "no": "yes"}
_NEGATION_EN = r"(?:\bnot|\bnever|\bneither|\bnor|\bcannot|n['’]t)"
# words that end a negation's reach, or show it does not deny what follows ("not only X", "not older than Y")
_NOT_DENIAL = r"(?:but|rather|instead|yet|only|just|merely|simply|solely|than|as)\b"
_NEGATED_EN = re.compile(rf"{_NEGATION_EN}(?!\s+{_NOT_DENIAL})(?:\s+(?!{_NOT_DENIAL})[^\s,，;；:：.。!?！？]+){{0,2}}\s*$")
_NEGATED_ZH = re.compile(r"(?:不是|并非|而非|绝非|并不|没有|从未|未曾|不曾|并未|从不)[^\s,，、;；:：.。!?！？而但却]{0,3}$")
_OR = r"(?:\bor\b|或者|或是|或(?!许)|还是)"
_AND = r"(?:\band\b|以及|和|与|及|跟)"
_SEP = r"\s*[,，、]\s*"
# a word of an item; a conjunction is no word of one (it joins two)
_TOKEN = r"(?!(?:or|and)\b)[^\s,，、;；:：。!?！？()（）或和与及]{1,25}"
# a clause, not a candidate: "Tobias Marrick, who lived in Linden or nearby, …", "Jack Owens, a songwriter, and …"
_NOT_ITEM = (r"(?!(?:who|which|that|where|when|whose|whom|while|although|because|since|if|as|a|an|known|born|"
             r"also|then)\b)")
_ITEM = rf"{_NOT_ITEM}{_TOKEN}(?:\s+{_TOKEN}){{0,3}}"
_RIGHT_LIST = re.compile(rf"(?P<items>(?:{_SEP}{_ITEM})*)(?:\s*,?\s*(?P<conj>{_OR}|{_AND})\s*(?P<last>{_ITEM}))?")
_LEFT_CONJ = re.compile(rf"(?:(?P<items>(?:{_ITEM}{_SEP})*){_ITEM})?\s*,?\s*(?P<conj>{_OR}|{_AND})\s*$")
_LEFT_SEP = re.compile(rf"(?P<items>(?:{_ITEM}{_SEP})+)$")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_CLAUSE_END = re.compile(r"[,，;；:：。!?！？]|[.](?=\s|$)")
_SENTENCE_END = re.compile(r"[;；。!?！？]|[.](?=\s|$)")
_ASKS_FOR_SEVERAL = re.compile(r"\b(?:which|what|name|list)\s+(?:two|three|four|five|both|all)\b|\blist\b|"
                               r"\b(?:what|who|which)\s+(?:are|were)\b|哪些|哪几|分别|列出")


def _credited(answer: str, text: str, several: bool) -> bool:
    yes_no = _YES_NO.get(_fold(_without_edge_punctuation(answer) or answer))
    if yes_no is not None and _says_answer_word(text, yes_no):
        return False
    return any(_asserted(text, m.start(), m.end(), answer_word=yes_no is not None, several=several)
               for m in _gold_pattern(answer).finditer(text))


def _says_answer_word(text: str, word: str) -> bool:
    """`word` (yes or no) stands as an answer: opening a sentence before a stop or comma ("No, …"),
    or beside the other answer word ("yes or no", "yes and no")."""
    alone = rf"(?:^|[.!?;:。！？；]\s*){word}(?=\s*(?:[,.;:!?，。；！？]|$))"
    paired = r"\b(?:yes\s*(?:or|and|nor|/)\s*no|no\s*(?:or|and|nor|/)\s*yes)\b"
    return bool(re.search(alone, text) or re.search(paired, text))


def _last_part(text: str, boundary: re.Pattern[str]) -> str:
    """What follows the last `boundary` in `text` (the clause or sentence the mention is in)."""
    ends = list(boundary.finditer(text))
    return text[ends[-1].end():] if ends else text


def _asserted(text: str, start: int, end: int, *, answer_word: bool, several: bool) -> bool:
    """The mention text[start:end] is asserted: not negated, no alternative, no candidate in a list."""
    left, right = text[max(0, start - 300):start], text[end:end + 300]
    clause = _last_part(left, _CLAUSE_END)
    if _NEGATED_EN.search(clause) or _NEGATED_ZH.search(clause):
        return False
    if answer_word:  # "yes or no", "whether yes or no": the answer word beside an alternative
        return not (re.match(rf"\s*,?\s*{_OR}", right) or re.search(rf"(?:{_OR}|\bwhether)\s*$", left))
    sentence = _last_part(left, _SENTENCE_END)
    if re.search(r"\b(?:either|whether)\s*$", sentence):
        return False
    chain = _list_around(sentence, right, gold_tokens=len(text[start:end].split()))
    if any(re.fullmatch(_OR, c) for c in chain.conjunctions):
        return False
    return several or chain.items < 3 or not chain.enumerates(cjk=bool(_CJK.search(text[start:end] + chain.text)))


class _Chain(NamedTuple):
    """The list a mention is an item of: its items (the mention counted), the conjunctions and the
    separators joining them, and its text beside the mention."""
    items: int
    conjunctions: list[str]
    separators: str
    text: str

    def enumerates(self, *, cjk: bool) -> bool:
        """An enumeration: items joined by and/和/与/及, or by 、 alone. In Chinese a comma joins
        clauses ("…政府建筑物，非公共空间，所以…和…"), so there only 、 joins items; "or" joins
        alternatives in either language and is read before this."""
        only_enumeration_commas = bool(self.separators) and set(self.separators) == {"、"}
        if cjk and self.separators and not only_enumeration_commas:
            return False
        return bool(self.conjunctions) or only_enumeration_commas


def _list_around(left: str, right: str, *, gold_tokens: int) -> _Chain:
    """The list the mention is an item of, read from the text before (`left`) and after (`right`)
    it. An item longer than the gold by more than two words ends the list."""
    longest = gold_tokens + 2
    items, conjunctions, separators, text = 1, [], "", ""
    m = _RIGHT_LIST.match(right)
    if m and m.group(0).strip():
        kept = re.split(_SEP, m.group("items"))[1:]
        if all(len(i.split()) <= longest for i in kept):
            items += len(kept)
            separators += "".join(re.findall(r"[,，、]", m.group("items")))
            text += m.group(0)
            if m.group("conj"):  # where the last item ends is not known: its length says nothing
                items += 1
                conjunctions.append(m.group("conj"))
    m = _LEFT_CONJ.search(left) or _LEFT_SEP.search(left)
    if m:
        before = [i for i in re.split(_SEP, m.group("items") or "") if i.strip()]
        if conj := m.groupdict().get("conj"):  # the item right before the conjunction counts as well
            conjunctions.append(conj)
            items += 1
        items += len([i for i in before if len(i.split()) <= longest])
        separators += "".join(re.findall(r"[,，、]", m.group("items") or ""))
        text += m.group(0)
    return _Chain(items, conjunctions, separators, text)


def classification_report(gold: Sequence[str], predicted: Sequence[str],
                          labels: Sequence[str]) -> dict[str, Any]:
    """Per-label precision/recall/F1, macro-F1 over `labels`, accuracy and the confusion matrix."""
    per: dict[str, dict[str, float]] = {}
    for label in labels:
        tp = sum(g == label and p == label for g, p in zip(gold, predicted, strict=True))
        fp = sum(g != label and p == label for g, p in zip(gold, predicted, strict=True))
        fn = sum(g == label and p != label for g, p in zip(gold, predicted, strict=True))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per[label] = {"precision": round(precision, 3), "recall": round(recall, 3), "f1": round(f, 3),
                      "support": tp + fn}
    confusion = {g: {p: sum(1 for a, b in zip(gold, predicted, strict=True) if a == g and b == p) for p in labels}
                 for g in labels}
    macro = sum(per[label]["f1"] for label in labels) / len(labels) if labels else 0.0
    accuracy = sum(g == p for g, p in zip(gold, predicted, strict=True)) / len(gold) if gold else 0.0
    return {"macro_f1": round(macro, 3), "accuracy": round(accuracy, 3), "per_label": per, "confusion": confusion}
