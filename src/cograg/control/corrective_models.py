"""The corrective loop's data (events, stop reasons, reply schemas, grades, rewrites, trace), apart from its logic."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from cograg.models.judge import MAX_REASON_CHARS, cut_reason
from cograg.retrieval.models import SearchHit

MAX_KEYWORDS = 8  # keywords a rewrite may carry (the rewriter's schema bounds the model's list)

# Event names of SPEC D6 emitted by the loop.
RETRIEVED = "RETRIEVED"
GRADED = "GRADED"
QUERY_REWRITTEN = "QUERY_REWRITTEN"
GENERATED = "GENERATED"
GRADE_OVERRIDDEN = "GRADE_OVERRIDDEN"  # nothing passed grading; the answer uses the retrieved evidence
ANSWER_RETRIED = "ANSWER_RETRIED"  # the graded answer was a refusal; answered again from the first search

StopReason = Literal[
    "grade_passed",  # the pass rate reached the threshold
    "max_rewrite_attempts",  # still below the threshold after the last allowed rewrite
    "rewrite_repeated",  # the rewriter proposed a query already tried (loop detection)
    "rewrite_failed",  # the rewriter gave no usable query (model error, empty answer)
    "no_rewriter",  # below the threshold and no rewriter configured
    "search_failed",  # a retrieval after a rewrite failed; earlier evidence is used
    "wall_budget",  # the wall-time budget or the caller's deadline ran out
    "token_budget",  # the LLM token budget ran out
    "cancelled",  # the cancel token was set; nothing is generated
]


# --------------------------------------------------------------------------- data types


class GradeVerdict(BaseModel):
    """The grader LLM's answer for one document (seed 003 grader JSON)."""

    is_relevant: bool
    confidence: float = Field(ge=0.0, le=1.0)
    # after the decision and the confidence, so bounding it changes neither (greedy decoding); the
    # 1.5B grader wrote up to ~80 tokens of reasoning per document. Cut, not rejected, when longer.
    reasoning: str = Field("", json_schema_extra={"maxLength": MAX_REASON_CHARS})

    @field_validator("reasoning", mode="before")
    @classmethod
    def _short_reasoning(cls, value: object) -> object:
        return cut_reason(value)

    @field_validator("confidence", mode="before")
    @classmethod
    def _percent_as_fraction(cls, v: Any) -> Any:
        # small models often write 85 for 0.85; anything else out of range stays invalid
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 1.0 < v <= 100.0:
            return v / 100.0
        return v


class DocumentGrade(BaseModel):
    """The grade of one retrieved chunk. `passed` is decided by code from the verdict."""

    chunk_id: str
    doc_id: str
    is_relevant: bool
    confidence: float = Field(ge=0.0, le=1.0)
    reasoning: str = ""
    error: str | None = None
    passed: bool = False
    attempt: int = 0
    cached: bool = Field(False, description="reused from an earlier attempt, no model call")
    prompt_tokens: int = 0
    completion_tokens: int = 0


class GraderResult(BaseModel):
    pass_rate: float
    pass_count: int
    total_count: int
    should_rewrite: bool
    reasoning: str


class RewriteProposal(BaseModel):
    """The JSON schema the rewriter LLM answers with (seed 003 rewrite JSON)."""

    rewritten_query: str
    # Bounded like the grader's reasoning: unbounded, the 1.5B rewriter explained itself until its
    # token budget ran out (192 tokens; the rewrite call took 19.0 s on 2 cores, 10.8 s bounded) and
    # never reached the keywords.
    rewrite_reason: str = Field("", json_schema_extra={"maxLength": MAX_REASON_CHARS})
    # The bound is in the schema, so a grammar-constrained model stops after it (the 1.5B model
    # listed keywords until its token budget ran out, ~190 tokens); a longer list from a backend
    # without a grammar is cut, not rejected.
    keywords: list[str] = Field(default_factory=list, json_schema_extra={"maxItems": MAX_KEYWORDS})

    @field_validator("rewrite_reason", mode="before")
    @classmethod
    def _short_reason(cls, value: object) -> object:
        return cut_reason(value)

    @field_validator("keywords", mode="before")
    @classmethod
    def _at_most_max_keywords(cls, value: object) -> object:
        return value[:MAX_KEYWORDS] if isinstance(value, list) else value


class RewriteResult(BaseModel):
    """An accepted rewrite: non-empty and different from every query tried before."""

    rewritten_query: str
    rewrite_reason: str = ""
    keywords: list[str] = Field(default_factory=list)
    attempt: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class RewriteRejected(BaseModel):
    """No useful rewrite: the loop stops rewriting."""

    reason: Literal["empty", "repeat", "model_error"]
    detail: str
    proposed_query: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class NodeExecution(BaseModel):
    node: Literal["retrieve", "grade", "rewrite", "generate"]
    started_ms: float = Field(description="since the start of the run")
    duration_ms: float
    detail: dict[str, Any] = Field(default_factory=dict)


class SCRAGState(BaseModel):
    """The loop's state (seed 003 `SCRAGState`), returned whole so the trace can show every step."""

    # query
    original_query: str = Field(frozen=True, description="the user's question, never modified")
    current_query: str
    # configuration
    top_k: int = Field(description="documents graded per retrieval (budget.grade_top_k)")
    similarity_threshold: float | None = Field(None, description="hits scoring below are not graded")
    max_rewrite_attempts: int
    grade_pass_threshold: float
    # retrieval of the current attempt
    retrieved_documents: list[SearchHit] = Field(default_factory=list)
    grader_result: GraderResult | None = None
    grades: list[DocumentGrade] = Field(default_factory=list, description="every grade, all attempts")
    filtered_documents: list[SearchHit] = Field(
        default_factory=list, description="passed in any attempt, by chunk id, best confidence first")
    # rewriting
    rewrite_history: list[RewriteResult] = Field(default_factory=list)
    rejected_rewrite: RewriteRejected | None = None
    current_rewrite_count: int = 0
    # generation
    answered_from: Literal["graded", "found_and_retrieved", "retrieved", "none"] = Field(
        "none", description="graded: the documents that passed (the first search is below the refusal floor); "
        "retrieved: the first search's documents (R1's evidence), its evidence score clearing the floor; "
        "found_and_retrieved: documents that passed in a rewrite's search, then the first search's; "
        "none: no documents")
    answer_chunk_ids: list[str] = Field(default_factory=list, description="what the answer was generated from")
    skipped_grading: list[int] = Field(
        default_factory=list, description="attempts whose search was not graded: evidence below the refusal floor")
    initial_evidence_score: float | None = Field(None, description="the first search's best evidence score")
    generation_result: Any = None
    final_answer: str = ""
    # flow control
    current_node: str = "start"
    should_continue: bool = True
    decision_path: list[str] = Field(default_factory=list)
    node_executions: list[NodeExecution] = Field(default_factory=list)
    total_duration_ms: float = 0.0
    stop_reason: StopReason | None = None
    stop_detail: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def was_rewritten(self) -> bool:
        return self.current_rewrite_count > 0

    def summary(self) -> dict[str, Any]:
        """The seed 003 API response shape (query / rewriteHistory / retrieval / graderResult / workflow)."""
        return {
            "answer": self.final_answer,
            "query": {"original": self.original_query, "final": self.current_query,
                      "was_rewritten": self.was_rewritten, "rewrite_count": self.current_rewrite_count},
            "rewrite_history": [r.model_dump() for r in self.rewrite_history],
            "retrieval": {"total_documents": len(self.retrieved_documents),
                          "filtered_documents": len(self.filtered_documents),
                          "documents": [h.chunk_id for h in self.filtered_documents]},
            "grader_result": self.grader_result.model_dump() if self.grader_result else None,
            "workflow": {"node_executions": [n.model_dump() for n in self.node_executions],
                         "decision_path": list(self.decision_path),
                         "total_duration_ms": self.total_duration_ms,
                         "stop_reason": self.stop_reason, "stop_detail": self.stop_detail,
                         "answered_from": self.answered_from},
        }


__all__ = [
    "ANSWER_RETRIED",
    "GENERATED",
    "GRADED",
    "GRADE_OVERRIDDEN",
    "QUERY_REWRITTEN",
    "RETRIEVED",
    "DocumentGrade",
    "GradeVerdict",
    "GraderResult",
    "NodeExecution",
    "RewriteProposal",
    "RewriteRejected",
    "RewriteResult",
    "SCRAGState",
    "StopReason",
]
