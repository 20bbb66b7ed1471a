"""The citation contract (SPEC C1) and its deterministic server-side validation (C2).

The model proposes `{answer, citations:[{id, quote}], fallback}`; this module decides what of it
survives: ids must name a context block retrieved this turn, markers and citations must match
one-to-one, and every delivered quote is an exact substring of the cited chunk. Where a quote sits
in its chunk, and how a quote the model got wrong is repaired, is `cograg.answer.quotes`; a quote
that matches nothing in its chunk makes the citation invalid, and it is dropped with its markers.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import BaseModel, Field, field_validator

from cograg.answer.completion import block_holding_new_words, complete_citations

# the marker helpers are re-exported: callers import them from here as well
from cograg.answer.markers import (MARKER_RE, answer_sentences, drop_markers, marker_ids, markers_in,  # noqa: F401
                                   quote_text, renumber_markers, sentence_around, strip_markers, tidy_spacing)
from cograg.answer.quotes import (CJK_CHAR, QUOTE_CONTAINED_MIN_COVERAGE, QUOTE_REPAIR_MIN_SIMILARITY,  # noqa: F401
                                  Outcome, QuoteRepair, best_matching_span, best_sentence, chunk_sentences, contained_span,
                                  find_quote, locate_quote)
from cograg.answer.number_words import stated_numbers
from cograg.answer.verbatim import backs_verbatim
from cograg.index.analyzer import analyze
from cograg.retrieval.packing import ContextBlock
from cograg.text import normalise_for_match, sentence_spans, split_sentences

# a quote this short ("1998年") may occur in many blocks: it does not say which one the model meant
MIN_MOVED_QUOTE_CHARS = 8


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


class EvidenceFirstDraft(BaseModel):
    """`DraftAnswer` with the quotes before the answer: the model copies the sentences it will rely
    on, then writes the answer after them (`answer.evidence_first`). Generated text conditions what
    follows it, so the answer is written with its evidence just above it rather than before it.
    Both are required and generated in the order declared here: a grammar puts required fields
    before optional ones, so an optional `citations` would be written after the answer."""

    generate_in_field_order: ClassVar[bool] = True

    citations: list[DraftCitation]
    answer: str
    fallback: bool = False

    def draft(self) -> DraftAnswer:
        return DraftAnswer(answer=self.answer, citations=self.citations, fallback=self.fallback)


QUOTE_MAX_SENTENCES = 3  # a quote may run over this many consecutive sentences of a chunk
QUOTE_MAX_CLAUSES = 12  # clause boundaries considered per sentence (ranges grow with their square)
_CLAUSE_STOP = re.compile(r"[,，、;；:：]\s*")


def _clause_ranges(text: str, start: int, end: int) -> list[str]:
    """Every run of whole clauses of the sentence text[start:end]: it starts at the sentence's start
    or after a comma, semicolon or colon (and the spaces after it), and ends at the sentence's end
    or just before one."""
    stops = list(_CLAUSE_STOP.finditer(text, start, end))[:QUOTE_MAX_CLAUSES]
    starts = [start] + [m.end() for m in stops]
    ends = [m.start() for m in stops] + [end]
    return [text[a:b].rstrip() for a in starts for b in ends if b - a >= 4]


def quote_choices(text: str) -> list[str]:
    """What a quote of this chunk text may be, verbatim: up to QUOTE_MAX_SENTENCES consecutive
    sentences (the 1.5B model often copies from a paragraph's first sentence on to the one it
    means), or any run of whole clauses within one sentence ("杉原祥造自掏腰包标下数珠丸。" of a
    longer sentence, or a sentence up to a comma); 4 characters or more. A sentence reads across
    the line breaks that wrap a paragraph's lines (`cograg.text.soft_line_breaks`): a hard-wrapped
    file's quote is its sentence, not the part that fits on one line."""
    spans = sentence_spans(text, wrapped=True)
    runs = [text[spans[i][0]:spans[j][1]] for i in range(len(spans))
            for j in range(i, min(i + QUOTE_MAX_SENTENCES, len(spans)))]
    clauses = [c for s, e in spans for c in _clause_ranges(text, s, e)]
    return [q for q in dict.fromkeys([*runs, *clauses]) if len(q) >= 4]


def verbatim_draft_schema(blocks: list[ContextBlock],
                          schema: type[BaseModel] = DraftAnswer) -> type[BaseModel] | None:
    """`DraftAnswer` as the backend enforces it (`chat_json(..., enforced_schema=...)`): each
    citation's id is one of the blocks' and its quote one of their sentences, runs of sentences or
    runs of clauses (`quote_choices`), verbatim, so a quote cannot be a paraphrase, a sentence the model made
    up or text stitched across chunks. The model still writes the id first: a quote copied from
    another block than the one it numbered is moved there (`misnumbered_citations`). None when the
    blocks hold no such text."""
    from cograg.models.llm.types import narrowed_schema

    quotes = list(dict.fromkeys(q for b in blocks for t in (b.chunk_texts or [b.text]) for q in quote_choices(t)))
    if not quotes:
        return None
    ids = tuple(dict.fromkeys(b.citation_id for b in blocks))
    citation = narrowed_schema(DraftCitation, "VerbatimCitation", id=Literal[ids], quote=Literal[tuple(quotes)])
    return narrowed_schema(schema, "VerbatimDraft", citations=list[citation])  # type: ignore[valid-type]


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
    markers_inserted: int = Field(0, description="sentences the system attached to a block because the model gave no "
                                                 "markers (only where the block holds the sentence verbatim)")
    dropped_citations: int = Field(0, description="citations dropped with their markers: the quote matched no text "
                                                  "of the cited block")
    unmatched_quote_ids: list[str] = Field(default_factory=list, description="blocks (as the model numbered them) "
                                           "whose quote matched no text of the block")
    unplaced_ids: list[str] = Field(default_factory=list, description="blocks the model listed that no sentence of "
                                    "the answer carries a marker for (none of it could be attached to them)")
    repointed_citations: int = Field(0, description="citations moved to the block whose text the quote is: the "
                                                    "quote was not text of the block the model numbered")
    repointed_ids: dict[str, str] = Field(default_factory=dict, description="each moved citation, as the model "
                                          "numbered it: the block it named → the block that holds its quote")
    completed_citations: int = Field(0, description="sentences that cited one block but claim what only another "
                                     "block of the context holds, which the system cited too (answer/completion.py)")
    completed_ids: list[str] = Field(default_factory=list, description="the blocks so added (as the model numbered "
                                     "the context)")


def distinct_sentences(sentences: list[str]) -> list[str]:
    """`sentences` without the ones that repeat an earlier one (citation markers, case, width and
    final punctuation aside): two plan steps that established the same fact must not read twice."""
    seen: set[str] = set()
    out: list[str] = []
    for sentence in sentences:
        key = normalise_for_match(strip_markers(sentence)).rstrip(" .。!?！？")
        if key and key in seen:
            continue
        seen.add(key)
        out.append(sentence)
    return out


class ValidatedAnswer(BaseModel):
    answer: str
    citations: list[Citation]
    fallback: bool
    issues: ContractIssues
    quote_repairs: list[QuoteRepair] = Field(default_factory=list)


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


def validate_draft(draft: DraftAnswer, blocks: list[ContextBlock], question: str | None = None) -> ValidatedAnswer:
    """Apply C2: drop hallucinated ids (and their markers), pair markers with citations, make every
    quote an exact substring of its chunk. Markers are renumbered 1..n in order of appearance.
    With the `question`, a sentence that claims what only another block holds cites that block too
    (`complete_citations`)."""
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
    moves = misnumbered_citations(draft.citations, blocks)
    if moves:
        answer = renumber_markers(answer, moves)
        draft = draft.model_copy(update={"citations": [
            c.model_copy(update={"id": int(moves.get(str(c.id), c.id))}) for c in draft.citations]})
        issues.repointed_ids, issues.repointed_citations = moves, len(moves)
    # the model listed a valid citation but put no marker in the text: the system places them
    cited = [str(c.id) for c in draft.citations if str(c.id) in by_id]
    if not markers_in(answer) and answer and not draft.fallback and cited:
        answer, issues.markers_inserted = insert_markers(answer, blocks, prefer=cited, question=question)
    quotes: dict[str, str] = {}
    for c in draft.citations:
        key = str(c.id)
        if key not in by_id:
            issues.hallucinated_ids.append(key)
            continue
        quotes.setdefault(key, c.quote)
    if question and not draft.fallback:
        answer, added, issues.completed_citations = complete_citations(answer, blocks, question)
        issues.completed_ids = sorted(added, key=int)
        for key, quote in added.items():
            quotes.setdefault(key, quote)  # a block the model cited elsewhere keeps the model's quote

    used: list[str] = []
    for key, _, _ in markers_in(answer):
        if key not in by_id:
            if key not in issues.hallucinated_ids:
                issues.hallucinated_ids.append(key)
        elif key not in used:
            used.append(key)
            if key not in quotes:
                issues.markers_without_citation += 1
    issues.unplaced_ids = [k for k in quotes if k not in used]
    issues.citations_without_marker = len(issues.unplaced_ids)

    # every quote placed in its chunk; a citation whose quote matches nothing there is invalid
    located: dict[str, tuple[int, str, Outcome, float | None]] = {}
    repairs: list[QuoteRepair] = []
    for old in used:
        block = by_id[old]
        given = quotes.get(old, "")
        idx, quote, outcome, similarity = locate_quote(given, sentence_around(answer, old), block)
        if outcome == "unmatched":
            issues.unmatched_quotes += 1
            issues.unmatched_quote_ids.append(old)
            issues.dropped_citations += 1
            continue
        if outcome in ("repaired", "contained"):
            issues.repaired_quotes += 1
            repairs.append(QuoteRepair(citation=old, chunk_id=block.chunk_ids[idx], quote=given, repaired=quote,
                                       similarity=similarity or 0.0,
                                       kind="contained" if outcome == "contained" else "similar"))
        located[old] = (idx, quote, outcome, similarity)
    kept = [old for old in used if old in located]

    # remove markers of ids that were not retrieved or whose citation was dropped; renumber the rest 1..n
    renumber = {old: str(i) for i, old in enumerate(kept, start=1)}

    def _renumber(m: re.Match[str]) -> str:
        if not m.group(1):
            return ""  # unresolved cite: forms (fact/task/doc not retrieved) are dropped here
        keep = [renumber[p] for p in marker_ids(m) if p in renumber]
        return "".join(f"[{k}]" for k in dict.fromkeys(keep))

    answer = tidy_spacing(MARKER_RE.sub(_renumber, answer))

    citations: list[Citation] = []
    for old in kept:
        block = by_id[old]
        idx, quote, _, _ = located[old]
        citations.append(Citation(
            id=renumber[old], doc_id=block.doc_id, chunk_id=block.chunk_ids[idx], quote=quote,
            source=block.source, score=1.0 / block.best_rank, title=block.title, page=block.page,
            heading_path=block.heading_path_of(idx), annotations=block.annotations))
    return ValidatedAnswer(answer=answer, citations=citations, fallback=draft.fallback, issues=issues,
                           quote_repairs=repairs)


def _holds_verbatim(block: ContextBlock, quote: str) -> bool:
    """`quote` is text of the block (case, width and spacing aside: normalise_for_match)."""
    q = normalise_for_match(quote)
    return any(q in normalise_for_match(t) for t in block.chunk_texts or [block.text])


def misnumbered_citations(citations: list[DraftCitation], blocks: list[ContextBlock]) -> dict[str, str]:
    """{cited id: id of the block that holds its quote} for each citation whose quote is not text of
    the block the model numbered but is, verbatim, text of another block of this turn (the first in
    rank order): the model copied the right words and wrote the wrong number. Only a verbatim quote
    moves a citation, so where it lands is the block the words come from; the verifier then judges
    the sentence against that block like any other. The first citation of an id decides (as for
    its quote)."""
    by_id = {str(b.citation_id): b for b in blocks}
    moves: dict[str, str] = {}
    seen: set[str] = set()
    for c in citations:
        key = str(c.id)
        if key in seen or key not in by_id:
            continue
        seen.add(key)
        quote = quote_text(c.quote)
        if len(normalise_for_match(quote)) < MIN_MOVED_QUOTE_CHARS or _holds_verbatim(by_id[key], quote):
            continue
        holder = next((b for b in blocks if b is not by_id[key] and _holds_verbatim(b, quote)), None)
        if holder is not None:
            moves[key] = str(holder.citation_id)
    return moves


def _listed_block_for(sentence: str, listed: list[ContextBlock]) -> ContextBlock | None:
    """Among the blocks the model itself cited, the one that shares most of the sentence's terms
    and holds all of its numbers (the verifier's deterministic pre-checks); None when none does."""
    claim = strip_markers(sentence).rstrip("。！？!?.")
    terms = set(analyze(claim))
    best, best_shared = None, 0
    for b in listed:
        if not stated_numbers(claim) <= stated_numbers(b.text, weak=True):
            continue
        shared = len(terms & set(analyze(b.text)))
        if shared > best_shared:
            best, best_shared = b, shared
    # at least half of the sentence's terms: a block that shares a word or two backs nothing
    return best if best is not None and best_shared * 2 >= len(terms) else None


def _bridged_blocks(sentence: str, listed: list[ContextBlock], order: list[ContextBlock],
                    question: str | None) -> list[ContextBlock]:
    """A sentence no single listed block backs, though one block holds every name or number it
    adds to the question (`block_holding_new_words`): that block, after the listed blocks that
    share a term with the sentence (a bridge answer draws on both). [] without a question."""
    holder = block_holding_new_words(sentence, order, question) if question else None
    if holder is None:
        return []
    terms = set(analyze(strip_markers(sentence)))
    return [b for b in listed if b is not holder and terms & set(analyze(b.text))] + [holder]


def insert_markers(answer: str, blocks: list[ContextBlock], prefer: list[str] | tuple[str, ...] = (),
                   question: str | None = None) -> tuple[str, int]:
    """The model wrote no markers but listed citations: attach each sentence to a block.

    First a block that holds the sentence verbatim (the verifier's deterministic test), the
    blocks the model listed tried first. Otherwise a block the model listed itself, and only
    one that holds the sentence's numbers and at least half of its terms. Otherwise, with the
    `question`, the block that holds every name or number the sentence adds to the question,
    cited after the listed blocks sharing a term with the sentence (`_bridged_blocks`). Such a
    sentence then goes through the verifier's full test (numbers, negation, similarity, judge)
    against all it cites, like any cited sentence, and is removed when they do not support it.
    A sentence with none of these stays unmarked: the verifier treats it as uncited, and an
    answer left with no citation is regenerated once, then refused (C2). A block is never
    attached for sharing a word or two."""
    order = sorted(blocks, key=lambda b: str(b.citation_id) not in prefer)
    listed = [b for b in order if str(b.citation_id) in prefer]
    out: list[str] = []
    inserted = 0
    for sent in split_sentences(answer):
        best = (next((b for b in order if backs_verbatim(sent, [b.text, *b.chunk_texts])), None)
                or _listed_block_for(sent, listed))
        chosen = [best] if best is not None else _bridged_blocks(sent, listed, order, question)
        if chosen:
            end = sent[-1] if sent[-1] in "。！？!?." else ""
            body = sent[:len(sent) - len(end)].rstrip()
            space = "" if CJK_CHAR.search(body[-1:]) else " "
            out.append(f"{body}{space}{''.join(f'[{b.citation_id}]' for b in chosen)}{end}")
            inserted += 1
        else:
            out.append(sent)
    joiner = "" if re.search(r"[\u4e00-\u9fff]", answer) else " "
    return joiner.join(out), inserted
