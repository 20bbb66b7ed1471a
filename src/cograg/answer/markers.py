"""Citation markers in answer text: "[1]", "[1, 2]", "[1][2]" and the seed-000 "[cite: ...]" forms."""

from __future__ import annotations

import re

from cograg.text import sentence_spans, split_sentences

# "[1]", "[1, 2]", "[1][2]" and the seed-000 forms "[cite: doc, DOC_ID, CHUNK_ID]", "[cite: fact, ID, null]",
# "[cite: task, ID]".
MARKER_RE = re.compile(r"\[(\d+(?:\s*[,，]\s*\d+)*)\]|\[cite:\s*(doc|fact|task)\s*,\s*([^,\]\s]+)\s*(?:,\s*([^\]\s]+)\s*)?\]")


def marker_ids(m: re.Match[str]) -> list[str]:
    """The block ids of one numbered marker match ("[1, 2]" → ["1", "2"])."""
    return re.split(r"\s*[,，]\s*", m.group(1))


def quote_text(quote: str) -> str:
    """A model's quote without the citation markers it copied into it ("… arches [2]."); a quote
    without markers is left exactly as given."""
    return strip_markers(quote) if MARKER_RE.search(quote) else quote


def markers_in(answer: str) -> list[tuple[str, int, int]]:
    """(block id as a string, start, end) of every numbered marker in `answer`, in order."""
    out = []
    for m in MARKER_RE.finditer(answer):
        if m.group(1):
            for part in marker_ids(m):
                out.append((part, m.start(), m.end()))
        else:
            out.append((f"{m.group(2)}:{m.group(3)}" + (f":{m.group(4)}" if m.group(4) else ""), m.start(), m.end()))
    return out


def strip_markers(text: str) -> str:
    return re.sub(r"\s+([。.,，!?！？])", r"\1", MARKER_RE.sub("", text)).strip()


def drop_markers(sentence: str, ids: set[str]) -> str:
    """`sentence` without its numbered markers for the block ids in `ids`."""
    def _keep(m: re.Match[str]) -> str:
        if not m.group(1):
            return m.group(0)
        return "".join(f"[{p}]" for p in marker_ids(m) if p not in ids)

    return tidy_spacing(MARKER_RE.sub(_keep, sentence))


def renumber_markers(text: str, mapping: dict[str, str]) -> str:
    """`text` with the numbered markers of the ids in `mapping` pointing at their new ids (a marker
    that comes to name one block twice names it once); other markers are left as they are."""
    def _map(m: re.Match[str]) -> str:
        if not m.group(1):
            return m.group(0)
        parts = [mapping.get(p, p) for p in marker_ids(m)]
        return f"[{', '.join(dict.fromkeys(parts))}]"

    return MARKER_RE.sub(_map, text)


def tidy_spacing(text: str) -> str:
    """Spacing left behind by removed markers: no double spaces, no space before a full stop."""
    text = re.sub(r"[ \t]+(?=[.。,，;；!?！？](\s|$))", "", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def answer_sentences(answer: str) -> list[str]:
    """The sentences of an answer with their citation markers attached ("X [1]." and "X。[1]" stay whole)."""
    return split_sentences(answer, markers=MARKER_RE)


def sentence_around(answer: str, key: str) -> str:
    """The text of the sentence that carries marker `key`, from its start up to that marker."""
    spans = sentence_spans(answer, markers=MARKER_RE)
    for m in MARKER_RE.finditer(answer):
        if m.group(1) and key in marker_ids(m):
            start = next((s for s, e in spans if s <= m.start() < e), m.start())
            return strip_markers(answer[start:m.end()])
    return ""
