"""Text utilities shared by every stage, for Chinese and English alike: language detection,
normalisation for matching, the one sentence splitter, and character n-gram overlap."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Literal, NamedTuple

CJK_RANGE = "\u4e00-\u9fff"
_CJK = re.compile(f"[{CJK_RANGE}]")
_LATIN = re.compile(r"[A-Za-z]")


def is_chinese(text: str) -> bool:
    """Whether `text` is Chinese: it has Han characters, at least a quarter as many as Latin letters
    (so a Chinese question naming an English product is still Chinese)."""
    cjk = len(_CJK.findall(text))
    return cjk > 0 and cjk >= len(_LATIN.findall(text)) / 4


def language_of(text: str) -> Literal["en", "zh"]:
    """"zh" for Chinese text (`is_chinese`), else "en": the key of per-language messages and settings."""
    return "zh" if is_chinese(text) else "en"


def normalise_for_match(text: str) -> str:
    """NFKC, case-folded, markdown emphasis removed, whitespace collapsed: two texts that say the same
    thing in different widths, cases or formatting compare equal."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[*_`#>]+", "", text)  # markdown emphasis never counts against a quote
    return re.sub(r"\s+", " ", text).strip()


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def numbers_in(text: str) -> set[str]:
    """The numbers `text` states, thousands separators dropped ("4,200" → "4200")."""
    return {n.replace(",", "") for n in _NUMBER.findall(normalise_for_match(text))}


def _invisible(c: str) -> bool:
    category = unicodedata.category(c)
    return category in ("Cf", "Co", "Cs") or (category == "Cc" and not c.isspace())


def without_invisible(text: str) -> str:
    """`text` without format, private-use, surrogate and non-space control characters (a soft
    hyphen, a zero-width space, a lone surrogate), as ingestion drops them from documents
    (`ingest/normalize.py`): a query copied from a document as shown must meet its stored terms
    ("har\u00adbour" is "harbour" there)."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(c for c in text if not _invisible(c))


_WORD_CHAR = re.compile(r"[^\W_]")


def has_word_characters(text: str) -> bool:
    """Whether `text` has a letter, digit or CJK character: something a search can look for
    (a question of only punctuation or symbols has not)."""
    return _WORD_CHAR.search(text) is not None


# --------------------------------------------------------------------------- sentences

_CLOSERS = "”’」』）)\"'"
# Chinese full stops end a sentence wherever they stand; ASCII ones only before whitespace, the end
# or a Chinese character, so "3.5", "e.g.x" and URLs with "?" stay whole. A closing quote or bracket
# right after the stop belongs to the sentence it closes. A line break always ends a sentence.
_ENDS = f"[。！？]+[{_CLOSERS}]*|[.!?]+[{_CLOSERS}]*(?=\\s|$|[{CJK_RANGE}])|\\n"
_SENTENCE_END = re.compile(_ENDS)
_SENTENCE_END_SEMICOLON = re.compile(f"{_ENDS}|[；;]")
_STOPS = ".。!?！？"
# text that ends as a sentence does: a stop (or an ellipsis), then any closing quotes or brackets
_ENDS_WHOLE = re.compile(f"[{re.escape(_STOPS)}…][{re.escape(_CLOSERS)}\\]]*\\s*$")


def ends_as_a_sentence(text: str) -> bool:
    """Whether `text` ends as a sentence does, not where a chunk or a line cut it ("… on 14 May
    1903." yes, "… crossing the River Vell on the" no)."""
    return bool(_ENDS_WHOLE.search(text))
# A full stop after a name's initial ("E. B. White", "D.P. Varma") or a title ("Dr. Smith") does
# not end the sentence when more of it follows: split there, "Both E. B. White and Dan Masterson
# were writers" became three sentences, one citation marker on "Both E." and the name lost.
_INITIAL_BEFORE = re.compile(r"(?:^|(?<=[\s.(\"“'‘]))[A-Z]$")
_TITLE_BEFORE = re.compile(r"(?:^|(?<=[\s(\"“'‘]))(?:Mr|Mrs|Ms|Dr|Prof|St|Mt|Fr|Sr|Jr|vs|e\.g|i\.e|cf)$")
_NEXT_WORD = re.compile(r"\s+(\S)(\w*)")
# words that open a new sentence far more often than they continue a name: "Plan B. The …"
_SENTENCE_OPENERS = frozenset(
    "A An And As At But For He Her His However I If In It Its On She So That The Their Then There "
    "These They This Those We When Which Who".split())


def _abbreviation_stop(text: str, m: re.Match[str]) -> bool:
    """Whether the stop `m` is an initial's or a title's full stop inside a sentence (see above)."""
    if m.group() != ".":
        return False
    nxt = _NEXT_WORD.match(text, m.end())
    if nxt is None:
        return False
    before = text[max(0, m.start() - 6):m.start()]
    if _TITLE_BEFORE.search(before):
        return True
    # an initial goes on with a name: a capitalised word (or another initial) that is not a
    # common sentence opener
    word = nxt.group(1) + nxt.group(2)
    return (bool(_INITIAL_BEFORE.search(before)) and nxt.group(1).isupper()
            and word not in _SENTENCE_OPENERS)


def _strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


# a line shaped like code: it opens or closes a block or ends a statement, or holds an assignment,
# a comparison, a call of a method, an import, a definition, a docstring or a comment. (A line
# ending in ":" is code where the next goes in deeper.) Prose shaped so keeps its line breaks.
_CODE_LINE = re.compile(r"[{}\[(;=\\]\s*$|\s=\s|[=!<>]=|\(\)|->|=>|\bimport\b|\bdef\b|\w\.\w+\(|\"\"\"|'''"
                        r"|^\s*(?:return|class|elif|else|try|except|#include|//|/\*)\b")
# a line that names a field ("Q: …", "route: 4", "Opened: 1852"): a line of its own, not a wrap
_FIELD_LINE = re.compile(r"^\s*[^\W\d][\w .'-]{0,30}:\s")
# a list item's marker up to its text, at a line's start: Markdown's "-", "*", "+", "1." or "1)", and
# the "•" of text extracted from PDF and Word files
LIST_ITEM = re.compile(r"(?m)^[ \t]*(?:[-*+•]|\d+[.)])[ \t]+")
# a wrapped line fills most of its paragraph's width; a title or a short last line does not
WRAPPED_LINE_SHARE = 0.6
WRAPPED_MIN_WIDTH = 40


def soft_line_breaks(text: str) -> str:
    """`text` with each line break that wraps a paragraph's line made a space (same length, so the
    offsets of `text` hold). A hard-wrapped text or Markdown file ("The first\\nelectric tram ran on
    …") breaks its lines where the width ran out, not where a sentence ends. A break is a wrap when
    the next line goes on at the same indentation (under a list item's text, after a list item),
    neither line is a field line and the next is not a Markdown block line, no line of the
    paragraph is shaped like code, and the line fills at least `WRAPPED_LINE_SHARE` of the
    paragraph's widest line (`WRAPPED_MIN_WIDTH`+ characters), as the next does unless it ends the
    paragraph: a title over a paragraph, a list of fields or a program keeps its line breaks."""
    lines = text.split("\n")
    chars = list(text)
    at, paragraph = 0, _Paragraph(_run_from(lines, 0))
    for i, line in enumerate(lines):
        if not line.strip():
            paragraph = _Paragraph(_run_from(lines, i + 1))
        at += len(line)
        if i + 1 < len(lines) and line.strip() and paragraph.prose and _wraps(lines, i, paragraph.widest):
            chars[at] = " "
        at += 1
    return "".join(chars)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _run_from(lines: list[str], start: int) -> list[str]:
    """The non-blank lines from `lines[start]` up to the next blank line."""
    run = []
    for line in lines[start:]:
        if not line.strip():
            break
        run.append(line)
    return run


class _Paragraph:
    """A run of non-blank lines: whether it reads as prose (no line shaped like code) and its widest line."""

    def __init__(self, lines: list[str]) -> None:
        self.widest = max((len(line.strip()) for line in lines), default=0)
        block_opener = any(a.rstrip().endswith(":") and _indent(b) > _indent(a) and not LIST_ITEM.match(a)
                           for a, b in zip(lines, lines[1:]))
        self.prose = not block_opener and not any(_CODE_LINE.search(line) for line in lines)


def _starts_block(line: str) -> bool:
    """A Markdown block line or a list item ("•" too): it starts something, it never goes on a line."""
    return bool(MARKDOWN_BLOCK_LINE.match(line) or LIST_ITEM.match(line))


def _wraps(lines: list[str], i: int, widest: int) -> bool:
    """Whether the break after `lines[i]` (of a prose paragraph) wraps a line."""
    line, following = lines[i], lines[i + 1]
    if not following.strip() or _starts_block(following):
        return False
    after = lines[i + 2] if i + 2 < len(lines) else ""
    if (len(following.strip()) < WRAPPED_LINE_SHARE * widest and after.strip()
            and not _starts_block(after)):  # a short line goes on: a title, not a wrap's tail
        return False
    if _FIELD_LINE.match(following) or _FIELD_LINE.match(line):
        return False
    item = LIST_ITEM.match(line)
    if item is None and MARKDOWN_BLOCK_LINE.match(line):
        return False
    if _indent(following) != (item.end() if item else _indent(line)):
        return False
    return widest >= WRAPPED_MIN_WIDTH and len(line.strip()) >= WRAPPED_LINE_SHARE * widest


def sentence_spans(text: str, *, semicolons: bool = False, markers: re.Pattern[str] | None = None,
                   wrapped: bool = False) -> list[tuple[int, int]]:
    """(start, end) offsets of the sentences of `text`, without surrounding whitespace; a sentence
    ends after its stop (and any closing quote) or at a line break.

    `semicolons`: "；" and ";" end a sentence too (for quoting evidence at clause level).
    `markers`: text this pattern matches at the start of a sentence, with an optional stop after it,
    belongs to the sentence before ("X。[1] Y" → "X。[1]", "Y"): citation markers stay attached.
    `wrapped`: a line break that wraps a paragraph's line (`soft_line_breaks`) does not end one: a
    stored document's sentence is read whole, as its slice of `text` (line breaks and all)."""
    rx = _SENTENCE_END_SEMICOLON if semicolons else _SENTENCE_END
    if wrapped:
        text = soft_line_breaks(text)
    spans: list[tuple[int, int]] = []
    start = 0
    for m in rx.finditer(text):
        if _abbreviation_stop(text, m):
            continue
        spans.append(_strip_span(text, start, m.end()))
        start = m.end()
    spans.append(_strip_span(text, start, len(text)))
    spans = [(s, e) for s, e in spans if e > s]
    if markers is None:
        return spans
    out: list[tuple[int, int]] = []
    for s, e in spans:
        pos = s
        while out and (m := markers.match(text, pos, e)) and m.end() > pos:
            pos = m.end()
            while pos < e and text[pos].isspace():
                pos += 1
        if pos > s:
            if pos < e and text[pos] in _STOPS:
                pos += 1
            out[-1] = (out[-1][0], _strip_span(text, s, pos)[1])
            s, e = _strip_span(text, pos, e)
            if e <= s:
                continue
        out.append((s, e))
    return out


def split_sentences(text: str, *, semicolons: bool = False, markers: re.Pattern[str] | None = None,
                    wrapped: bool = False) -> list[str]:
    """The sentences of `text`, stripped, in order (see `sentence_spans` for the options)."""
    return [text[s:e] for s, e in sentence_spans(text, semicolons=semicolons, markers=markers, wrapped=wrapped)]


# --------------------------------------------------------------------------- verbatim spans

# A claim this long (letters and digits) that occurs verbatim in its cited text needs no judge:
# shorter spans ("1844", a bare name) only mean something as an answer, which the judge decides.
VERBATIM_MIN_CHARS = 16
# punctuation that ends a clause. Letters and digits alone glue clauses and sentences together:
# "Every winter the Harbour Museum is closed. On weekdays in summer it opens at nine." holds "the
# Harbour Museum is closed on weekdays" letter for letter. A span may cross a clause break only
# where the claim has one too; the claim may add breaks ("the bridge, was designed by ...")
_CLAUSE_PUNCT = frozenset(",;:()[]{}，；：、（）【】—–")


class VerbatimMatch(NamedTuple):
    """Where a claim occurs verbatim, all normalised (`normalise_for_match`): its sentence around
    the span, and the sentences before and after that one ("" at either end of the text)."""

    before: str
    span: str
    after: str
    previous: str
    following: str


def _clause_core(text: str) -> tuple[str, list[int]]:
    """The letters and digits of `text` with "|" for each clause break, and the offset in `text`
    of each. A comma or stop between digits ("4,200", "3.5") and a hyphen inside a word are no break."""
    core: list[str] = []
    at: list[int] = []
    for i, ch in enumerate(text):
        digits_around = text[i - 1:i].isdigit() and text[i + 1:i + 2].isdigit()
        if ch.isalnum():
            core.append(ch)
        elif ((ch in _CLAUSE_PUNCT and not digits_around) or text[i - 1:i + 2] == " - ") and core and core[-1] != "|":
            core.append("|")
        else:
            continue
        at.append(i)
    return "".join(core), at


def _word_edge(text: str, i: int, step: int) -> bool:
    """Whether `text[i]` is the first (`step` -1) or last (+1) character of its word: a span that
    starts or ends inside a word ("ten" of "often") is no span of the text."""
    j = i + step
    return not 0 <= j < len(text) or not text[j].isalnum() or bool(_CJK.match(text[i]) or _CJK.match(text[j]))


def verbatim_matches(claim: str, evidence: str, min_chars: int = VERBATIM_MIN_CHARS) -> list[VerbatimMatch]:
    """Each place where the claim, ignoring case, spacing and punctuation, is a span of ONE
    sentence of `evidence`, whole words, crossing no clause break the claim does not have itself;
    none for a claim under `min_chars` letters and digits."""
    core = _clause_core(normalise_for_match(claim))[0].strip("|")
    if sum(ch != "|" for ch in core) < min_chars:
        return []
    pattern = re.compile("".join(r"\|?" if ch == "|" else re.escape(ch) for ch in core))
    sentences = [normalise_for_match(s) for s in split_sentences(evidence, wrapped=True)]
    out: list[VerbatimMatch] = []
    for k, sentence in enumerate(sentences):
        text, at = _clause_core(sentence)
        pos = 0
        while (m := pattern.search(text, pos)) is not None:
            pos = m.start() + 1
            start, end = at[m.start()], at[m.end() - 1] + 1
            if _word_edge(sentence, start, -1) and _word_edge(sentence, end - 1, 1):
                out.append(VerbatimMatch(sentence[:start], sentence[start:end], sentence[end:],
                                         sentences[k - 1] if k else "", sentences[k + 1] if k + 1 < len(sentences) else ""))
    return out


def is_verbatim(claim: str, evidence: str, min_chars: int = VERBATIM_MIN_CHARS) -> bool:
    """The claim, ignoring case, spacing and punctuation, is a span of one sentence of the
    evidence (`verbatim_matches`) and at least `min_chars` long. Whether that span says what the
    claim says (it may be reported, supposed or denied there) is the caller's question
    (answer/verbatim.py): the verifier's deterministic test (C3), which the contract also uses to
    attach an unmarked sentence to a block (C2)."""
    return bool(verbatim_matches(claim, evidence, min_chars))


# --------------------------------------------------------------------------- character n-grams


@lru_cache(maxsize=2048)
def char_ngrams(text: str, n: int = 2) -> frozenset[str]:
    """The n-character substrings of `normalise_for_match(text)`. Character pairs match Chinese
    words and English word pieces alike, with no segmenter."""
    s = normalise_for_match(text)
    return frozenset(s[i:i + n] for i in range(len(s) - n + 1))


OverlapMeasure = Literal["of_b", "coefficient"]


def ngram_overlap(a: str, b: str, *, n: int = 2, measure: OverlapMeasure = "of_b") -> float:
    """How many character n-grams `a` and `b` share.

    "of_b": shared / sqrt(|grams of b|) — ranks candidate texts `b` for a fixed `a`: more shared
    grams score higher, and a long `b` does not win merely by being long (not bounded by 1).
    "coefficient": shared / the smaller gram set (overlap coefficient, in [0, 1]) — 1 when one
    text is contained in the other."""
    ga, gb = char_ngrams(a, n), char_ngrams(b, n)
    shared = len(ga & gb)
    if measure == "coefficient":
        return shared / max(1, min(len(ga), len(gb)))
    return shared / (len(gb) ** 0.5 or 1)


# a Markdown line that stands as a block of its own: list item, table row, heading, quote, code fence
MARKDOWN_BLOCK_LINE = re.compile(r"^[ \t]*(?:[-*+][ \t]|\d+[.)][ \t]|[|#>]|```|~~~)")


def is_utf8(text: str) -> bool:
    """Whether `text` came from valid UTF-8: bytes that were not (in a file name, an argument, a
    piped line) reach Python as lone surrogates, which no UTF-8 writer (the store, JSON) accepts."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def readable(text: str) -> str:
    """`text` with each byte that was not UTF-8 shown as "\ufffd", so it can be printed and stored."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def shown_ref(ref: str, limit: int = 80) -> str:
    """An id, path or name as a message quotes it, cut at `limit` characters: a pasted page of
    text is no id, and a one-line error stays one readable line."""
    return repr(ref) if len(ref) <= limit else repr(ref[:limit]) + f"… ({len(ref)} characters)"


def shown_score(score: float | None) -> str:
    """A score as a reason or note shows it to a person: three decimals (all seventeen digits of a
    float read as noise), "none" where there is no score."""
    return "none" if score is None else f"{score:.3f}"


__all__ = [
    "CJK_RANGE",
    "LIST_ITEM",
    "MARKDOWN_BLOCK_LINE",
    "VerbatimMatch",
    "char_ngrams",
    "ends_as_a_sentence",
    "is_chinese",
    "is_utf8",
    "is_verbatim",
    "language_of",
    "ngram_overlap",
    "normalise_for_match",
    "numbers_in",
    "readable",
    "sentence_spans",
    "shown_ref",
    "shown_score",
    "soft_line_breaks",
    "split_sentences",
    "verbatim_matches",
    "without_invisible",
]
