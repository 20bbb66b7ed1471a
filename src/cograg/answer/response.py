"""What a verified answer returns (SPEC C1 plus the verifier's verdicts) and how it is recorded."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, Field

from cograg.answer.contract import Citation, ContractIssues
from cograg.answer.verifier import ClaimCheck, Verifier
from cograg.retrieval.models import source_text_withheld
from cograg.trace import RecordingLLM, Trace


class RemovedCounts(ContractIssues):
    unsupported_sentences: int = 0
    injection_sentences: int = 0
    regenerations: int = 0
    rewrites: int = 0  # drafts written again after the verifier rejected every sentence
    over_limit_sentences: int = 0  # draft sentences past `answer.max_sentences`, cut before verification


class AnswerResponse(BaseModel):
    """The contract object of SPEC C1 plus the verifier's per-claim verdicts."""

    answer: str
    citations: list[Citation] = Field(default_factory=list)
    fallback: bool
    confidence: float
    grounded: bool
    route: str
    trace_id: str
    claims: list[ClaimCheck] = Field(default_factory=list)
    removed: RemovedCounts = Field(default_factory=RemovedCounts)
    evidence_score: float | None = None
    clarification: str | None = None
    notes: list[str] = Field(default_factory=list)
    mode: str | None = Field(None, description="execution mode R0…R5 chosen by the router (D1)")
    explain: dict[str, Any] = Field(default_factory=dict, description="route, decision path, plan, node timings")


def recording_verifier(verifier: Verifier, trace: Trace) -> Verifier:
    """A copy of `verifier` whose judge's model calls land in `trace`. A copy, not a swap, so
    answers verified concurrently (parallel plan tasks, HTTP requests) never see each other's."""
    judge_llm = getattr(verifier.judge, "llm", None)
    if judge_llm is None:
        return verifier
    judge = copy.copy(verifier.judge)
    judge.llm = RecordingLLM(judge_llm, trace, purpose="verify")
    clone = copy.copy(verifier)
    clone.judge = judge
    return clone


def withhold_quotes(citations: list[Citation], hidden: set[str]) -> list[Citation]:
    """`citations` as a user may see them: a citation of a chunk whose text the policy hides
    (`snippet_visible: false`) keeps its id, document, source and score, and loses its quote and
    the title and headings read from the text."""
    return [c.model_copy(update=source_text_withheld(dict(c))) if c.chunk_id in hidden else c for c in citations]


def record_outcome(trace: Trace, resp: AnswerResponse) -> None:
    """Write the delivered answer into its trace (F5)."""
    trace.route = resp.route
    trace.outcome.update({"fallback": resp.fallback, "grounded": resp.grounded, "confidence": resp.confidence,
                          "answer": resp.answer, "citations": [c.model_dump() for c in resp.citations],
                          "removed": resp.removed.model_dump()})


__all__ = ["AnswerResponse", "RemovedCounts", "record_outcome", "recording_verifier", "withhold_quotes"]
