"""Document-level evidence for chunk ranking (option): a chunk of a document that matches in
several places ranks above an equally good chunk of a document that matches once.

Each document's score is its best chunk's score plus a decaying share of its next best ones
(`max + decay·s2 + decay²·s3 …`, over the top `depth` chunks), rescaled to the chunk scores'
range; each chunk then gets `(1 − weight)·own + weight·document`. A long document split into many
chunks no longer loses to a short one just because its evidence is spread out.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from pydantic import BaseModel, Field

K = TypeVar("K", bound=Hashable)
G = TypeVar("G", bound=Hashable)


class DocumentAggregation(BaseModel):
    weight: float = Field(0.3, ge=0.0, le=1.0, description="share of the document's score in a chunk's score")
    decay: float = Field(0.5, ge=0.0, le=1.0, description="weight of the 2nd best chunk; the 3rd gets decay², …")
    depth: int = Field(3, ge=1, le=50, description="chunks per document that count")


def document_scores(scored: Sequence[tuple[K, float]], group_of: Mapping[K, G],
                    decay: float = 0.5, depth: int = 3) -> dict[G, float]:
    """max + decay·second + decay²·third … per group, over chunk scores in [0, 1]; divided by
    the largest possible sum so a document score stays in [0, 1] too."""
    per: dict[G, list[float]] = {}
    for key, s in scored:
        per.setdefault(group_of.get(key, key), []).append(s)  # type: ignore[arg-type]
    norm = sum(decay ** i for i in range(depth))
    return {g: sum(s * decay ** i for i, s in enumerate(sorted(v, reverse=True)[:depth])) / norm
            for g, v in per.items()}


def aggregate(scored: Sequence[tuple[K, float]], group_of: Mapping[K, G],
              settings: DocumentAggregation | None = None) -> list[tuple[K, float]]:
    """Chunk scores blended with their document's score, best first (stable on ties).
    Input scores are min-max normalised first, so any fusion's scores can be passed."""
    cfg = settings or DocumentAggregation()
    if not scored or cfg.weight == 0:
        return list(scored)
    lo = min(s for _, s in scored)
    hi = max(s for _, s in scored)
    span = hi - lo if hi - lo > 1e-12 else 1.0
    norm = [(k, (s - lo) / span if hi - lo > 1e-12 else 1.0) for k, s in scored]
    docs = document_scores(norm, group_of, cfg.decay, cfg.depth)
    out = [(k, (1 - cfg.weight) * s + cfg.weight * docs[group_of.get(k, k)])  # type: ignore[index]
           for k, s in norm]
    order = sorted(range(len(out)), key=lambda i: -out[i][1])
    return [out[i] for i in order]
