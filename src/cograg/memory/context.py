"""Layered prompt context (SPEC E3, seed 004 §6.2–6.3) and the answer cache key.

Layers: L2 the rolling session summary, L0 the last raw turns, L1 summaries of the other unfolded
turns, L3 the ledger facts relevant to the question. The allocator gives each layer a share of one
token budget (in the order L2 → L0 → L1 → L3 of seed 004, a layer's unused share passes on), and
blocks are ordered by (layer priority, time, id) with fixed serialisation, so an unchanged
history renders to the same prompt prefix turn after turn."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from functools import lru_cache

from pydantic import BaseModel, Field

from cograg.memory.models import Fact, Session, TurnRecord

LAYER_ORDER = ("L2", "L0", "L1", "L3")
# share of the budget per layer; what a layer does not use passes to the next
LAYER_SHARE = {"L2": 0.2, "L0": 0.35, "L1": 0.2, "L3": 0.25}
RAW_TURNS = 2  # L0: the last two turns word for word
CACHE_FORMAT = "answer-cache@1"

# the kind of answer a question asks for: "when" and "where" questions about one thing differ
_WH = re.compile(r"\b(how\s+(?:many|much|long|old|far|tall|high|big)|when|where|who|whom|whose|which|why|what|how)\b"
                 r"|哪一年|哪年|什么时候|何时|多少|几|哪里|哪儿|谁|为什么|如何|怎么|什么|哪", re.I)
_ANSWER_KIND_TERMS = frozenset({"year", "date", "mani", "much"})  # analysed forms; the kind says them
_WH_ALIASES = {"whom": "who", "whose": "who", "哪一年": "when", "哪年": "when", "什么时候": "when", "何时": "when",
               "多少": "how many", "几": "how many", "哪里": "where", "哪儿": "where", "谁": "who", "为什么": "why",
               "如何": "how", "怎么": "how", "什么": "what", "哪": "which"}


class ContextBlock(BaseModel):
    layer: str
    block_id: str
    at: float
    text: str
    tokens: int


class LayeredContext(BaseModel):
    blocks: list[ContextBlock] = Field(default_factory=list)
    budget_tokens: int = 0
    dropped: list[str] = Field(default_factory=list, description="blocks that did not fit")

    @property
    def block_ids(self) -> list[str]:
        return [b.block_id for b in self.blocks]

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)

    def render(self, layers: Sequence[str] = LAYER_ORDER) -> str:
        titles = {"L2": "session summary", "L0": "recent turns", "L1": "earlier turns", "L3": "established facts"}
        out: list[str] = []
        for layer in layers:
            texts = [b.text for b in self.blocks if b.layer == layer]
            if texts:
                out.append(f"## {titles[layer]}\n" + "\n".join(texts))
        return "\n\n".join(out)


def normalise_query(question: str) -> str:
    """What two questions must share to be the same question for the cache: their analysed
    content terms (stemmed, stop words out, any order) and the kind of answer asked for."""
    from cograg.index.analyzer import analyze

    terms = sorted(set(analyze(question)) - _ANSWER_KIND_TERMS)
    m = _WH.search(question)
    kind = "yes/no"
    if m:
        word = re.sub(r"\s+", " ", m.group(0).lower())
        kind = _WH_ALIASES.get(word, word)
        if kind in ("what", "which") and re.search(r"\b(year|date)\b|哪一年", question, re.I):
            kind = "when"
    return f"{kind}|{' '.join(terms)}"


@lru_cache(maxsize=50_000)
def _terms(text: str) -> frozenset[str]:
    """Analysed terms of a fact statement; a statement never changes, so each is analysed once."""
    from cograg.index.analyzer import analyze

    return frozenset(analyze(text))


def relevant_facts(question: str, facts: list[Fact], limit: int,
                   admit: Callable[[Fact], bool] | None = None) -> list[Fact]:
    """The facts sharing the most content terms with the question (at least one), ordered as
    established (stable prompt order). `admit` is asked of the best candidates only, until
    `limit` are admitted: a fact it refuses (its source is one the caller may not read) neither
    enters the turn nor takes a readable fact's place."""
    if limit <= 0:
        return []
    terms = _terms(question)
    if not terms:
        return []
    scored = []
    for f in facts:
        if not f.valid:
            continue
        overlap = len(terms & _terms(f.statement))
        if overlap:
            scored.append((overlap, f.created_at, f.fact_id, f))
    scored.sort(key=lambda s: (-s[0], -s[1], s[2]))
    chosen: list[Fact] = []
    for s in scored:
        if len(chosen) >= limit:
            break
        if admit is None or admit(s[3]):
            chosen.append(s[3])
    return sorted(chosen, key=lambda f: (f.created_at, f.fact_id))


def build_context(session: Session, turns: list[TurnRecord], facts: list[Fact], *, budget_tokens: int,
                  count_tokens: Callable[[str], int]) -> LayeredContext:
    """The layered context within `budget_tokens` (the allocator): each layer fills its share,
    newest blocks first; its unused share passes to the next layer."""
    candidates: dict[str, list[ContextBlock]] = {layer: [] for layer in LAYER_ORDER}

    def block(layer: str, block_id: str, at: float, text: str) -> ContextBlock:
        return ContextBlock(layer=layer, block_id=block_id, at=at, text=text, tokens=count_tokens(text))

    s = session.summary
    if s.rolling:
        candidates["L2"].append(block("L2", f"L2:rolling:{s.folded_turns}", 0.0, s.rolling))
    if s.main_topics:
        candidates["L2"].append(block("L2", "L2:topics", 0.0, "topics: " + "; ".join(s.main_topics)))
    if s.unresolved_questions:
        candidates["L2"].append(block("L2", "L2:open", 0.0, "open: " + "; ".join(s.unresolved_questions)))
    raw, older = turns[-RAW_TURNS:], turns[:-RAW_TURNS]
    for t in raw:
        candidates["L0"].append(block("L0", f"L0:{t.turn_id}", t.created_at,
                                      f"user: {t.question}\nassistant: {t.answer}"))
    for t in older:
        candidates["L1"].append(block("L1", f"L1:{t.turn_id}", t.created_at, t.summary_medium or t.summary_short))
    for f in facts:
        candidates["L3"].append(block("L3", f"L3:{f.fact_id}", f.created_at, f"[{f.fact_id}] {f.statement}"))

    chosen: list[ContextBlock] = []
    dropped: list[str] = []
    carry = 0
    for layer in LAYER_ORDER:
        allowance = int(budget_tokens * LAYER_SHARE[layer]) + carry
        used = 0
        # newest first when something must go; kept blocks are re-sorted below
        for b in sorted(candidates[layer], key=lambda b: (-b.at, b.block_id)):
            if used + b.tokens <= allowance:
                chosen.append(b)
                used += b.tokens
            else:
                dropped.append(b.block_id)
        carry = allowance - used
    priority = {layer: i for i, layer in enumerate(LAYER_ORDER)}
    chosen.sort(key=lambda b: (priority[b.layer], b.at, b.block_id))
    return LayeredContext(blocks=chosen, budget_tokens=budget_tokens, dropped=dropped)


def cache_key(*, model: str, route: str, normalised_query: str, context_block_ids: Sequence[str],
              policy_version: str) -> str:
    """`hash(model, route, normalised query, context block ids, policy version)` (SPEC E3)."""
    payload = json.dumps([CACHE_FORMAT, model, route, normalised_query, sorted(context_block_ids), policy_version],
                         ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


__all__ = ["LAYER_ORDER", "ContextBlock", "LayeredContext", "build_context", "cache_key", "normalise_query",
           "relevant_facts"]
