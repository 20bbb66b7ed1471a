"""Typed inputs and outputs of the retrieval stage."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from cograg.ingest.files import title_from_name
from cograg.retrieval.adaptive_fusion import FusionCalibration, FusionDecision
from cograg.retrieval.doc_aggregation import DocumentAggregation
from cograg.retrieval.feedback_settings import FeedbackSettings

SearchMode = Literal["bm25", "vector", "hybrid"]
FusionMethod = Literal["rrf", "weighted", "adaptive"]

MAX_QUERY_CHARS = 4000  # longer queries are cut here; the result says so

# A passage's fields that are its source text itself, under the names hits, chunks, citations and
# API bodies give it.
_TEXT_FIELDS = ("text", "reflowed", "quote", "snippet")
# Chunk metadata that names a passage without quoting it (a record's id); every other value
# (a JSON record's `title`, which is also the first line of its text) is read from the source.
_ID_METADATA = frozenset({"record_id"})


def source_text_withheld(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The values that replace, in a hit, chunk or citation shown to a user (a model as `dict(m)`,
    or a response body), every field carrying the text of a source the policy hides
    (`snippet_visible: false`, B2): its text, quote or snippet; its title and headings, since a
    Markdown heading or a record's title line is the text's first line; metadata read from it.
    The title becomes the one the file name gives (the source stays visible); ids, source, page and
    scores are kept. Only keys `fields` has are returned, so the result updates it as it is."""
    withheld: dict[str, Any] = {k: "" for k in _TEXT_FIELDS if k in fields}
    if "title" in fields:
        source = fields.get("source") or fields.get("source_path")
        withheld["title"] = title_from_name(Path(str(source))) if source else ""
    if "heading_path" in fields:
        withheld["heading_path"] = []
    if isinstance(fields.get("metadata"), Mapping):
        withheld["metadata"] = {k: v for k, v in fields["metadata"].items() if k in _ID_METADATA}
    return withheld


class Principal(BaseModel):
    """Who is asking (SPEC B3). Documents without an ACL are readable by everyone; otherwise the
    document ACL must name one of `groups`, `user:<user>` or `tenant:<tenant>`."""

    user: str | None = None
    groups: list[str] = Field(default_factory=list)
    tenant: str | None = None

    def acl_keys(self) -> list[str]:
        keys = list(self.groups)
        if self.user:
            keys.append(f"user:{self.user}")
        if self.tenant:
            keys.append(f"tenant:{self.tenant}")
        return sorted(set(keys))


class SearchRequest(BaseModel):
    query: str
    k: int = Field(10, description="results to return")
    mode: SearchMode = "hybrid"
    retrieve_k: int = Field(50, ge=1, le=1000, description="candidates per retriever")
    fusion: FusionMethod = "adaptive"
    rrf_k: int = Field(60, ge=1)
    vector_weight: float = Field(0.5, ge=0.0, le=1.0, description="weight of vectors in weighted fusion")
    fusion_calibration: FusionCalibration | None = Field(
        None, description="adaptive fusion's weights; None: the packaged calibration")
    feedback: FeedbackSettings | None = Field(None, description="BM25 pseudo-relevance feedback (RM3); None: off")
    document_aggregation: DocumentAggregation | None = Field(
        None, description="blend each chunk's score with its document's; None: off")
    variants: list[str] = Field(default_factory=list, description="extra query variants fused by RRF (B5)")
    principal: Principal | None = None
    rerank: bool = True
    rerank_candidates: int = Field(20, ge=1, le=200)
    doc_ids: list[str] | None = Field(None, description="scope: search only these documents (seed 004 docId)")
    min_vector_cosine: float | None = Field(
        None, ge=-1.0, le=1.0, description="drop hits whose vector cosine is below this (seed 003 similarityThreshold)")

    @field_validator("k")
    @classmethod
    def _k_positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("k must be at least 1")
        if v > 1000:
            raise ValueError("k must be at most 1000")
        return v


class RetrieverHit(BaseModel):
    rank: int
    score: float


class SourceLocation(BaseModel):
    """Where a passage stands in the collection, as shown next to it: the document's title and
    source path, the section headings above it and its page."""

    title: str
    source: str
    heading_path: list[str] = Field(default_factory=list)
    page: int | None = None


class SearchHit(SourceLocation):
    chunk_id: str
    doc_id: str
    seq: int
    text: str
    start: int
    end: int
    token_count: int
    metadata: dict[str, object] = Field(default_factory=dict)
    score: float = Field(description="final score used for ordering (fusion, policy, reranker)")
    retrievers: dict[str, RetrieverHit] = Field(default_factory=dict, description="rank/score per retriever")
    fused_score: float | None = None
    rerank_score: float | None = None
    annotations: list[str] = Field(default_factory=list)
    snippet_visible: bool = True


class SearchResult(BaseModel):
    query: str
    mode: SearchMode
    hits: list[SearchHit]
    evidence_score: float | None = Field(
        None, description="best evidence for the query: reranker score if reranking ran, else best cosine")
    evidence_source: str | None = None
    best_cosine: float | None = Field(
        None, description="best cosine of a chunk the user may see, also when a reranker set evidence_score")
    policy_version: str | None = None
    filtered_by_policy: int = 0
    fusion: FusionDecision | None = Field(None, description="how BM25 and vectors were fused for the query, and why")
    notes: list[str] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)

    def hidden_chunk_ids(self) -> set[str]:
        """Chunks whose text the policy keeps from the user (`snippet_visible: false`)."""
        return {h.chunk_id for h in self.hits if not h.snippet_visible}

    def for_user(self) -> SearchResult:
        """What a user may be shown: hits whose source text is hidden by the policy keep their
        ids, source and scores, and lose their text and what was read from it (B2)."""
        if all(h.snippet_visible for h in self.hits):
            return self
        return self.model_copy(update={"hits": [
            h if h.snippet_visible else h.model_copy(update=source_text_withheld(dict(h))) for h in self.hits]})
