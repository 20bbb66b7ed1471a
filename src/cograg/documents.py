"""The stored units of the collection: documents and their chunks. Written by ingest, kept by the
index, read by retrieval and answers; they sit below all of them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Chunk(BaseModel):
    """One stored chunk with stable ids and offsets (SPEC A3)."""

    chunk_id: str
    doc_id: str
    seq: int
    text: str
    start: int = Field(description="offset in the normalised document text")
    end: int
    orig_start: int = Field(description="offset in the extracted source text")
    orig_end: int
    heading_path: list[str] = Field(default_factory=list)
    page: int | None = None
    token_count: int
    metadata: dict[str, Any] = Field(default_factory=dict)


class Document(BaseModel):
    """A stored document and its policy metadata (SPEC A7)."""

    doc_id: str
    source_path: str
    root: str | None = None
    content_hash: str
    doc_type: str
    title: str
    tags: list[str] = Field(default_factory=list)
    acl: list[str] = Field(default_factory=list)
    size_bytes: int
    updated_at: str
    ingested_at: str
    chunker: str
    chunk_count: int
    metadata: dict[str, Any] = Field(default_factory=dict)
