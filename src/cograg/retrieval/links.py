"""Documents a passage names by their titles: the bridge of a two-hop question, found without a model.

A bridge question names one document and asks about another that only the first one names ("Kate
Ramsay is a character from an Australian soap opera created by who?": Kate Ramsay's paragraph says
"Neighbours"; Neighbours' paragraph says who created it). The follow-up hop (retrieval/hops.py)
finds that second document by likeness to the first, and so also finds the documents most like it
(the other Ramsays), which the answer model then confuses with it. A name that the passage writes
and that is the title of another document of the collection is a link, as a hyperlink is on the
page the passage came from.

`linked_context` reads the names the question's own documents write (its best passage and the
documents the question names), looks each one up (a search of the name; a hit whose document is
titled with that name is the link) and puts the linked documents into the context: after the
question's documents, with the hits that name one of them, either in front of the other hits
(`front`) or instead of them (`only`).
Nothing changes where no name is a link. English text only: the name finder reads capitalised
words and quotes.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable
from typing import Literal

from cograg.retrieval.hops import document_unit as unit_key
from cograg.retrieval.models import SearchHit, SearchResult
from cograg.text import is_chinese

LinkedMode = Literal["off", "front", "only"]

MAX_LOOKUPS = 16  # name searches per question: a paragraph writes 10-25 capitalised names
_CONNECTORS = r"(?:of|the|and|de|da|del|der|von|van|la|le|du|in|on|to|for|a|an|y|&)"
# a capitalised word, or initials ("B.", "D.P."): a word's own full stop ends a sentence, not a name
_INITIALS = r"[A-Z]\.(?:[A-Z]\.)*"
_CAPITAL = rf"(?:{_INITIALS}|[A-Z][\w'’\-]*)"
_NAME = re.compile(rf"\b{_CAPITAL}(?:\s+(?:{_CONNECTORS}\s+)*(?:{_CAPITAL}|\d[\w\-]*))*")
_QUOTED = re.compile(r'"([^"\n]{2,80})"|“([^”\n]{2,80})”')
# words that open a sentence more often than a name; a span opening with one is also tried without it
_OPENERS = frozenset("the a an in on at he she it they his her its their this that these those after before "
                     "during as by for from with when while although since following".split())


def unit_title(hit: SearchHit) -> str:
    """The title of the document a hit belongs to: a record's title, else its top heading, else
    the file's title."""
    title = hit.metadata.get("title")
    if isinstance(title, str) and title.strip():
        return title
    return hit.heading_path[0] if hit.heading_path else hit.title


def title_key(text: str) -> str:
    """A title or name as compared: entities decoded, case and accents folded, a trailing
    qualifier ("Lover Come Back (1961 film)") and a leading "the" dropped, punctuation as spaces."""
    text = unicodedata.normalize("NFKC", html.unescape(text)).lower()
    text = re.sub(r"\s*\([^)]*\)\s*$", "", text)
    text = re.sub(r"[^\w]+", " ", text).strip()
    return re.sub(r"^the\s+", "", text)


def _within(part: str, whole: str) -> bool:
    """`part` is a run of whole words of `whole` (both title keys)."""
    return bool(part) and f" {part} " in f" {whole} "


def _is_title_of(t: str, n: str) -> bool:
    """A document whose title key is `t` is the one the name keyed `n` names: its title is the name
    or a run of its words ("James Stockdale" in "Vice Admiral James Stockdale"). A one-word title
    must be the whole name and five letters long, so that "Universal" is not read into "Universal
    Pictures"."""
    if not t or not n:
        return False
    if " " not in t:
        return t == n and len(t) >= 5
    return _within(t, n)


def named_spans(text: str) -> list[str]:
    """The names a passage writes: quoted spans, then runs of capitalised words in order."""
    spans = [(m.group(1) or m.group(2)).strip() for m in _QUOTED.finditer(text)]
    for m in _NAME.finditer(text):
        span = m.group(0)
        # "In Love and War" is one title, "Doris Day and Rock Hudson" two names: both readings are tried
        for part in [span] + (span.split(" and ") if " and " in span else []):
            spans.append(part)
            first, _, rest = part.partition(" ")
            if rest and first.lower() in _OPENERS:
                spans.append(rest)
    out: list[str] = []
    seen: set[str] = set()
    for s in spans:
        k = title_key(s)
        if len(k) < 4 or k in seen or k in _OPENERS:
            continue
        seen.add(k)
        out.append(s)
    return out


def linked_context(result: SearchResult, question: str, lookup: Callable[[str], SearchResult], *,
                   mode: LinkedMode = "front", max_lookups: int = MAX_LOOKUPS) -> tuple[SearchResult, list[dict]]:
    """`result` with the documents its question's documents name by title (see the module), and a
    record of each link (name, the document it named, its chunk) for the trace. The question's
    documents are the best passage the user may see and the documents whose titles the question
    writes; only their visible text is read for names."""
    if mode == "off" or not result.hits or is_chinese(question):
        return result, []
    q_key = title_key(question)
    visible = [h for h in result.hits if h.snippet_visible]
    if not visible:
        return result, []
    titles = {h.chunk_id: title_key(unit_title(h)) for h in result.hits}  # each hit's, keyed once
    seed = visible[0]
    own = {unit_key(seed)} | {unit_key(h) for h in visible if _within(titles[h.chunk_id], q_key)}
    own_titles = {titles[h.chunk_id] for h in result.hits if unit_key(h) in own}
    names: list[str] = []
    for h in visible:
        if unit_key(h) in own:
            names += [n for n in named_spans(h.text) if n not in names]
    linked: dict[tuple[str, object], SearchHit] = {}
    links: list[dict] = []
    lookups = 0
    for name in names:
        key = title_key(name)
        if key in own_titles or _within(key, q_key):
            continue  # a document the question already names
        found = next((h for h in result.hits if _is_title_of(titles[h.chunk_id], key)), None)
        if found is None and lookups < max_lookups:
            lookups += 1
            for h in lookup(name).hits:
                if _is_title_of(t := title_key(unit_title(h)), key):
                    found, titles[h.chunk_id] = h, t
                    break
        if found is None or unit_key(found) in own or unit_key(found) in linked:
            continue
        linked[unit_key(found)] = found
        # a hidden document's title is its text's first line (B2): the trace keeps only its chunk id
        links.append({"name": name, "title": unit_title(found) if found.snippet_visible else "",
                      "chunk_id": found.chunk_id})
    if not linked:
        return result, []
    in_result = {h.chunk_id for h in result.hits}
    front = [h for h in result.hits if unit_key(h) in own or unit_key(h) in linked]
    front += [h for h in linked.values() if h.chunk_id not in in_result]
    # a hit that names one of those documents in turn stays with them: the daughter's paragraph
    # that names the actor linked from the character's (a name of two words or more: one word
    # names too much)
    keys = {titles[h.chunk_id] for h in front if " " in titles[h.chunk_id]}
    placed = {h.chunk_id for h in front}
    for h in result.hits:
        if h.chunk_id in placed:
            continue
        text = title_key(h.text)
        if any(_within(k, text) for k in keys):
            front.append(h)
            placed.add(h.chunk_id)
    rest = [] if mode == "only" else [h for h in result.hits if h.chunk_id not in placed]
    return result.model_copy(update={"hits": front + rest}), links


__all__ = ["LinkedMode", "linked_context", "named_spans", "title_key", "unit_title"]
