"""Claim verifier (SPEC C3): every delivered sentence must be backed by the text it cites.

Per sentence: split off its markers; uncited sentences are unsupported by definition. Cited ones
go through cheap deterministic checks first (numbers, negation), then an embedding-similarity
pre-filter, and only then the judge (LLM, NLI model or lexical). Unsupported sentences are removed;
if too little survives, the caller turns the answer into a conservative reply.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from cograg.answer.contract import Citation, answer_sentences, best_sentence, markers_in, strip_markers
from cograg.models.judge import ClaimJudge, JudgeVerdict, Verdict
from cograg.text import normalise_for_match

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NEGATION_EN = re.compile(r"\b(not|no|never|none|nor|cannot|can't|isn't|wasn't|aren't|weren't|doesn't|didn't|don't|without)\b", re.I)
_NEGATION_ZH = re.compile(r"不|没有|没|未|无|非|别|否")


class ClaimCheck(BaseModel):
    sentence: str
    citation_ids: list[str]
    verdict: Verdict
    method: str
    reason: str = ""
    kept: bool
    similarity: float | None = None


class VerificationResult(BaseModel):
    answer: str = Field(description="the answer with unsupported sentences removed")
    claims: list[ClaimCheck]
    supported: int
    total: int

    @property
    def supported_ratio(self) -> float:
        return self.supported / self.total if self.total else 0.0


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(normalise_for_match(text))}


def _negated(text: str) -> bool:
    return bool(_NEGATION_EN.search(text) or _NEGATION_ZH.search(text))


class Verifier:
    def __init__(self, judge: ClaimJudge, *, embedder: Any = None, min_similarity: float = 0.72) -> None:
        self.judge = judge
        self.embedder = embedder
        self.min_similarity = min_similarity

    def _similarity(self, claim: str, evidence: str) -> float | None:
        if self.embedder is None:
            return None
        a, b = self.embedder.embed_queries([claim])[0], self.embedder.embed_passages([evidence])[0]
        return float(np.dot(a, b))

    def check(self, sentence: str, evidence_by_id: dict[str, str], question: str | None = None) -> ClaimCheck:
        ids = list(dict.fromkeys(k for k, _, _ in markers_in(sentence)))
        claim = strip_markers(sentence)
        known = [i for i in ids if i in evidence_by_id]
        if not known:
            return ClaimCheck(sentence=sentence, citation_ids=ids, verdict="UNRELATED", method="citation",
                              reason="no citation", kept=False)
        evidence = "\n".join(evidence_by_id[i] for i in known)
        missing = _numbers(claim) - _numbers(evidence)
        if missing:
            return ClaimCheck(sentence=sentence, citation_ids=known, verdict="UNRELATED", method="numbers",
                              reason=f"numbers not in the cited text: {', '.join(sorted(missing))}", kept=False)
        closest = best_sentence(claim, evidence)
        if _negated(claim) != _negated(closest) and _negated(claim) != _negated(evidence):
            return ClaimCheck(sentence=sentence, citation_ids=known, verdict="CONTRADICTED", method="negation",
                              reason="negation differs from the cited text", kept=False)
        sim = self._similarity(claim, evidence)
        if sim is not None and sim < self.min_similarity:
            return ClaimCheck(sentence=sentence, citation_ids=known, verdict="UNRELATED", method="similarity",
                              reason=f"similarity {sim:.2f} < {self.min_similarity}", kept=False, similarity=sim)
        try:
            v: JudgeVerdict = self.judge.judge(claim, evidence, question)
        except Exception as exc:  # noqa: BLE001 - a failing judge must not fail the answer; it fails closed
            return ClaimCheck(sentence=sentence, citation_ids=known, verdict="UNRELATED", method=self.judge.name,
                              reason=f"judge failed: {type(exc).__name__}", kept=False, similarity=sim)
        return ClaimCheck(sentence=sentence, citation_ids=known, verdict=v.verdict, method=self.judge.name,
                          reason=v.reason, kept=v.verdict == "SUPPORTED", similarity=sim)

    def verify(self, answer: str, citations: list[Citation], evidence_by_id: dict[str, str],
               question: str | None = None) -> VerificationResult:
        """`evidence_by_id`: citation id → the full text of the cited block."""
        claims = [self.check(s, evidence_by_id, question) for s in answer_sentences(answer)]
        kept = " ".join(c.sentence for c in claims if c.kept)
        return VerificationResult(answer=kept, claims=claims, supported=sum(c.kept for c in claims),
                                  total=len(claims))
