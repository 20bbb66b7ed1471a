"""Context packing (SPEC B6): fit whole chunks into a token budget, merge neighbours, order them.

"Lost in the middle": models read the start and end of a long context best, so `edges_first`
puts the strongest evidence at both ends and the weakest in the middle.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from cograg.ingest.tokens import count_tokens
from cograg.retrieval.models import SearchHit, SourceLocation

PackOrder = Literal["relevance_first", "edges_first"]


class ContextBlock(SourceLocation):
    citation_id: int
    doc_id: str
    chunk_ids: list[str]
    chunk_texts: list[str] = Field(default_factory=list, description="text of each chunk, same order")
    chunk_headings: list[list[str]] = Field(default_factory=list,
                                            description="heading path of each chunk, same order")
    text: str
    token_count: int
    best_rank: int = Field(description="1 = most relevant hit in this block")
    annotations: list[str] = Field(default_factory=list)

    @property
    def label(self) -> str:
        where = " › ".join([self.title] + [h for h in self.heading_path if h != self.title])
        page = f", p. {self.page}" if self.page else ""
        note = "".join(f" ({a})" for a in self.annotations)
        return f"[{self.citation_id}] {where}{page} — {self.source}{note}"

    def heading_path_of(self, index: int) -> list[str]:
        """The headings above chunk `index`: a block of neighbouring chunks can run into the next
        section, and a citation of its chunk there names that section, not the block's first."""
        return self.chunk_headings[index] if index < len(self.chunk_headings) else self.heading_path


class ContextPack(BaseModel):
    blocks: list[ContextBlock]
    total_tokens: int
    budget_tokens: int
    order: PackOrder
    dropped_chunk_ids: list[str] = Field(default_factory=list, description="hits that did not fit")

    def render(self) -> str:
        return "\n\n".join(f"{b.label}\n{b.text}" for b in self.blocks)


def block_holding(chunk_id: str | None, blocks: list[ContextBlock]) -> ContextBlock | None:
    """The block of `blocks` that holds the chunk (a citation names its chunk, the verifier reads its block)."""
    return next((b for b in blocks if chunk_id in b.chunk_ids), None)


def _edges_first(items: list[ContextBlock]) -> list[ContextBlock]:
    front, back = [], []
    for i, item in enumerate(items):
        (front if i % 2 == 0 else back).append(item)
    return front + back[::-1]


def pack_context(hits: list[SearchHit], budget_tokens: int, *, order: PackOrder = "relevance_first",
                 merge_adjacent: bool = True) -> ContextPack:
    """Choose hits in relevance order while whole chunks fit the budget, merge chunks of one
    document that touch or overlap into one block, and number the blocks as citation ids."""
    if budget_tokens < 1:
        raise ValueError("budget_tokens must be at least 1")
    chosen: list[tuple[int, SearchHit]] = []
    dropped: list[str] = []
    used = 0
    for rank, hit in enumerate(hits, start=1):
        if any(h.chunk_id == hit.chunk_id for _, h in chosen):
            continue
        if used + hit.token_count > budget_tokens:
            dropped.append(hit.chunk_id)
            continue
        chosen.append((rank, hit))
        used += hit.token_count

    groups: list[list[tuple[int, SearchHit]]] = []
    by_doc: dict[str, list[tuple[int, SearchHit]]] = {}
    for rank, hit in chosen:
        by_doc.setdefault(hit.doc_id, []).append((rank, hit))
    for items in by_doc.values():
        items.sort(key=lambda rh: rh[1].seq)
        run = [items[0]]
        for rank, hit in items[1:]:
            prev = run[-1][1]
            touching = hit.seq == prev.seq + 1 or hit.start <= prev.end
            if merge_adjacent and touching and hit.page == prev.page:
                run.append((rank, hit))
            else:
                groups.append(run)
                run = [(rank, hit)]
        groups.append(run)

    blocks: list[ContextBlock] = []
    for run in groups:
        text, end = run[0][1].text, run[0][1].end
        for _, hit in run[1:]:
            if hit.start < end:  # overlapping chunks: append only the part not already there
                text += hit.text[end - hit.start:]
            else:
                text += "\n" + hit.text
            end = max(end, hit.end)
        first = run[0][1]
        blocks.append(ContextBlock(
            citation_id=0, doc_id=first.doc_id, chunk_ids=[h.chunk_id for _, h in run],
            chunk_texts=[h.text for _, h in run], chunk_headings=[h.heading_path for _, h in run], title=first.title,
            source=first.source, heading_path=first.heading_path, page=first.page, text=text,
            token_count=count_tokens(text), best_rank=min(r for r, _ in run),
            annotations=sorted({a for _, h in run for a in h.annotations})))
    blocks.sort(key=lambda b: b.best_rank)
    if order == "edges_first":
        blocks = _edges_first(blocks)
    for i, b in enumerate(blocks, start=1):
        b.citation_id = i
    return ContextPack(blocks=blocks, total_tokens=sum(b.token_count for b in blocks),
                       budget_tokens=budget_tokens, order=order, dropped_chunk_ids=dropped)
