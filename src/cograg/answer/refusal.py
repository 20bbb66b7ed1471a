"""A refusal (SPEC C1, C4): the one-line reason, and the closest evidence where some is safe to show.

A refusal never delivers an unverified statement. It may show one passage as the closest evidence:
that passage passes the same injection check as an answer sentence, and where the policy hides its
source's text (`snippet_visible: false`) the refusal names the source and quotes nothing.
"""

from __future__ import annotations

from cograg.answer.contract import Citation, locate_quote
from cograg.answer.injection import untrusted_quote
from cograg.answer.response import AnswerResponse
from cograg.messages import message
from cograg.retrieval.models import SearchResult
from cograg.retrieval.packing import ContextBlock
from cograg.text import is_chinese
from cograg.trace import Trace


def refusal(question: str, trace: Trace, result: SearchResult | None, reason: str, route: str = "REFUSED",
            evidence: list[Citation] | None = None) -> AnswerResponse:
    """The refused turn's response, with `reason` in the trace's outcome and a REFUSED event; the
    first of `evidence` that passes the injection check is shown as the closest evidence."""
    lang = "zh" if is_chinese(question) else "en"
    evidence = [c for c in evidence or [] if c.quote and not untrusted_quote(c.quote)]
    if evidence:
        best = evidence[0].model_copy(update={"id": "1"})
        if result is not None and best.chunk_id in result.hidden_chunk_ids():
            text = message("refusal.closest_source", lang)
            best = best.model_copy(update={"quote": ""})
        else:
            text = message("refusal.closest_evidence", lang, quote=best.quote)
        evidence = [best]
    else:
        text = message("refusal.no_evidence", lang)
    trace.outcome = {"fallback": True, "reason": reason}
    trace.event("REFUSED", reason=reason)
    return AnswerResponse(answer=text, citations=evidence, fallback=True, confidence=0.0, grounded=False,
                          route=route, trace_id=trace.trace_id,
                          evidence_score=result.evidence_score if result else None, notes=[reason])


def closest_evidence(blocks: list[ContextBlock], question: str) -> list[Citation]:
    """The first block's passage that best matches `question`, as a citation (none without blocks)."""
    if not blocks:
        return []
    b = blocks[0]
    idx, quote, _, _ = locate_quote("", question, b)
    return [Citation(id="1", doc_id=b.doc_id, chunk_id=b.chunk_ids[idx], quote=quote, source=b.source,
                     score=1.0, title=b.title, page=b.page, heading_path=b.heading_path, annotations=b.annotations)]
