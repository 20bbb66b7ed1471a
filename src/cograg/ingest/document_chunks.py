"""A loaded document as chunks: each normalised block cut by its chunking config, every chunk given
its stable id and both offset systems (SPEC A2/A3). Ids: a document's from its source path, a
chunk's from its document, position and text, so unchanged chunks keep their ids across syncs."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from cograg.config import ChunkingConfig
from cograg.documents import Chunk
from cograg.ingest.chunking import chunk_block
from cograg.ingest.models import LoadedDocument
from cograg.ingest.normalize import normalize
from cograg.ingest.tokens import count_tokens

# Bump when loaders/normalisation change output, so stored documents are re-chunked.
PIPELINE_VERSION = "2"


def doc_id_for(source_path: str) -> str:
    """Stable across content changes: the id is derived from the source path only."""
    return hashlib.sha256(source_path.encode("utf-8")).hexdigest()[:16]


def chunk_id_for(doc_id: str, seq: int, text: str) -> str:
    h = hashlib.blake2b(f"{doc_id}\0{seq}\0{text}".encode(), digest_size=8).hexdigest()
    return f"{doc_id[:8]}-{h}"


def chunker_signature(config: ChunkingConfig) -> str:
    return f"v{PIPELINE_VERSION}:{config.strategy}:{config.chunk_size}:{config.chunk_overlap}"


def chunk_document(loaded: LoadedDocument, doc_id: str, config: ChunkingConfig) -> Iterator[Chunk]:
    """Normalise each block, cut it into chunks and give each chunk ids and both offset systems.

    Normalised document offsets treat the document as its normalised blocks joined by a blank line.
    """
    seq = 0
    cursor = 0
    language = loaded.metadata.get("language")
    for block in loaded.blocks:
        norm = normalize(block.text, keep_indentation=block.kind == "code")
        if not norm.text:
            continue
        for s, e in chunk_block(norm.text, config, language=language):
            text = norm.text[s:e]
            heading = list(block.heading_path)
            if block.kind == "code" and (s > 0 or not heading):
                # a chunk that does not start its unit: give it back the indentation that
                # trimming took off its first line, so its first method is recognised
                line_start = norm.text.rfind("\n", 0, s) + 1
                indent = norm.text[line_start:s]
                heading = _refine_code_heading(heading, (indent if not indent.strip() else "") + text)
            yield Chunk(
                chunk_id=chunk_id_for(doc_id, seq, text), doc_id=doc_id, seq=seq, text=text,
                start=cursor + s, end=cursor + e,
                orig_start=block.orig_start + norm.to_original(s),
                orig_end=block.orig_start + norm.to_original(e),
                heading_path=heading, page=block.page, token_count=count_tokens(text),
                metadata=dict(block.meta),
            )
            seq += 1
        cursor += len(norm.text) + 2


def _refine_code_heading(heading: list[str], text: str) -> list[str]:
    """A chunk cut from inside a class is labelled with the first method it contains."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("def ", "async def ", "func ", "function ")) and line[:1].isspace():
            name = stripped.split("(", 1)[0].replace("async ", "")
            return heading + [name] if name not in heading else heading
    return heading


__all__ = ["PIPELINE_VERSION", "chunk_document", "chunk_id_for", "chunker_signature", "doc_id_for"]
