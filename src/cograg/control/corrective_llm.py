"""The corrective loop's model calls (document grader, query rewriter, prompt-safety helpers), apart from its flow."""

from __future__ import annotations

import re
import unicodedata
from pathlib import PurePath
from typing import Any, TypeVar

from pydantic import BaseModel

from cograg.answer.injection import redact
from cograg.answer.subject import question_entities
from cograg.control.corrective_models import (
    MAX_KEYWORDS,
    DocumentGrade,
    GradeVerdict,
    RewriteProposal,
    RewriteRejected,
    RewriteResult,
)
from cograg.models import ModelError
from cograg.retrieval.models import SearchHit

# A document passes when the grader calls it relevant with at least this confidence (SPEC D2); the
# default of `control.grade_min_confidence`, which the orchestrator passes in.
PASS_MIN_CONFIDENCE = 0.5
# How many failed documents, and how much of each, the rewriter is shown: enough to see why the
# search missed, little enough to keep a small model's context for the task.
FAILED_CONTEXT_DOCS = 3
FAILED_CONTEXT_CHARS = 240
MAX_REWRITE_CHARS = 300


# --------------------------------------------------------------------------- helpers


_FENCE_TAGS = re.compile(r"<\s*/?\s*(document|question|original_question|current_query|previous_queries|"
                         r"failed_results|result|entities)\b", re.I)


def _defuse(text: str) -> str:
    """Untrusted text that cannot close or open the prompt's fences (the tag loses its '<')."""
    return _FENCE_TAGS.sub(lambda m: "‹" + m.group(0)[1:], text)


def _count_tokens(llm: Any, text: str) -> int:
    from cograg.models.llm import simple_token_count

    counter = getattr(llm, "count_tokens", None)
    if counter is not None:
        try:
            return int(counter(text))
        except ModelError:
            pass
    return simple_token_count(text)


def _truncate_tokens(llm: Any, text: str, max_tokens: int) -> str:
    """`text` cut to at most `max_tokens` model tokens (binary search on the character length)."""
    if _count_tokens(llm, text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _count_tokens(llm, text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + " …"


_NOT_WORD = re.compile(r"[\W_]+", re.U)


def normalize_query(query: str) -> str:
    """A query reduced for repeat detection: NFKC, case-folded, punctuation and spacing ignored."""
    return _NOT_WORD.sub(" ", unicodedata.normalize("NFKC", query).casefold()).strip()


def _one_line(text: str, limit: int) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    return flat if len(flat) <= limit else flat[:limit].rstrip() + " …"


_Reply = TypeVar("_Reply", bound=BaseModel)


class _JSONPromptCall:
    """A component that renders one prompt, sends it as one user message and reads back one
    schema-checked object (the grader and the rewriter)."""

    def __init__(self, llm: Any, prompt: str, *, timeout_s: float | None, max_tokens: int) -> None:
        from cograg.prompts import load_prompt

        self.llm = llm
        self.prompt = load_prompt(prompt)
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens

    def _ask(self, content: str, schema: type[_Reply], timeout_s: float | None) -> tuple[_Reply, Any]:
        """The model's `schema` object and response; `timeout_s` (the time left) caps the configured one."""
        from cograg.models.llm import ChatMessage

        limit = self.timeout_s if timeout_s is None else (
            timeout_s if self.timeout_s is None else min(self.timeout_s, timeout_s))
        return self.llm.chat_json([ChatMessage(role="user", content=content)], schema,
                                  max_tokens=self.max_tokens, timeout_s=limit)


def _spent_tokens(exc: ModelError) -> dict[str, int]:
    """The tokens a failed model call used (a timeout carries them), as result fields."""
    return {"prompt_tokens": int(getattr(exc, "prompt_tokens", 0) or 0),
            "completion_tokens": int(getattr(exc, "completion_tokens", 0) or 0)}


# --------------------------------------------------------------------------- grader


class DocumentGrader(_JSONPromptCall):
    """The seed 003 grader: one LLM call per document, the `grade_document` prompt.

    Passage text is stripped of instruction-like spans (SPEC C5) and cut to `max_passage_tokens`
    before it is shown. A model error on a document grades it not relevant, with the error kept.
    """

    def __init__(self, llm: Any, *, timeout_s: float | None = 30.0, max_passage_tokens: int = 512,
                 max_tokens: int = 160, min_confidence: float = PASS_MIN_CONFIDENCE) -> None:
        super().__init__(llm, "grade_document", timeout_s=timeout_s, max_tokens=max_tokens)
        self.max_passage_tokens = max_passage_tokens
        self.min_confidence = min_confidence

    def grade(self, question: str, hit: SearchHit, *, timeout_s: float | None = None,
              attempt: int = 0) -> DocumentGrade:
        """The grade of `hit` for `question`; `timeout_s` (the time left) caps the configured one."""
        passage = _truncate_tokens(self.llm, redact(hit.text).text, self.max_passage_tokens)
        source = PurePath(hit.source).name if hit.source else ""
        # the document's title and the headings above the passage (a record's own title in a
        # JSONL corpus): what the passage is about, often the entity a multi-hop step names
        title = " › ".join(dict.fromkeys(t for t in (hit.title, *hit.heading_path) if t and t.strip()))
        content = self.prompt.render(question=_defuse(question), title=_defuse(redact(title).text),
                                     source=_defuse(redact(source).text), document=_defuse(passage),
                                     entities=[_defuse(e) for e in question_entities(question)])
        try:
            verdict, resp = self._ask(content, GradeVerdict, timeout_s)
        except ModelError as exc:
            return DocumentGrade(chunk_id=hit.chunk_id, doc_id=hit.doc_id, is_relevant=False, confidence=0.0,
                                 reasoning="", error=f"{type(exc).__name__}: {exc}", passed=False, attempt=attempt,
                                 **_spent_tokens(exc))
        passed = bool(verdict.is_relevant) and verdict.confidence >= self.min_confidence
        return DocumentGrade(chunk_id=hit.chunk_id, doc_id=hit.doc_id, is_relevant=verdict.is_relevant,
                             confidence=verdict.confidence, reasoning=_one_line(verdict.reasoning, 500),
                             passed=passed, attempt=attempt, prompt_tokens=resp.prompt_tokens,
                             completion_tokens=resp.completion_tokens)


# --------------------------------------------------------------------------- rewriter


class QueryRewriter(_JSONPromptCall):
    """The seed 003 rewriter: proposes a new search query from the failed results (`rewrite_query`).

    Accepts a proposal only if it is non-empty and, normalised, differs from the original query,
    the current one and every earlier rewrite; otherwise the loop stops rewriting.
    """

    def __init__(self, llm: Any, *, timeout_s: float | None = 30.0, max_tokens: int = 192) -> None:
        super().__init__(llm, "rewrite_query", timeout_s=timeout_s, max_tokens=max_tokens)

    def rewrite(self, original_query: str, current_query: str, history: list[RewriteResult],
                failed: list[tuple[SearchHit, DocumentGrade | None]], *, timeout_s: float | None = None,
                attempt: int = 0) -> RewriteResult | RewriteRejected:
        failed_context = []
        for hit, grade in failed[:FAILED_CONTEXT_DOCS]:
            snippet = _one_line(redact(hit.text).text, FAILED_CONTEXT_CHARS)
            line = f"{hit.title}: {snippet}" if hit.title else snippet
            if grade is not None and grade.reasoning:
                line += f"\n(grader: {_one_line(grade.reasoning, 160)})"
            failed_context.append(_defuse(line))
        content = self.prompt.render(
            original_query=_defuse(original_query), current_query=_defuse(current_query),
            history=[h.model_copy(update={"rewritten_query": _defuse(h.rewritten_query),
                                          "rewrite_reason": _defuse(_one_line(h.rewrite_reason, 160))})
                     for h in history],
            failed=failed_context)
        try:
            proposal, resp = self._ask(content, RewriteProposal, timeout_s)
        except ModelError as exc:
            return RewriteRejected(reason="model_error", detail=f"{type(exc).__name__}: {exc}", **_spent_tokens(exc))
        tokens = {"prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens}
        query = _one_line(proposal.rewritten_query, MAX_REWRITE_CHARS)
        if not normalize_query(query):
            return RewriteRejected(reason="empty", detail="the rewriter proposed an empty query",
                                   proposed_query=query, **tokens)
        tried = {normalize_query(q) for q in (original_query, current_query, *(h.rewritten_query for h in history))}
        if normalize_query(query) in tried:
            return RewriteRejected(reason="repeat", detail=f"the rewriter repeated a query already tried: {query!r}",
                                   proposed_query=query, **tokens)
        keywords: list[str] = []
        for k in proposal.keywords:
            k = _one_line(k, 40)
            if k and k not in keywords:
                keywords.append(k)
        return RewriteResult(rewritten_query=query, rewrite_reason=_one_line(proposal.rewrite_reason, 300),
                             keywords=keywords[:MAX_KEYWORDS], attempt=attempt, **tokens)



__all__ = [
    "FAILED_CONTEXT_CHARS",
    "FAILED_CONTEXT_DOCS",
    "MAX_KEYWORDS",
    "MAX_REWRITE_CHARS",
    "PASS_MIN_CONFIDENCE",
    "DocumentGrader",
    "QueryRewriter",
    "normalize_query",
]
