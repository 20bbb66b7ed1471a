"""Typed data passed between the ingest stages: loader → normaliser/chunker → store. What the store
keeps (`Chunk`, `Document`) is in `cograg.documents`."""

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
