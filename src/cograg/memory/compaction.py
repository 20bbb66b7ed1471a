"""Compaction's LLM step (SPEC E4: rules first, the LLM summary second, only verified content).

The rule step folds old turns into summary lines built from verified sentences. The model may then
condense those lines; a sentence of its summary is kept only if it is `faithful` to the lines (a
deterministic check), so the model can shorten the summary but never add to it or turn it around.
Each of the sentence's tokens (analysed English content words, Chinese characters, numbers and
negation words) must be read off one line, such that:

- each line's share of the sentence keeps that line's order: "the company founded Tobias Marrick"
  is not a condensation of "Tobias Marrick founded the company";
- a part of the sentence (a clause, cut again before "and", "which", 和, 并...) is read off one
  sentence of one line: lines are merged between clauses, never inside one, and a question's
  words do not complete its answer's ("Who founded X? — Y founded X." gives no "X founded Y");
- a negation governs the rest of its clause, in the sentence as in the line, and a word is
  governed in the sentence exactly when it is governed in its line, by the line's negation the
  sentence's negation was read from: "did not destroy" never becomes "destroyed", nor "was paid"
  "was not paid", nor does a negation move onto another line's words;
- a question asserts nothing: its negation words count for nothing, and its words are governed by
  the first negation of the answer that follows it ("Was it paid? — It was not paid.").

Dropping words and merging clauses still passes. A model failure, or a summary that is not
shorter, leaves the rule summary."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from cograg.prompts import load_prompt

MAX_SENTENCES = 8
NEG = "\x00neg"  # the token every negation word reads as: "not" and "never" agree with each other
# a sentence that takes longer than this to align with the lines is refused (fail closed)
MAX_ALIGN_STEPS = 20_000

_EN_NEGATIONS = frozenset("not no never without neither nor cannot none nothing nobody nowhere".split())
_ZH_NEGATIONS = frozenset("不没未无非别")
_ZH_NEGATION_WORDS = frozenset({"没有"})  # one negation, like 没 or 未: its 有 is no content word
# two-character words that hold a negation character but negate nothing ("very", "future", "others")
_ZH_NOT_NEGATING = frozenset("非常 未来 别人 别的 特别 区别 分别 类别 级别 性别 识别 告别 无论 无线".split())
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]+")
_LATIN_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
# a sentence ends at . ! ? (not a decimal point) or at the " — " between a turn's question and answer
_SENTENCE_END = re.compile(r"(?<=[?？!！。])|(?<=\.)(?!\d)|\s[—–]\s")
_CLAUSE_END = re.compile(r"[,;:，；：、()（）\[\]\"“”]")
# where a clause of a condensed sentence may switch lines: before a conjunction or relative word
_PART_START = re.compile(r"(?=\b(?:and|but|or|nor|which|who|whom|whose|that|while|whereas|although|though|because|"
                         r"since|after|before|when|where|then|so|yet)\b)|(?=[和与及并但而且或])", re.I)


class SessionDigest(BaseModel):
    sentences: list[str] = Field(default_factory=list)


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:[.,]\d+)*", text))


def contained(sentence: str, source: str) -> bool:
    """Every analysed term and number of `sentence` occurs in `source` (as a set: this alone
    ignores order and negation, which are analyser stop words; `faithful` checks those)."""
    from cograg.index.analyzer import analyze

    terms = set(analyze(sentence))
    return bool(terms) and terms <= set(analyze(source)) and _numbers(sentence) <= _numbers(source)


def _is_en_negation(word: str) -> bool:
    w = word.lower().replace("’", "'")
    return w in _EN_NEGATIONS or w.endswith("n't")


def _zh_tokens(run: str) -> list[str]:
    """A CJK run as ordered tokens: one per character (order is then independent of how the
    segmenter splits a shortened sentence), stop characters out, negations as NEG."""
    from cograg.index.analyzer import ZH_STOPWORDS

    out: list[str] = []
    i = 0
    while i < len(run):
        pair = run[i:i + 2]
        if pair in _ZH_NOT_NEGATING or pair in _ZH_NEGATION_WORDS:
            out.extend([NEG] if pair in _ZH_NEGATION_WORDS else pair)
            i += 2
            continue
        ch = run[i]
        if ch in _ZH_NEGATIONS:
            out.append(NEG)
        elif ch not in ZH_STOPWORDS:
            out.append(ch)
        i += 1
    return out


def _plain_tokens(text: str) -> list[str]:
    """`text` as ordered tokens: analysed English content words (stop words out, stemmed),
    Chinese characters (order is then independent of how the segmenter splits a shortened
    sentence), and NEG for each negation word."""
    from cograg.index.analyzer import analyze

    out: list[str] = []
    pos = 0

    def latin(chunk: str) -> None:
        for word in _LATIN_WORD.findall(chunk):
            out.extend([NEG] if _is_en_negation(word) else analyze(word))

    for m in _CJK_RUN.finditer(text):
        latin(text[pos:m.start()])
        out.extend(_zh_tokens(m.group()))
        pos = m.end()
    latin(text[pos:])
    return out


class Token(NamedTuple):
    text: str
    gov: int | None  # index of the negation governing this token, if any
    part: int  # the clause part it lies in: a part of a condensed sentence is read off one line
    sentence: int  # the sentence it lies in (a question and its answer are two)


def order_tokens(text: str, *, as_line: bool = False) -> list[Token]:
    """`text` as tokens with their governing negation (the last negation before them in their
    clause) and their part (a clause cut before a conjunction or relative word). With `as_line`,
    questions assert nothing (module docstring)."""
    out: list[Token] = []
    asked: list[int] = []  # a question's tokens, waiting for the answer that follows it
    part = 0
    for n, sentence in enumerate(_SENTENCE_END.split(text)):
        question = as_line and sentence.rstrip().endswith(("?", "？"))
        first_neg: int | None = None
        for clause in _CLAUSE_END.split(sentence):
            gov: int | None = None
            for piece in _PART_START.split(clause):
                part += 1
                for tok in _plain_tokens(piece):
                    if tok == NEG and question:
                        continue
                    out.append(Token(tok, gov, part, n))
                    if question:
                        asked.append(len(out) - 1)
                    elif tok == NEG:
                        gov = len(out) - 1
                        first_neg = gov if first_neg is None else first_neg
        if not question and sentence.strip() and asked:
            if first_neg is not None:
                for q in asked:
                    out[q] = out[q]._replace(gov=first_neg)
            asked = []
    return out


def _aligns(sentence: list[Token], lines: Sequence[list[Token]]) -> bool:
    """Whether each token of `sentence` can be read off a line holding it, each line's share in
    that line's order, with every token governed in its line exactly when it is governed in the
    sentence, and then by the line negation the sentence's governing negation was read from; a
    part of the sentence is read off one sentence of one line (merging happens between clauses,
    never inside one: "the company founded" from one line, or a question, and "Tobias Marrick"
    from another, or the answer, is no merge). A depth-first search over (token, each line's
    position, where the sentence's last negation was read, the previous token's line)."""
    at: list[dict[str, list[int]]] = []
    for ln in lines:
        where: dict[str, list[int]] = {}
        for j, t in enumerate(ln):
            where.setdefault(t.text, []).append(j)
        at.append(where)
    if any(all(t.text not in where for where in at) for t in sentence):
        return False  # a word no line holds: no search needed
    failed: set[tuple[int, tuple[int, ...], tuple[int, int] | None, int]] = set()
    steps = 0

    def search(i: int, pos: tuple[int, ...], neg: tuple[int, int] | None, last: int) -> bool:
        nonlocal steps
        if i == len(sentence):
            return True
        steps += 1
        if steps > MAX_ALIGN_STEPS or (i, pos, neg, last) in failed:
            return False
        tok = sentence[i]
        expected = neg if tok.gov is not None else None
        within = -1  # the sentence of its line the previous token of this part was read from
        if i > 0 and sentence[i - 1].part == tok.part:
            order, within = [last], lines[last][pos[last] - 1].sentence
        else:  # the previous token's line first: a sentence's clauses usually follow one line
            order = ([last] if last >= 0 else []) + [k for k in range(len(lines)) if k != last]
        for k in order:
            for j in at[k].get(tok.text, []):
                if j < pos[k]:
                    continue
                if within >= 0 and lines[k][j].sentence != within:
                    break  # later matches lie in later sentences too
                gov = lines[k][j].gov
                if ((k, gov) if gov is not None else None) != expected:
                    continue
                moved = pos[:k] + (j + 1,) + pos[k + 1:]
                if search(i + 1, moved, (k, j) if tok.text == NEG else neg, k):
                    return True
        failed.add((i, pos, neg, last))
        return False

    return search(0, tuple(0 for _ in lines), None, -1)


def faithful(sentence: str, lines: Sequence[str]) -> bool:
    """`sentence` only restates `lines`, in their order and with their negations (module
    docstring). Every content token is read off a line, so this implies `contained` for English;
    for Chinese it compares characters, as dropping a particle changes the analyser's bigrams."""
    return _faithful(sentence, [order_tokens(ln, as_line=True) for ln in lines], _numbers("\n".join(lines)))


def _faithful(sentence: str, lines: Sequence[list[Token]], numbers: set[str]) -> bool:
    if not _numbers(sentence) <= numbers:
        return False
    tokens = order_tokens(sentence)
    if all(t.text == NEG for t in tokens):
        return False
    return _aligns(tokens, lines)


def condense(lines: list[str], llm: Any, *, count_tokens: Any, timeout_s: float = 120.0) -> tuple[str, dict[str, Any]]:
    """(rolling summary, report): the model's faithful sentences when they are shorter than the
    lines, else the lines themselves."""
    from cograg.models import ModelError
    from cograg.models.llm import ChatMessage

    text = "\n".join(lines)
    prompt = load_prompt("summarize_session")
    report: dict[str, Any] = {"prompt": prompt.version, "method": "rules"}
    try:
        digest, _ = llm.chat_json([ChatMessage(role="user", content=prompt.render(notes=text,
                                                                                  max_sentences=MAX_SENTENCES))],
                                  SessionDigest, max_tokens=256, timeout_s=timeout_s)
    except ModelError as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"[:200]
        return text, report
    source, numbers = [order_tokens(ln, as_line=True) for ln in lines], _numbers(text)
    kept = [s.strip() for s in digest.sentences[:MAX_SENTENCES] if s.strip() and _faithful(s, source, numbers)]
    report.update(proposed=len(digest.sentences), kept=len(kept))
    summary = " ".join(kept)
    if kept and count_tokens(summary) < count_tokens(text):
        report["method"] = "llm"
        return summary, report
    return text, report


__all__ = ["Token", "condense", "contained", "faithful", "order_tokens"]
