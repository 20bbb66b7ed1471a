"""A refusal (SPEC C1, C4): the one-line reason, and the closest evidence where some is safe to show.

A refusal never delivers an unverified statement. It may show one passage as the closest evidence:
that passage passes the same injection check as an answer sentence, and where the policy hides its
source's text (`snippet_visible: false`) the refusal names the source and quotes nothing.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from cograg.answer.contract import Citation, locate_quote
from cograg.answer.injection import untrusted_quote
from cograg.answer.redaction import quotable_texts
from cograg.answer.response import AnswerResponse
from cograg.answer.subject import content_words, question_entities
from cograg.messages import failure_reason, message
from cograg.retrieval.models import SearchResult
from cograg.retrieval.packing import ContextBlock
from cograg.text import LIST_ITEM, ends_as_a_sentence, is_chinese, ngram_overlap, sentence_spans
from cograg.trace import Trace

MODEL_FAILED = "model failed"  # how the answerer's reason begins when no draft came from the model


def refusal(question: str, trace: Trace, result: SearchResult | None, reason: str, route: str = "REFUSED",
            evidence: list[Citation] | None = None) -> AnswerResponse:
    """The refused turn's response, with `reason` in the trace's outcome and a REFUSED event; the
    first of `evidence` that passes the injection check is shown as the closest evidence."""
    lang = "zh" if is_chinese(question) else "en"
    evidence = [c for c in evidence or [] if c.quote and not untrusted_quote(c.quote)]
    # the model failing (a timeout, a lost connection) says nothing about the sources: the reply
    # must not say that they do not establish an answer
    failed = failure_reason(reason, lang) if reason.startswith(MODEL_FAILED) else None
    if evidence:
        best = evidence[0].model_copy(update={"id": "1"})
        if result is not None and best.chunk_id in result.hidden_chunk_ids():
            text = message("refusal.model_failed", lang, reason=failed) if failed else \
                message("refusal.closest_source", lang)
            best = best.model_copy(update={"quote": ""})
        elif failed:
            text = message("refusal.model_failed_evidence", lang, reason=failed, quote=best.quote)
        else:
            text = message("refusal.closest_evidence", lang, quote=best.quote)
        evidence = [best]
    else:
        text = message("refusal.model_failed", lang, reason=failed) if failed else message("refusal.no_evidence", lang)
    trace.outcome = {"fallback": True, "reason": reason}
    trace.event("REFUSED", reason=reason)
    return AnswerResponse(answer=text, citations=evidence, fallback=True, confidence=0.0, grounded=False,
                          route=route, trace_id=trace.trace_id,
                          evidence_score=result.evidence_score if result else None, notes=[reason])


# a Markdown heading line names a section; it says nothing about it ("# Linden Bridge")
_HEADING = re.compile(r"^[ \t]*#{1,6}(?:[ \t]|$)")


def _evidence_sentences(text: str) -> list[tuple[str, bool]]:
    """The sentences of a chunk that can stand as evidence, as a reader sees them, verbatim, read
    across the line breaks that wrap a paragraph's lines (`cograg.text.soft_line_breaks`), each with
    whether it is cut at the chunk's edge: it ends the chunk without a stop, or opens it in lower
    case. A heading line is no evidence sentence, and a list item's bullet ("- ", "2. ") is layout,
    not its words: the item is quoted without it."""
    spans = [(a, b) for a, b in sentence_spans(text, semicolons=True, wrapped=True) if b - a >= 4]
    out = []
    for n, (a, b) in enumerate(spans):
        sentence = text[a:b]
        if _HEADING.match(sentence):
            continue
        bullet = LIST_ITEM.match(sentence)
        if bullet:
            sentence = sentence[bullet.end():]
            if len(sentence) < 4:
                continue
        cut = (n == len(spans) - 1 and not ends_as_a_sentence(sentence)) or (n == 0 and sentence[:1].islower())
        out.append((sentence, cut))
    return out


def closest_evidence(blocks: list[ContextBlock], question: str, *, count: int = 3) -> list[Citation]:
    """The context sentences closest to `question`, best first (at most `count`; none without
    blocks), each a citation of the chunk that holds it, quoting its stored text (the parts of a
    redacted chunk between placeholders only: `cograg.answer.redaction`). A sentence scores by the
    question's content words it shares, a word weighing more the fewer of the context's sentences
    have it, and the words of what is asked ("arches") and of the names it is asked of ("Linden
    Bridge") multiply: a sentence with both goes before one with more of either alone. A whole
    sentence goes before one cut at a chunk's edge; then one that shares a word of what is asked
    before one that only names what it is asked of ("It has seven arches." before "The Linden
    Bridge was designed by …" for "How many arches does the Linden Bridge have?"); then the score
    decides, then the better ranked block. Where no sentence shares a content word: the first
    block's sentence that best matches the question. (`refusal` shows the first that passes the
    injection check.)"""
    if not blocks:
        return []
    candidates = [(b, i, sentence, cut) for b in blocks for i, t in quotable_texts(b)
                  for sentence, cut in _evidence_sentences(t)]
    asked = content_words(question)
    named = set().union(*(content_words(e) for e in question_entities(question))) & asked
    shared = [content_words(c[2]) & asked for c in candidates]
    df = Counter(w for ws in shared for w in ws)
    weight = {w: math.log(1 + len(candidates) / n) for w, n in df.items()}

    def key(k: int) -> tuple[bool, bool, float, int, int]:
        b, _, _, cut = candidates[k]
        asks = sum(weight[w] for w in shared[k] - named)  # what is asked: "arches", "designed"
        about = sum(weight[w] for w in shared[k] & named)  # what it is asked of: "Linden Bridge"
        return (not cut, asks > 0, round((1 + asks) * (1 + about), 6), -b.best_rank, -k)

    chosen: list[tuple[ContextBlock, int, str]] = []
    for k in sorted((k for k in range(len(candidates)) if shared[k]), key=key, reverse=True):
        b, idx, sentence, _ = candidates[k]
        if sentence not in {quote for _, _, quote in chosen}:  # chunks overlap: one sentence once
            chosen.append((b, idx, sentence))
        if len(chosen) == count:
            break
    if not chosen:
        chosen = _first_block_fallback(blocks[0], candidates, question)
    return [Citation(id="1", doc_id=b.doc_id, chunk_id=b.chunk_ids[idx], quote=quote, source=b.source,
                     score=1.0, title=b.title, page=b.page, heading_path=b.heading_path_of(idx),
                     annotations=b.annotations)
            for b, idx, quote in chosen if quote]


def _first_block_fallback(block: ContextBlock, candidates: list[tuple[ContextBlock, int, str, bool]],
                          question: str) -> list[tuple[ContextBlock, int, str]]:
    """The first block's evidence sentence (a whole one first) that best matches the question;
    its best-matching passage where it has no such sentence."""
    own = [(k, c) for k, c in enumerate(candidates) if c[0] is block]
    if own:
        _, (b, idx, sentence, _) = max(own, key=lambda kc: (not kc[1][3], ngram_overlap(question, kc[1][2]), -kc[0]))
        return [(b, idx, sentence)]
    idx, quote, _, _ = locate_quote("", question, block)
    return [(block, idx, quote)]
