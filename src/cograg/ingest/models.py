"""Typed data passed between the ingest stages: loader → normaliser/chunker → store."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field


@dataclass(frozen=True)
class Block:
    """A structural unit of a loaded document (section, page, code unit, record, text window).

    `text` is un-normalised; `orig_start` is its offset in the loader's extracted text, which for
    Markdown, plain text and code is the file's own decoded text.
    """

    text: str
    orig_start: int
    heading_path: tuple[str, ...] = ()
    page: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    kind: str = "prose"  # "prose" | "code" | "record"


@dataclass
class LoadedDocument:
    """What a loader produces. `blocks` is an iterator so large files stream through."""

    doc_type: str
    title: str
    blocks: Iterator[Block]
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


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


class SkippedFile(BaseModel):
    path: str
    reason: str


class IngestSummary(BaseModel):
    """Result of one `ingest` run; counts are documents, `chunks` is the store's total."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    skipped: list[SkippedFile] = Field(default_factory=list)
    warnings: list[SkippedFile] = Field(default_factory=list)
    chunks: int = 0
    chunks_written: int = 0
    elapsed_s: float = 0.0
