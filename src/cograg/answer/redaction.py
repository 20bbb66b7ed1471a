"""Redacted context (SPEC C2, C5): the blocks the model is shown, and the parts of them a quote may be.

Instruction-like spans of a chunk are replaced by REDACTED before the model sees the chunk
(`cograg.answer.injection`). The placeholder is no text of the stored chunk, so a quote copied from
the block as shown may hold words the source never had. Redaction keeps the text between flagged
spans exactly as it stands, so each part between placeholders is verbatim text of the stored chunk:
quotes are placed (`cograg.answer.quotes.locate_quote`), offered to the backend's grammar and
chosen for a refusal among those parts only — never across a placeholder, and never in the
redacted instructions, which the model was not shown either.
"""

from __future__ import annotations

import re

from cograg.retrieval.packing import ContextBlock

REDACTED = "[instruction-like text removed]"
# the placeholder as a model may copy it: brackets or case lost, spacing changed
PLACEHOLDER = re.compile(r"\[?\s*instruction-like\s+text\s+removed\s*\]?", re.I)
MIN_PART_CHARS = 4  # shorter than any quote (`quotes.find_quote`)


def clean_parts(text: str) -> list[str]:
    """The parts of a redacted `text` between placeholders, stripped, each the source's own text;
    `text` itself, untouched, when it holds no placeholder."""
    if not PLACEHOLDER.search(text):
        return [text]
    return [p.strip() for p in PLACEHOLDER.split(text) if len(p.strip()) >= MIN_PART_CHARS]


def holds_placeholder(text: str) -> bool:
    return bool(PLACEHOLDER.search(text))


def quotable_texts(block: ContextBlock) -> list[tuple[int, str]]:
    """(chunk index, text) for every part of the block's chunks a quote may be (`clean_parts`)."""
    return [(i, part) for i, t in enumerate(block.chunk_texts or [block.text]) for part in clean_parts(t)]


def quotable_blocks(blocks: list[ContextBlock]) -> list[ContextBlock]:
    """`blocks` with each redacted chunk cut into its clean parts: what the verbatim-quote grammar
    (`contract.verbatim_draft_schema`) may offer, so no quote choice holds the placeholder or runs
    across it. Only the quote texts and ids of these copies are read; answers cite the originals."""
    return [b.model_copy(update={"chunk_texts": [t for _, t in quotable_texts(b)]})
            if any(holds_placeholder(t) for t in b.chunk_texts or [b.text]) else b for b in blocks]
