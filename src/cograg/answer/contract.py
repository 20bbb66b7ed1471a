"""The citation contract (SPEC C1) and its deterministic server-side validation (C2).

The model proposes `{answer, citations:[{id, quote}], fallback}`; this module decides what of it
survives: ids must name a context block retrieved this turn, markers and citations must match
one-to-one, and every delivered quote is an exact substring of the cited chunk (a quote the model
got wrong is replaced by the chunk sentence closest to the claim, never kept).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, field_validator
from rapidfuzz import fuzz

from cograg.retrieval.packing import ContextBlock
from cograg.text import ngram_overlap, normalise_for_match, sentence_spans, split_sentences

# "[1]", "[1, 2]", "[1][2]" and the seed-000 forms "[cite: doc, DOC_ID, CHUNK_ID]", "[cite: fact, ID, null]",
# "[cite: task, ID]".
MARKER_RE = re.compile(r"\[(\d+(?:\s*[,，]\s*\d+)*)\]|\[cite:\s*(doc|fact|task)\s*,\s*([^,\]\s]+)\s*(?:,\s*([^\]\s]+)\s*)?\]")
QUOTE_FUZZ_TOLERANCE = 0.10  # a quote may differ from the chunk text by at most 10 % of its characters


class DraftCitation(BaseModel):
    id: int
    quote: str = ""

    @field_validator("quote", mode="before")
    @classmethod
    def _none_to_empty(cls, v: object) -> object:
        return "" if v is None else v


MAX_ANSWER_CHARS = 4000
MAX_CITATIONS = 20


class DraftAnswer(BaseModel):
    """What the LLM is asked to produce (schema-constrained where the backend supports it).

    No length limits in the schema: llama.cpp turns `maxLength`/`maxItems` into grammar
    repetitions that exceed its limits. Lengths are enforced after generation instead."""

    answer: str
    citations: list[DraftCitation] = Field(default_factory=list)
    fallback: bool = False

    @field_validator("answer")
    @classmethod
    def _cap_answer(cls, v: str) -> str:
        return v[:MAX_ANSWER_CHARS]

    @field_validator("citations")
    @classmethod
    def _cap_citations(cls, v: list[DraftCitation]) -> list[DraftCitation]:
        return v[:MAX_CITATIONS]


class Citation(BaseModel):
    id: str
    doc_id: str
    chunk_id: str
    quote: str
    source: str
    score: float
    title: str = ""
    page: int | None = None
    heading_path: list[str] = Field(default_factory=list)
    annotations: list[str] = Field(default_factory=list)


class ContractIssues(BaseModel):
    """What validation removed or repaired, counted (C2)."""

    hallucinated_ids: list[str] = Field(default_factory=list)
    unmatched_quotes: int = 0
    repaired_quotes: int = 0
    markers_without_citation: int = 0
    citations_without_marker: int = 0
    markers_inserted: int = Field(0, description="sentences the system attached to a block because the model gave no markers")


def find_quote(quote: str, text: str) -> tuple[int, int] | None:
    """Span of `quote` in `text`: exact after normalisation, else the best window within the fuzz
    tolerance. Returns offsets in the *normalised* text, or None."""
    q, t = normalise_for_match(quote), normalise_for_match(text)
    if len(q) < 4:
        return None
    i = t.find(q)
    if i != -1:
        return i, i + len(q)
    cutoff = (1 - QUOTE_FUZZ_TOLERANCE) * 100
    if len(q) > len(t):  # longer than the whole text: the two compared as they are
        return (0, len(t)) if fuzz.ratio(q, t, score_cutoff=cutoff) else None
    # the window of `t` closest to the quote (Indel similarity over every window of its length)
    found = fuzz.partial_ratio_alignment(q, t, score_cutoff=cutoff)
    return None if found is None else (found.dest_start, found.dest_end)


def chunk_sentences(text: str) -> list[str]:
    """The clauses of a chunk that can stand as a quote (split at semicolons too, 4+ characters)."""
    return [s for s in split_sentences(text, semicolons=True) if len(s) >= 4]


def best_sentence(claim: str, text: str) -> str:
    """The sentence of `text` sharing the most characters (bigrams) with `claim`: a deterministic
    stand-in quote when the model's quote does not occur in the chunk."""
    sentences = chunk_sentences(text) or [text.strip()]
    return max(sentences, key=lambda s: (ngram_overlap(claim, s), -len(s)))


def markers_in(answer: str) -> list[tuple[str, int, int]]:
    """(block id as a string, start, end) of every numbered marker in `answer`, in order."""
    out = []
    for m in MARKER_RE.finditer(answer):
        if m.group(1):
            for part in re.split(r"\s*[,，]\s*", m.group(1)):
                out.append((part, m.start(), m.end()))
        else:
            out.append((f"{m.group(2)}:{m.group(3)}" + (f":{m.group(4)}" if m.group(4) else ""), m.start(), m.end()))
    return out


def strip_markers(text: str) -> str:
    return re.sub(r"\s+([。.,，!?！？])", r"\1", MARKER_RE.sub("", text)).strip()


def locate_quote(quote: str, claim: str, block: ContextBlock) -> tuple[int, str, str]:
    """(chunk index, delivered quote, outcome) for a cited block. The delivered quote is always a
    verbatim substring of that chunk's text. Outcome: "exact", "repaired" (the model's quote
    matched only after normalisation or within the fuzz tolerance) or "unmatched"."""
    texts = block.chunk_texts or [block.text]
    if quote:
        for i, t in enumerate(texts):
            if quote in t:
                # an exact quote that has nothing to do with its sentence is not evidence for it
                if claim and ngram_overlap(claim, quote) < 0.5 * ngram_overlap(claim, best_sentence(claim, t)):
                    return i, best_sentence(claim, t), "repaired"
                return i, quote, "exact"
        for i, t in enumerate(texts):
            if find_quote(quote, t) is not None:
                return i, best_sentence(quote, t), "repaired"
    target = claim or quote
    best = max(range(len(texts)), key=lambda i: ngram_overlap(target, best_sentence(target, texts[i])))
    return best, best_sentence(target, texts[best]), "unmatched" if quote else "missing"


class ValidatedAnswer(BaseModel):
    answer: str
    citations: list[Citation]
    fallback: bool
    issues: ContractIssues


def resolve_doc_marker(ref: str, blocks: list[ContextBlock]) -> str | None:
    """`doc:DOC_ID:CHUNK_ID` → the number of the block holding that chunk, if retrieved this turn."""
    parts = ref.split(":")
    if len(parts) >= 3 and parts[0] == "doc":
        for b in blocks:
            if parts[2] in b.chunk_ids or (parts[1] == b.doc_id and parts[2] in ("null", "None")):
                return str(b.citation_id)
    return None


def resolve_fact_marker(fact_id: str, blocks: list[ContextBlock]) -> str | None:
    """`[cite: fact, ID]` → the number of the block holding that remembered fact's source chunk
    (annotated `fact:ID`), so the fact is verified against its source like any citation."""
    for b in blocks:
        if f"fact:{fact_id}" in b.annotations:
            return str(b.citation_id)
    return None


def validate_draft(draft: DraftAnswer, blocks: list[ContextBlock]) -> ValidatedAnswer:
    """Apply C2: drop hallucinated ids (and their markers), pair markers with citations, make every
    quote an exact substring of its chunk. Markers are renumbered 1..n in order of appearance."""
    by_id = {str(b.citation_id): b for b in blocks}
    issues = ContractIssues()
    answer = draft.answer.strip()

    # seed-000 doc markers become block numbers when they name a chunk retrieved this turn, fact
    # markers when the fact's source chunk is in the context
    def _doc_marker(m: re.Match[str]) -> str:
        if m.group(2) == "doc":
            num = resolve_doc_marker(f"doc:{m.group(3)}:{m.group(4) or 'null'}", blocks)
            return f"[{num}]" if num else m.group(0)
        if m.group(2) == "fact":
            num = resolve_fact_marker(m.group(3), blocks)
            return f"[{num}]" if num else m.group(0)
        return m.group(0)

    answer = MARKER_RE.sub(_doc_marker, answer)
    # the model listed a valid citation but put no marker in the text: the system places them
    if not markers_in(answer) and answer and not draft.fallback and any(str(c.id) in by_id for c in draft.citations):
        answer, issues.markers_inserted = insert_markers(answer, blocks)
    quotes: dict[str, str] = {}
    for c in draft.citations:
        key = str(c.id)
        if key not in by_id:
            issues.hallucinated_ids.append(key)
            continue
        quotes.setdefault(key, c.quote)

    used: list[str] = []
    for key, _, _ in markers_in(answer):
        if key not in by_id:
            if key not in issues.hallucinated_ids:
                issues.hallucinated_ids.append(key)
        elif key not in used:
            used.append(key)
            if key not in quotes:
                issues.markers_without_citation += 1
    issues.citations_without_marker = sum(1 for k in quotes if k not in used)

    # remove markers of ids that were not retrieved; renumber the rest 1..n
    renumber = {old: str(i) for i, old in enumerate(used, start=1)}

    def _renumber(m: re.Match[str]) -> str:
        if not m.group(1):
            return ""  # unresolved cite: forms (fact/task/doc not retrieved) are dropped here
        keep = [renumber[p] for p in re.split(r"\s*[,，]\s*", m.group(1)) if p in renumber]
        return "".join(f"[{k}]" for k in dict.fromkeys(keep))

    answer = MARKER_RE.sub(_renumber, answer)
    answer = re.sub(r"[ \t]{2,}", " ", answer).strip()

    citations: list[Citation] = []
    for old in used:
        block = by_id[old]
        claim = _sentence_around(draft.answer, old)
        idx, quote, outcome = locate_quote(quotes.get(old, ""), claim, block)
        if outcome == "repaired":
            issues.repaired_quotes += 1
        elif outcome == "unmatched":
            issues.unmatched_quotes += 1
        citations.append(Citation(
            id=renumber[old], doc_id=block.doc_id, chunk_id=block.chunk_ids[idx], quote=quote,
            source=block.source, score=1.0 / block.best_rank, title=block.title, page=block.page,
            heading_path=block.heading_path, annotations=block.annotations))
    return ValidatedAnswer(answer=answer, citations=citations, fallback=draft.fallback, issues=issues)


def insert_markers(answer: str, blocks: list[ContextBlock]) -> tuple[str, int]:
    """The model wrote no markers: attach each sentence to the block it overlaps most (character
    bigrams), if it overlaps any. The verifier still decides whether the block supports it."""
    out: list[str] = []
    inserted = 0
    for sent in split_sentences(answer):
        best = max(blocks, key=lambda b: ngram_overlap(sent, best_sentence(sent, b.text)), default=None)
        if best is not None and ngram_overlap(sent, best_sentence(sent, best.text)) > 0:
            end = sent[-1] if sent[-1] in "。！？!?." else ""
            out.append(f"{sent[:len(sent) - len(end)].rstrip()} [{best.citation_id}]{end}")
            inserted += 1
        else:
            out.append(sent)
    joiner = "" if re.search(r"[\u4e00-\u9fff]", answer) else " "
    return joiner.join(out), inserted


def answer_sentences(answer: str) -> list[str]:
    """The sentences of an answer with their citation markers attached ("X [1]." and "X。[1]" stay whole)."""
    return split_sentences(answer, markers=MARKER_RE)


def _sentence_around(answer: str, key: str) -> str:
    """The text of the sentence that carries marker `key`, from its start up to that marker."""
    spans = sentence_spans(answer, markers=MARKER_RE)
    for m in MARKER_RE.finditer(answer):
        if m.group(1) and key in re.split(r"\s*[,，]\s*", m.group(1)):
            start = next((s for s, e in spans if s <= m.start() < e), m.start())
            return strip_markers(answer[start:m.end()])
    return ""
