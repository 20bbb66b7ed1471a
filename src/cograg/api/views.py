"""From engine results to response bodies, under the corpus policy's `snippet_visible`: when it is
false no response, event or trace shown by the API carries source text (quotes, snippets,
passages); ids, sources and scores stay."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from cograg.api.schemas import (CitationV2, GradedDocument, GraderInfo, NodeExecutionInfo, QAResponseV2, QueryInfo,
                                RetrievalInfo, RewriteEntry, SelfCorrectiveResponse, WorkflowInfo)
from cograg.retrieval.models import source_text_withheld

# Keys whose values are source text in answers, events and traces, or a model's words about a
# passage it read (a grader's reasoning may quote it).
SOURCE_TEXT_KEYS = frozenset({"quote", "snippet", "text", "passage", "evidence", "context", "chunk_text",
                              "reasoning"})


def file_names_only(value: Any) -> Any:
    """`value` with every `source` / `source_path` field cut to its file name, recursively: clients
    see which document, never the server's directory layout."""
    if isinstance(value, dict):
        return {k: (PurePath(v).name if k in ("source", "source_path") and isinstance(v, str) and v
                    else file_names_only(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [file_names_only(v) for v in value]
    return value


def hide_source_text(value: Any) -> Any:
    """`value` with every source-text field emptied, recursively (dicts and lists); a claim
    verdict (a dict with `verdict`) also loses the judge's `reason`, which may quote the passage,
    and a passage (a dict with `chunk_id`: a hit or citation) the title and headings read from it."""
    if isinstance(value, dict):
        claim = "verdict" in value
        if "chunk_id" in value or "chunkId" in value:
            value = {**value, **source_text_withheld(value)}
        return {k: ("" if (k in SOURCE_TEXT_KEYS or (claim and k == "reason")) and isinstance(v, str)
                    else hide_source_text(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [hide_source_text(v) for v in value]
    return value


def citations_v2(citations: list[Any], *, visible: bool) -> list[CitationV2]:
    # the file name, not the server's path to it (doc_id tells two files of the same name apart)
    shown = [CitationV2(citation_id=c.id, doc_id=c.doc_id, source=PurePath(c.source).name, chunk_id=c.chunk_id,
                        snippet=c.quote, score=round(float(c.score), 4), title=c.title, page=c.page)
             for c in citations]
    return shown if visible else [withheld(c) for c in shown]


def withheld(model: Any) -> Any:
    """`model` (a citation or graded document of the response) without the source text, the title
    and the headings the policy hides (`snippet_visible: false`)."""
    return model.model_copy(update=source_text_withheld(dict(model)))


def answer_text(resp: Any, *, visible: bool) -> str:
    """The answer; with snippets hidden, a refusal that shows its closest evidence ("the closest
    evidence says: “…”") loses the quoted passage."""
    text = resp.answer
    if not visible and resp.fallback:
        for c in resp.citations:
            if c.quote and c.quote in text:
                text = text.replace(c.quote, "…")
    return text


def claims_view(resp: Any, *, visible: bool) -> list[dict[str, Any]]:
    claims = [c.model_dump(mode="json") for c in resp.claims]
    return claims if visible else hide_source_text(claims)


def qa_v2(resp: Any, *, visible: bool, session: str | None = None) -> QAResponseV2:
    claims = claims_view(resp, visible=visible)
    return QAResponseV2(answer=answer_text(resp, visible=visible),
                        citations=citations_v2(resp.citations, visible=visible),
                        confidence=round(float(resp.confidence), 4), grounded=resp.grounded, route=resp.route,
                        trace_id=resp.trace_id, mode=resp.mode, claims=claims, fallback=resp.fallback,
                        session=session)


def qa_simple(resp: Any, *, visible: bool) -> dict[str, Any]:
    """The simple path's body: the C1 contract object as `cograg ask --json` prints it."""
    body = resp.model_dump(mode="json", include={"answer", "citations", "fallback", "confidence", "grounded",
                                                 "route", "trace_id", "mode"})
    body["answer"] = answer_text(resp, visible=visible)
    body = file_names_only(body)  # the contract object carries each citation's path; a client gets its name
    return body if visible else hide_source_text(body)


def self_corrective(query: str, resp: Any, trace: dict[str, Any], chunk_lookup: Any, *,
                    visible: bool) -> SelfCorrectiveResponse:
    """Seed 003's response from the turn's answer and the loop state in its trace. When R2 fell
    back (no loop state), the query is reported unchanged and the workflow names the mode used."""
    data = trace.get("data", trace)
    loop: dict[str, Any] = data.get("loop") or {}
    history = [RewriteEntry(rewrittenQuery=r.get("rewritten_query", ""), rewriteReason=r.get("rewrite_reason", ""),
                            keywords=list(r.get("keywords", [])), attempt=int(r.get("attempt", 0)))
               for r in loop.get("rewrite_history", [])]
    passed = set(loop.get("filtered_chunk_ids", []))
    latest: dict[str, dict[str, Any]] = {}
    for g in loop.get("grades", []):  # the latest grade of each chunk, in first-seen order
        latest[g["chunk_id"]] = g
    documents = []
    for chunk_id, g in latest.items():
        chunk, doc = chunk_lookup(chunk_id)
        graded = GradedDocument(
            chunkId=chunk_id, docId=g.get("doc_id", ""), source=PurePath(doc.source_path).name if doc else "",
            title=doc.title if doc else "", snippet=chunk.text if chunk else "",
            passed=chunk_id in passed, isRelevant=bool(g.get("is_relevant")),
            confidence=float(g.get("confidence", 0.0)), reasoning=(g.get("reasoning", "") or "") if visible else "",
            attempt=int(g.get("attempt", 0)))
        documents.append(graded if visible else withheld(graded))
    grader = loop.get("grader_result")
    rewrites = int(loop.get("current_rewrite_count", 0))
    return SelfCorrectiveResponse(
        success=True, answer=answer_text(resp, visible=visible),
        query=QueryInfo(original=loop.get("original_query", query), final=loop.get("current_query", query),
                        wasRewritten=rewrites > 0, rewriteCount=rewrites),
        rewriteHistory=history,
        retrieval=RetrievalInfo(totalDocuments=len(latest), filteredDocuments=len(passed), documents=documents),
        graderResult=GraderInfo(passRate=grader["pass_rate"], passCount=grader["pass_count"],
                                totalCount=grader["total_count"], shouldRewrite=grader["should_rewrite"],
                                reasoning=grader.get("reasoning", "")) if grader else None,
        workflow=WorkflowInfo(
            nodeExecutions=[NodeExecutionInfo(node=n["node"], startedMs=n["started_ms"], durationMs=n["duration_ms"],
                                              detail=n.get("detail", {})) for n in loop.get("node_executions", [])],
            decisionPath=list(loop.get("decision_path", [])),
            totalDuration=float(loop.get("total_duration_ms", resp.explain.get("duration_ms", 0.0) or 0.0)),
            mode=resp.mode, stopReason=loop.get("stop_reason")),
        citations=citations_v2(resp.citations, visible=visible), fallback=resp.fallback, traceId=resp.trace_id)


__all__ = ["SOURCE_TEXT_KEYS", "answer_text", "citations_v2", "claims_view", "file_names_only", "hide_source_text",
           "qa_simple", "qa_v2", "self_corrective", "withheld"]
