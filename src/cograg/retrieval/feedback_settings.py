"""Settings of BM25 pseudo-relevance feedback (see `cograg.retrieval.feedback`)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class FeedbackSettings(BaseModel):
    feedback_docs: int = Field(5, ge=1, le=50, description="top BM25 chunks taken as relevant")
    expansion_terms: int = Field(8, ge=1, le=64, description="terms added from them")
    expansion_weight: float = Field(0.3, ge=0.0, le=1.0, description="λ: weight of the expansion query's scores")
