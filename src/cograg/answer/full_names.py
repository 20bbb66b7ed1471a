"""A name written as the cited source writes it in full (English), after the sentence is verified.

The 1.5B model shortens the names it copies: the passage says "Sandra Miju Oh, OC (born July 20,
1971) is a Canadian actress", the answer says "Sandra Oh [1]". The short form is what people call
her, but it is not the text the citation points at, and the name in the source is the one a reader
can find there (HotpotQA's gold answers are those full forms: "Sandra Miju Oh", "Gerald Lee
McRaney", 'Nicholas Lofton "Nick" Hexum'; docs/benchmarks.md, "Names as the source writes them").

The rule is deterministic and narrow. A run of two to four capitalised words in a verified sentence
("Sandra Oh") is replaced by a longer form of it when the chunks of the blocks the sentence cites
(what the verifier judged it against) hold exactly one such form:

* middle names or initials between its first and last word: "Sandra Miju Oh", "Waylon J. Smithers";
* a nickname in quotes that is its first word, before its last word, after up to three names:
  'Nicholas Lofton "Nick" Hexum';
* either of these followed by a generational suffix: "Waylon J. Smithers Jr.".

The longer form adds only names (capitalised words, initials, a quoted nickname, a suffix) and keeps
the short form's first and last word; two different longer forms, or none, leave the sentence as it
is. A longer form is the same name only where the cited chunks never write the short form on its
own, outside a title line: "The Linden Bridge was designed by Tobias Marrick. The Linden Railway
Bridge was designed by Anna Kovacs" names two bridges, "John Smith founded Smith Ltd. His son John
Adam Smith sold it" two people, and the verified sentence names the one its chunk calls by the
short form. A title line that is the short form ("Sandra Oh" over "Sandra Miju Oh (born ...") is
the chunk's subject written short, as Wikipedia's titles are, and the same words inside a longer
name ("The Nick Hexum Quintet") are another name. The rule does not know a person from a place: a
run such as "Harbour Line" is written "Harbour Ferry Line" where its cited text says only that.
Every replacement is returned for the trace.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from cograg.answer.markers import MARKER_RE, markers_in
from cograg.retrieval.packing import ContextBlock, block_holding

_NAME_WORD = r"[A-Z][a-z][\w'’-]*"
_RUN = re.compile(rf"(?<![\w'’.\-]){_NAME_WORD}(?:\s+{_NAME_WORD}){{1,3}}(?![\w'’\-])")
_MIDDLE = rf"(?:{_NAME_WORD}|[A-Z]\.)"
_SUFFIX = r"(?:,?\s+(?:Jr\.|Sr\.|II|III|IV)(?![\w]))?"


class NameWritten(BaseModel):
    """One name replaced by the longer form its citation holds."""

    sentence_index: int
    short: str
    full: str


def _longer_forms(short: str, text: str) -> set[str]:
    """The longer forms of `short` that `text` holds (see the module docstring)."""
    words = short.split()
    first, last = re.escape(words[0]), re.escape(words[-1])
    inner = r"\s+".join(re.escape(w) for w in words[1:-1])
    found: set[str] = set()
    # an added name is none of the short form's words ("Sandra Oh Sandra Miju Oh", a title before
    # the text, must not match from its first "Sandra")
    not_own = rf"(?!(?:{'|'.join(re.escape(w) for w in words)})(?![\w'’\-]))"
    added_name = not_own + _MIDDLE
    # middle names or initials: "Sandra Miju Oh" for "Sandra Oh" ("Gerald Lee McRaney" for "Gerald McRaney")
    middle = (rf"(?:\s+{added_name}){{1,3}}" if not inner else
              rf"(?=\s+{added_name})(?:\s+{added_name}){{0,2}}\s+{inner}(?:\s+{added_name}){{0,2}}"
              rf"|(?:\s+{added_name}){{0,2}}\s+{inner}(?:\s+{added_name}){{1,2}}")
    for m in re.finditer(rf"(?<![\w'’\-]){first}(?:{middle})\s+{last}(?![\w'’\-]){_SUFFIX}", text):
        found.add(" ".join(m.group(0).split()))
    # a quoted nickname: 'Nicholas Lofton "Nick" Hexum' for "Nick Hexum" (two-word names only)
    if len(words) == 2:
        nick = rf"[\"“]{first}[\"”]"
        for m in re.finditer(rf"(?<![\w'’\-])(?:{not_own}{_NAME_WORD}\s+){{1,3}}{nick}\s+{last}(?![\w'’\-]){_SUFFIX}", text):
            found.add(" ".join(m.group(0).split()))
    return {f for f in found if f.rstrip(",") != short}


# words before a name that are not part of it ("The Linden Bridge", "In Linden Bridge ...")
_NOT_NAME_WORDS = frozenset("A An And As At But By For From He Her His However If In Its It Of On Or She So "
                            "That The Their Then There These They This Those To We When Where Which While Who "
                            "With".split())


def _stands_alone(short: str, text: str) -> bool:
    """Whether `text` writes `short` as a name of its own, outside a title line that is just it:
    not inside a longer run of names ("The Nick Hexum Quintet" does not write "Nick Hexum")."""
    names = short.split()
    if len(names) > 1 and names[0] in _NOT_NAME_WORDS:  # "The Linden Bridge" is written "the Linden Bridge" too
        names = names[1:]
    words = r"\s+".join(re.escape(w) for w in names)
    for line in text.splitlines():
        if line.strip().lstrip("#").strip() in (short, " ".join(names)):  # a title: its subject written short
            continue
        for m in re.finditer(rf"(?<![\w'’\-]){words}(?![\w'’\-])", line):
            before = re.search(rf"({_NAME_WORD}|[A-Z]\.)\s+$", line[:m.start()])
            after = re.match(rf"\s+(?:{_NAME_WORD}|[A-Z]\.)", line[m.end():])
            if after is None and (before is None or before.group(1) in _NOT_NAME_WORDS):
                return True
    return False


def full_names(sentences: list[str], cited_texts: list[list[str]]) -> tuple[list[str], list[NameWritten]]:
    """(`sentences` with each name replaced by the one longer form its cited chunks hold, what was
    replaced). `cited_texts[i]` are the texts of the chunks sentence i cites."""
    out: list[str] = []
    written: list[NameWritten] = []
    for index, (sentence, texts) in enumerate(zip(sentences, cited_texts, strict=True)):
        body = MARKER_RE.sub(lambda m: " " * len(m.group(0)), sentence)  # runs never span a marker
        longer: dict[str, str | None] = {}
        pieces: list[str] = []
        end = 0
        # each run is replaced where it stands, so the same words inside a longer run ("The Nick
        # Hexum Quintet", a band) stay as they are
        for m in _RUN.finditer(body):
            run = m.group(0)
            if run not in longer:
                forms = set().union(*(_longer_forms(run, t) for t in texts)) if texts else set()
                # where a cited chunk also writes the short form as a name of its own, the longer
                # one may be another entity (a son, a second bridge): the sentence stays as verified
                alone = any(_stands_alone(run, t) for t in texts)
                longer[run] = forms.pop() if len(forms) == 1 and not alone else None
                if longer[run] is not None:
                    written.append(NameWritten(sentence_index=index, short=run, full=longer[run]))
            if longer[run] is not None:
                pieces += [sentence[end:m.start()], longer[run]]  # type: ignore[list-item]
                end = m.end()
        out.append("".join(pieces) + sentence[end:])
    return out, written


def cited_block_texts(sentences: list[str], citations: list[Any], blocks: list[ContextBlock]) -> list[list[str]]:
    """For each sentence, the chunk texts of the blocks its markers cite: what the verifier judged
    it against (`citations` are the answer's, each naming its chunk)."""
    chunk_of = {str(c.id): c.chunk_id for c in citations}
    out: list[list[str]] = []
    for sentence in sentences:
        texts: list[str] = []
        for cid in dict.fromkeys(chunk_of.get(i) for i, _, _ in markers_in(sentence)):
            block = block_holding(cid, blocks)
            if block is not None:
                texts += block.chunk_texts or [block.text]
        out.append(texts)
    return out


__all__ = ["NameWritten", "cited_block_texts", "full_names"]
