"""Request and response bodies of the HTTP API (SPEC F3), shaped as seeds 003 and 004 give them.

Seed 004's qa/v2 uses snake_case; seed 003's self-corrective endpoint uses camelCase, field names
exactly as the seed writes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cograg.memory.store import SessionError, check_session_id

if TYPE_CHECKING:
    from fastapi import FastAPI

MAX_DOC_IDS = 200


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)


class QARequest(_Request):
    """A question, optionally in a session, scoped to some documents, in a forced mode."""

    # its limit is the server's `answer.max_question_chars`, checked before anything runs (400);
    # the app's OpenAPI document gives that number (`advertise_question_limit`)
    question: str = Field(min_length=1)
    session: str | None = Field(None, description="conversation id (created on first use; 1 to 200 characters, "
                                                  "no '/')")
    doc_ids: list[str] | None = Field(None, max_length=MAX_DOC_IDS,
                                      description="search only these documents (ids or id prefixes)")
    mode: str | None = Field(None, description="force an execution mode: R0…R5 or its full name")
    model: str | None = Field(None, description="model profile: default | fast")

    @field_validator("session")
    @classmethod
    def _session_id(cls, v: str | None) -> str | None:
        try:
            return check_session_id(v) if v else None  # "" asks outside a session, as leaving it out does
        except SessionError as exc:  # a 422 naming the rule, as for any field
            raise ValueError(str(exc)) from None

    @field_validator("doc_ids")
    @classmethod
    def _no_empty_ids(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:  # a scope of no document would search nothing and always refuse
            raise ValueError("doc_ids is empty: leave it out to search every document")
        if v is not None and any(not d.strip() for d in v):
            raise ValueError("doc_ids must not contain empty ids")
        return v


# the request fields that carry a question, by their schema's name in the OpenAPI document
QUESTION_FIELDS = (("QARequest", "question"), ("SelfCorrectiveRequest", "query"))


def advertise_question_limit(app: FastAPI, max_chars: int) -> None:
    """Make `app`'s OpenAPI document give `max_chars` (the server's `answer.max_question_chars`) as
    the question's maxLength: a fixed number in the model would advertise a limit the server does
    not apply, whenever the setting differs from it."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        spec = generate()
        schemas = spec.get("components", {}).get("schemas", {})
        for model, field in QUESTION_FIELDS:
            prop = schemas.get(model, {}).get("properties", {}).get(field)
            if prop is not None:
                prop["maxLength"] = max_chars
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


class CitationV2(BaseModel):
    """Seed 004 §9.1 citation. `snippet` is empty when the corpus policy hides source text."""

    citation_id: str
    doc_id: str
    source: str
    chunk_id: str
    snippet: str
    score: float
    title: str = ""
    page: int | None = None


class QAResponseV2(BaseModel):
    """Seed 004 §9.1 response plus the execution mode, the verifier's verdicts and `fallback`."""

    answer: str
    citations: list[CitationV2]
    confidence: float
    grounded: bool
    route: str
    trace_id: str
    mode: str | None = None
    claims: list[dict[str, Any]] = Field(default_factory=list)
    fallback: bool
    session: str | None = None


class SelfCorrectiveRequest(_Request):
    """Seed 003's request. `milvusConfig` is accepted and ignored: the store is the server's."""

    query: str = Field(min_length=1)  # at most `answer.max_question_chars`, as `QARequest.question`
    topK: int = Field(5, ge=1, le=20)
    similarityThreshold: float | None = Field(
        None, ge=-1.0, le=1.0, description="documents whose vector cosine is below this are not graded")
    maxRewriteAttempts: int = Field(3, ge=0, le=10)
    gradePassThreshold: float = Field(0.6, ge=0.0, le=1.0)
    milvusConfig: dict[str, Any] | None = None


class QueryInfo(BaseModel):
    original: str
    final: str
    wasRewritten: bool
    rewriteCount: int


class RewriteEntry(BaseModel):
    rewrittenQuery: str
    rewriteReason: str
    keywords: list[str]
    attempt: int


class GradedDocument(BaseModel):
    chunkId: str
    docId: str
    source: str
    title: str
    snippet: str
    passed: bool
    isRelevant: bool
    confidence: float
    reasoning: str
    attempt: int


class RetrievalInfo(BaseModel):
    totalDocuments: int
    filteredDocuments: int
    documents: list[GradedDocument]


class GraderInfo(BaseModel):
    passRate: float
    passCount: int
    totalCount: int
    shouldRewrite: bool
    reasoning: str


class NodeExecutionInfo(BaseModel):
    node: str
    startedMs: float
    durationMs: float
    detail: dict[str, Any] = Field(default_factory=dict)


class WorkflowInfo(BaseModel):
    nodeExecutions: list[NodeExecutionInfo]
    decisionPath: list[str]
    totalDuration: float = Field(description="milliseconds")
    mode: str | None = Field(None, description="the mode that answered (R1 when R2 fell back)")
    stopReason: str | None = None


class SelfCorrectiveResponse(BaseModel):
    success: bool
    answer: str
    query: QueryInfo
    rewriteHistory: list[RewriteEntry]
    retrieval: RetrievalInfo
    graderResult: GraderInfo | None
    workflow: WorkflowInfo
    citations: list[CitationV2] = Field(default_factory=list)
    fallback: bool = False
    traceId: str = ""


class DocumentInfo(BaseModel):
    doc_id: str
    title: str
    source: str
    doc_type: str
    tags: list[str]
    chunk_count: int
    size_bytes: int
    updated_at: str
    # whether the caller asking may delete it over HTTP: a document it uploaded (the corpus is
    # deleted by the operator, with `cograg docs delete`)
    deletable: bool = False
    # false: the corpus policy (allow_sources, deny_tags) keeps it out of every search and answer;
    # listed all the same, so that whoever manages the documents sees why it is never cited
    in_answers: bool = True


class UploadResult(BaseModel):
    documents: list[DocumentInfo]
    added: int
    updated: int
    unchanged: int
    skipped: list[dict[str, str]]
    warnings: list[dict[str, str]]
    chunks: int


class ErrorBody(BaseModel):
    error: str
    detail: str


__all__ = [name for name in dir() if name[0].isupper()]
