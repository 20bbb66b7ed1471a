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
from typing import Any

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


def contains_gold(answers: Sequence[str], prediction: str) -> bool:
    """A gold answer appears in the prediction (NFKC, case and whitespace folded), as whole words
    where it starts or ends with a Latin letter or digit."""
    text = unicodedata.normalize("NFKC", prediction).lower()
    return any(_gold_pattern(a).search(text) for a in answers if a.strip())


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
